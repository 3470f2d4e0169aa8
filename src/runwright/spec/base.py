"""The base every spec record derives from: frozen, unknown keys rejected, described fields."""

from pydantic import ConfigDict

from runwright.records import Record


class Section(Record):
    """A frozen part of a job spec; unknown keys are errors, so a typo never silently defaults.
    On top of the shared record config: defaults are validated and no number may be inf or NaN."""

    model_config = ConfigDict(validate_default=True, allow_inf_nan=False)
