"""Where a launched group restores from, beyond "the run's newest committed checkpoint":

- `checkpoint.resume_from`: the controller resolves the run id or path the spec names against
  the run's root and submit folder, and hands the workers the checkpoint root to start from
  (protocol.ENV_RESUME_FROM); preflight (govern/preflight_resume.py) has checked it fits.
- an alert's rollback (control/alerts.py): the group launched right after it restores no
  checkpoint newer than the last one before the alert's step (ENV_RESTORE_AT_MOST_STEP).
"""

from runwright.ckpt.inventory import resume_root
from runwright.events import EventType
from runwright.protocol import ENV_RESTORE_AT_MOST_STEP, ENV_RESUME_FROM
from runwright.spec import JobSpec
from runwright.store import EventRecord, RunRecord


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
