"""The one exception hierarchy of runwright.

Every error a user can cause derives from `RunwrightError` and carries a message that says what to
change. Expected outcomes (a stale write, an already-applied transition) are values, not exceptions.
This module imports nothing, so every layer (including `spec/`) may use it.
"""


class RunwrightError(Exception):
    """Base of every error runwright raises on purpose; the message is meant for the user."""


class SpecError(RunwrightError):
    """A job spec is malformed, contradictory or refers to something that does not exist.

    `problems` holds one line per offending field, each naming the field and what would be valid.
    """

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        self.problems = list(problems or [])
        text = (
            message
            if not self.problems
            else message + "\n" + "\n".join(f"  - {p}" for p in self.problems)
        )
        super().__init__(text)


class StoreError(RunwrightError):
    """The durable store cannot be opened, migrated or reached."""


class StoreUnavailableError(StoreError):
    """The store is there but cannot answer for now (SQLite locked past its busy timeout,
    PostgreSQL restarting or unreachable): retrying later can succeed, so the controller rides it
    out instead of stopping (store/faults.py, control/outage.py)."""


class LeaseLostError(RunwrightError):
    """A controller's write or action on a run was refused: its lease on the run is no longer
    current (another controller took the run over, or the lease may have run out while this one
    could not renew it). The controller drops the run and leaves it to the holder
    (store/leases.py, control/leasing.py); it is not a fault."""


class NotFoundError(RunwrightError):
    """A run, dataset or checkpoint named by the user does not exist."""


class LaunchError(RunwrightError):
    """The executor could not start the worker group."""


class PlacementError(RunwrightError):
    """No executor can ever place the spec (more nodes than the pool has, a device kind it
    lacks); the message names the field and the fix. Raised at submit, before a run exists."""


class DrillError(RunwrightError):
    """A fault drill cannot run as asked (`runwright drill`): an unknown fault, a spec a fault
    cannot be injected into, or a fault-free reference run that did not succeed; the message
    names the fault or the field and the fix."""
