"""`checkpoint.resume_from` at launch: the controller resolves the run id or path the spec names
against the run's root and submit folder, and hands the workers the checkpoint root to start
from (protocol.ENV_RESUME_FROM); preflight (govern/preflight_resume.py) has checked it fits."""

from runwright.ckpt.inventory import resume_root
from runwright.protocol import ENV_RESUME_FROM
from runwright.spec import JobSpec
from runwright.store import RunRecord


def resume_env(spec: JobSpec, run: RunRecord) -> dict[str, str]:
    """The workers' environment for `spec`'s resume_from (empty without one)."""
    given = spec.checkpoint.resume_from
    if given is None:
        return {}
    return {ENV_RESUME_FROM: resume_root(given, run.root, run.workdir)}
