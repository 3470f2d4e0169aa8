"""What a run declares about its use of data, checked against each dataset's use policy
(runwright.data.policy) at submit and preflight, and what it does if a dataset is withdrawn while
it runs."""

from typing import Annotated, Literal

from pydantic import Field

from runwright.spec.base import Section

UsageName = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][\w.-]*$")]
"""A purpose or region name: letters, digits, `.`, `_`, `-`."""


class UsageSpec(Section):
    """The run's purpose and region (its project comes from the server's identity)."""

    purpose: UsageName | None = None
    """What the trained model is for, e.g. `research` or `commercial`; a dataset whose policy
    lists purposes refuses a run that declares none or another."""
    region: UsageName | None = None
    """Where the run trains, e.g. `eu`; a dataset whose policy lists regions refuses a run that
    declares none or another."""
    on_withdrawal: Literal["stop", "continue"] = "stop"
    """If a dataset it trains on is withdrawn while it runs: `stop` at the next step boundary
    with a save (the run ends CANCELLED, ALERT), or `continue` flagged (an alert, and the run
    and its checkpoints stay marked as trained on withdrawn data)."""
