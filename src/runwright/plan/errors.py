"""The planner's error: an input the formulas cannot honestly answer for."""

from runwright.errors import RunwrightError


class PlanError(RunwrightError):
    """A planning input is invalid or outside a model's assumptions; the message says what to
    change."""
