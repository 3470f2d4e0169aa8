"""The base every spec record derives from: frozen, unknown keys rejected, described fields."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A frozen part of a job spec; unknown keys are errors, so a typo never silently defaults."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        validate_default=True,
        use_attribute_docstrings=True,
        allow_inf_nan=False,
    )
