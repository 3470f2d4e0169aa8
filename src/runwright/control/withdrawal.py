"""A dataset withdrawn under a live run (issue 25): the controller alerts, and the run's spec
decides the rest (`usage.on_withdrawal`).

Each controller pass over a live group looks, at most every CHECK_SECONDS, at the standing of the
datasets the run has reported training on (store run inputs). A dataset newly found withdrawn or
deleted is recorded once as DATA_WITHDRAWN and raises an ALERT_FIRED (kind `data_withdrawn`, owner
the spec's governance owner). With `on_withdrawal: stop` the group is asked to stop at its next
step boundary with a save, and the run ends CANCELLED with reason ALERT (control/stopping.py, as
an alert rule's `stop`); with `continue` it trains on, flagged: the event, the alert and the
report's data section say so, and release gates refuse its checkpoints (govern/release.py).

A run still QUEUED is checked again against its datasets' policies before it is admitted
(`refusal_before_start`): one withdrawn, deleted or newly forbidden while it waited fails it
FAILED_PERMANENT, naming the dataset, the field and who can change it, before any allocation.
"""

import time
from pathlib import Path

from runwright.control.journal import Journal
from runwright.events import EventType
from runwright.govern.data_contract import use_refusals, withdrawn_inputs
from runwright.spec import JobSpec
from runwright.store import RunRecord, Store

CHECK_SECONDS = 2.0
"""How often a live run's datasets are looked at: one indexed query each, so a withdrawal
reaches a run within a pass or two of the controller's loop."""
ALERT_KIND = "data_withdrawn"


class WithdrawalWatch:
    """The controller's view of withdrawals under its live runs (module docstring)."""

    def __init__(self, store: Store, journal: Journal) -> None:
        self.store = store
        self.journal = journal
        self._acted: dict[str, set[str]] = {}
        """run id -> the withdrawn dataset ids already recorded for it."""
        self._checked: dict[str, float] = {}
        """run id -> monotonic time of its last look."""

    def check(self, run: RunRecord, spec: JobSpec) -> bool:
        """Record and alert on newly withdrawn datasets; True when the group must stop."""
        now = time.monotonic()
        if now - self._checked.get(run.run_id, -CHECK_SECONDS) < CHECK_SECONDS:
            return False
        self._checked[run.run_id] = now
        acted = self._acted.setdefault(run.run_id, set())
        fresh = [v for v in withdrawn_inputs(self.store, run.run_id) if v.dataset_id not in acted]
        if not fresh:
            return False
        stop = spec.usage.on_withdrawal == "stop"
        for version in fresh:
            acted.add(version.dataset_id)
            short = version.dataset_id[:16]
            said = (
                f"dataset {short} {version.standing.value} by {version.changed_by}: "
                f"{version.reason or 'no reason given'}"
            )
            self.journal.record(
                run,
                EventType.DATA_WITHDRAWN,
                op=f"withdrawn:{version.dataset_id}",
                per_step=False,
                dataset_id=version.dataset_id,
                standing=version.standing.value,
                policy_version=version.version,
                reason=version.reason,
                by=version.changed_by,
                on_withdrawal=spec.usage.on_withdrawal,
            )
            self.journal.record(
                run,
                EventType.ALERT_FIRED,
                op=f"fire:{ALERT_KIND}:{short}",
                per_step=False,
                alert_id=f"{ALERT_KIND}:{short}",
                rule=ALERT_KIND,
                kind=ALERT_KIND,
                severity="critical",
                owner=spec.governance.owner,
                summary=said,
                evidence=f"policy v{version.version} of dataset {version.dataset_id}",
                action="stop" if stop else "continue",
                action_result="asked the group to stop at its next step boundary with a save"
                if stop
                else "none: usage.on_withdrawal is continue; the run trains on, flagged",
                dataset_id=version.dataset_id,
            )
        return stop

    def refusal_before_start(self, run: RunRecord, spec: JobSpec) -> str | None:
        """Why the data contract now refuses a QUEUED run, or None. Submit and preflight
        checked it once; a run can wait in the queue for hours while its dataset is withdrawn,
        deleted or its policy changed (an expiry passing too), so it is checked again, at most
        every CHECK_SECONDS, until it is admitted: it fails before anything is allocated
        instead of starting to train on data it may no longer use."""
        now = time.monotonic()
        if now - self._checked.get(run.run_id, -CHECK_SECONDS) < CHECK_SECONDS:
            return None
        self._checked[run.run_id] = now
        found = use_refusals(self.store, spec, Path(run.workdir), run.project, Path(run.root))
        if not found:
            return None
        return "the data contract refuses it since it was queued: " + "; ".join(
            refusal.message() for refusal in found
        )

    def forget(self, run_id: str) -> None:
        self._acted.pop(run_id, None)
        self._checked.pop(run_id, None)
