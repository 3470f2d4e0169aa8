"""Where a launched group restores from, beyond "the run's newest committed checkpoint":

- `checkpoint.resume_from`: the controller resolves the run id or path the spec names against
  the run's root and submit folder, and hands the workers the checkpoint root to start from
  (protocol.ENV_RESUME_FROM); preflight (govern/preflight_resume.py) has checked it fits.
- an alert's rollback (control/alerts.py): the group launched right after it restores no
  checkpoint newer than the last one before the alert's step (ENV_RESTORE_AT_MOST_STEP). Where
  retention removed that checkpoint before the alert was acted on (a controller that read the
  steps late), the rollback would go further back than the run's last healthy point and skip
  every step since: `RollbackPoint.removed` says so, and the run is paused for a person instead.
"""

from dataclasses import dataclass

from runwright.ckpt.inventory import resume_root
from runwright.events import EventType
from runwright.protocol import ENV_RESTORE_AT_MOST_STEP, ENV_RESUME_FROM
from runwright.spec import JobSpec
from runwright.store import EventRecord, RunRecord, Store
from runwright.store.catalog import COMMITTED, DELETED


def resume_env(spec: JobSpec, run: RunRecord) -> dict[str, str]:
    """The workers' environment for `spec`'s resume_from (empty without one)."""
    given = spec.checkpoint.resume_from
    if given is None:
        return {}
    return {ENV_RESUME_FROM: resume_root(given, run.root, run.workdir)}


def rollback_env(run: RunRecord, events: list[EventRecord]) -> dict[str, str]:
    """The restore cap of the generation launched right after a rollback (empty otherwise:
    a later restart restores the newest checkpoint, as always)."""
    for event in reversed(events):
        if event.type == EventType.RECOVERY_STARTED:
            at_most = event.attributes.get("restore_at_most_step")
            if isinstance(at_most, int) and event.generation == run.generation - 1:
                return {ENV_RESTORE_AT_MOST_STEP: str(at_most)}
            return {}
    return {}


@dataclass(frozen=True)
class RollbackPoint:
    """Where an alert's rollback of a run goes back to."""

    bad_step: int
    """The step the alert fired at."""
    last_step: int
    """The stopped group's last step."""
    start: int
    """The newest committed checkpoint before `bad_step` (0: none, the run's start)."""
    removed: tuple[int, ...]
    """Checkpoints between `start` and `bad_step` that retention removed: the healthy points
    the rollback would have gone back to."""
    why: str
    """The alert, in words."""

    def skip(self) -> list[int] | None:
        """The steps the restarted group skips: those after `start` up to the stop."""
        return [self.start + 1, self.last_step] if self.last_step > self.start else None

    def refusal(self, keep_last: int) -> str:
        """Why the rollback was not taken, and what a person can do, for the PAUSED detail."""
        removed = ", ".join(str(s) for s in self.removed)
        skipped = self.skip()
        return (
            f"{self.why}; its rollback was not taken: retention (checkpoint.keep_last "
            f"{keep_last}) removed the checkpoint{'s' if len(self.removed) > 1 else ''} at step "
            f"{removed} before the alert was acted on, so the newest one before step "
            f"{self.bad_step} is "
            + (f"at step {self.start}" if self.start else "none (the run's start)")
            + (f" and a rollback would skip steps {skipped[0]}-{skipped[1]}" if skipped else "")
            + "; resume to go on from the newest checkpoint, or cancel"
        )


def rollback_point(store: Store, run: RunRecord) -> RollbackPoint:
    """The rollback of `run`'s current generation, asked for by an alert (control/alerts.py)."""
    fired = [
        e
        for e in store.events(run.run_id, types=[EventType.ALERT_FIRED])
        if e.generation == run.generation and e.attributes.get("action") == "rollback"
    ]
    last = run.last_step or 0
    bad = (fired[-1].attributes.get("at_step") or fired[-1].step or last) if fired else last
    # The last healthy point: the newest checkpoint before the step the alert fired at (one
    # the group saved after it may carry what the alert saw).
    before = [c.step for c in store.checkpoints.list(run.run_id, status=COMMITTED) if c.step < bad]
    start = max(before, default=0)
    removed = sorted(
        {c.step for c in store.checkpoints.list(run.run_id, status=DELETED) if start < c.step < bad}
    )
    why = (
        f"alert {fired[-1].attributes.get('rule')}: {fired[-1].attributes.get('summary')}"
        if fired
        else "alert"
    )
    return RollbackPoint(bad, last, start, tuple(removed), why)
