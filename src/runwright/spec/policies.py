"""How a run is kept alive and bounded: checkpoints, recovery, budget, reproducibility,
governance."""

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator, model_validator

from runwright.spec import limits
from runwright.spec.base import Section
from runwright.spec.location import checkpoint_location


class CheckpointIntervalSpec(Section):
    """When to checkpoint."""

    policy: Literal["steps", "seconds", "auto"] = "steps"
    """`steps`/`seconds` fixed; `auto` = Young/Daly optimum from the measured save stall and the
    mean time between failures."""
    every_steps: PositiveInt | None = Field(default=50, le=limits.MAX_STEPS)
    """Checkpoint every N optimizer steps (policy: steps)."""
    every_seconds: PositiveFloat | None = Field(default=None, le=limits.MAX_SECONDS)
    """Checkpoint every N seconds of training (policy: seconds)."""
    mtbf_seconds: PositiveFloat | None = Field(default=None, le=limits.MAX_SECONDS)
    """Declared mean time between failures for policy: auto, until one is observed."""

    @model_validator(mode="after")
    def _policy_inputs(self) -> "CheckpointIntervalSpec":
        if self.policy == "steps" and self.every_steps is None:
            raise ValueError("policy: steps needs every_steps (e.g. every_steps: 100)")
        if self.policy == "seconds" and self.every_seconds is None:
            raise ValueError("policy: seconds needs every_seconds (e.g. every_seconds: 1800)")
        if self.policy == "auto" and self.mtbf_seconds is None:
            raise ValueError(
                "policy: auto needs mtbf_seconds (the declared mean time between failures)"
            )
        return self


class CheckpointSpec(Section):
    """The checkpoint policy."""

    enabled: bool = True
    """Whether the run checkpoints at all."""
    interval: CheckpointIntervalSpec = Field(default_factory=CheckpointIntervalSpec)
    """When to save."""
    mode: Literal["sync", "async"] = "sync"
    """`async` returns to training once the snapshot is staged in host memory."""
    max_inflight: PositiveInt = Field(default=1, le=limits.MAX_BACKLOG)
    """Async backlog bound: staged snapshots not yet committed."""
    when_full: Literal["block", "skip", "sync"] = "block"
    """What an async save does when the backlog is full."""
    keep_last: PositiveInt = Field(default=3, le=limits.MAX_KEEP)
    """Retention: keep the newest N committed checkpoints."""
    keep_every_steps: PositiveInt | None = Field(default=None, le=limits.MAX_STEPS)
    """Retention: also keep every checkpoint whose step is a multiple of K."""
    verify_on_restore: Literal["full", "sampled", "none"] = "full"
    """How restore checks shard checksums."""
    resume: Literal["exact", "coverage", "distribution"] = "exact"
    """Resume semantics: exact sample sequence, coverage only, or distribution only."""
    save_on_stop: bool = True
    """Save at the stop step on cancel, preemption or budget exhaustion."""
    on_save_failure: Literal["skip", "stop"] = "stop"
    """A save storage refuses (full volume): `stop` raises CheckpointStorageError, `skip` alerts
    (CHECKPOINT_FAILED) and trains on without that checkpoint."""
    save_timeout_seconds: PositiveFloat = Field(default=600.0, le=limits.MAX_SECONDS)
    """How long one save may persist (shard writes through the publish) before it counts as a
    storage failure with errno ETIMEDOUT; the run then stops whatever on_save_failure says (a
    blocked write cannot be abandoned in-process) and the storage retry policy restarts it.
    600 s writes a 100 GB checkpoint at 170 MB/s."""
    location: str | None = None
    """Where the run's checkpoints go: an absolute folder or `s3://bucket/prefix`; the run's
    checkpoint root is `<location>/<run id>`. None: `<run folder>/checkpoints`. Credentials and
    endpoint come from the AWS environment (docs/ckpt.md, "Object stores"). A storage drill puts
    `faulty+` before a `file:///` or `s3://` location (docs/ckpt.md, "Storage fault drills")."""
    resume_from: str | None = Field(default=None, min_length=1, max_length=1000)
    """Start from another run's checkpoint when this run has none of its own: that run's id
    (under this run's root) or its checkpoint folder or URL; its newest committed checkpoint
    that verifies is loaded (model, optimizer, data cursor, step) and training continues to
    `training.steps`. It must fit this spec (tokenizer, dataset, model shapes) and may differ
    in world size or layout (resharded); preflight checks it before the run is queued."""

    @field_validator("location")
    @classmethod
    def _location_is_usable(cls, location: str | None) -> str | None:
        return checkpoint_location(location)

    @field_validator("resume_from")
    @classmethod
    def _resume_from_is_a_name_or_place(cls, given: str | None) -> str | None:
        if given is not None and ("\0" in given or given != given.strip()):
            raise ValueError(
                "must be a run id, a checkpoint folder or a URL, without NUL or surrounding spaces"
            )
        return given


class FailureClass(StrEnum):
    """Failure taxonomy; each class has its own retry policy (seed 003, "recovery starts with
    classification")."""

    USER_CODE = "user_code"
    OOM = "oom"
    NAN_INF = "nan_inf"
    HANG = "hang"
    NO_PROGRESS = "no_progress"
    DATA = "data"
    STORAGE = "storage"
    NODE_LOST = "node_lost"
    PREEMPTION = "preemption"
    INFRASTRUCTURE = "infrastructure"
    SDC = "sdc"
    """Silent data corruption: a replica, recomputation or invariant check failed."""


class ClassPolicy(Section):
    """Retry policy for one failure class."""

    max_retries: int = Field(default=2, ge=0, le=limits.MAX_RETRIES)
    """Restarts allowed for this class before the run fails."""
    backoff_seconds: float = Field(default=1.0, ge=0.0, le=limits.MAX_SECONDS)
    """First restart delay; doubles each retry."""
    backoff_max_seconds: float = Field(default=60.0, ge=0.0, le=limits.MAX_SECONDS)
    """Cap on the restart delay."""
    consumes_error_budget: bool = True
    """Whether a failure of this class counts against max_total_restarts."""


def _default_class_policies() -> dict[FailureClass, ClassPolicy]:
    deterministic = ClassPolicy(max_retries=1)
    return {
        FailureClass.USER_CODE: deterministic,
        FailureClass.OOM: deterministic,
        FailureClass.NAN_INF: ClassPolicy(max_retries=1),
        FailureClass.HANG: ClassPolicy(max_retries=3),
        FailureClass.NO_PROGRESS: ClassPolicy(max_retries=2),
        FailureClass.DATA: deterministic,
        FailureClass.STORAGE: ClassPolicy(max_retries=3, backoff_seconds=5.0),
        FailureClass.NODE_LOST: ClassPolicy(max_retries=3),
        FailureClass.PREEMPTION: ClassPolicy(max_retries=100, consumes_error_budget=False),
        # Corruption is the hardware's, not the code's: roll back to the known-good checkpoint
        # and retry off the quarantined node, but a third detection in one run means the fault
        # follows the run (a bad part everywhere, or a bug that breaks replica equality).
        FailureClass.SDC: ClassPolicy(max_retries=2),
        # The platform's own faults (a lost supervisor, a store, launch or rendezvous error) are
        # not the run's: they do not spend its error budget, and their own limit leaves room for
        # a few on one run; max_restarts_without_progress still stops a platform that never lets
        # a generation get past its restored step.
        FailureClass.INFRASTRUCTURE: ClassPolicy(
            max_retries=5, backoff_seconds=5.0, consumes_error_budget=False
        ),
    }


class RecoverySpec(Section):
    """Failure detection and per-class recovery."""

    heartbeat_interval_seconds: PositiveFloat = Field(default=2.0, le=limits.MAX_SECONDS)
    """How often each rank reports it is alive."""
    heartbeat_timeout_seconds: PositiveFloat = Field(default=30.0, le=limits.MAX_SECONDS)
    """Silence after which a rank counts as hung."""
    progress_timeout_seconds: PositiveFloat = Field(default=120.0, le=limits.MAX_SECONDS)
    """Time without a step advance that counts as no progress: the start-up allowance (a rank's
    first heartbeat; three times this until warmup_steps) and the cap of the steady-state
    limit, which the watchdog derives from the generation's own step times and confirms from
    the ranks' CPU (control/watchdog.py, control/stall.py)."""
    warmup_steps: int = Field(default=1, ge=0, le=limits.MAX_STEPS)
    """Steps excluded from the progress timeout (compilation, first data reads)."""
    max_total_restarts: int = Field(default=5, ge=0, le=limits.MAX_RETRIES)
    """Restarts across all budget-consuming classes."""
    max_restarts_without_progress: PositiveInt = Field(default=2, le=limits.MAX_RETRIES)
    """Consecutive restarts with no step past the restored one before the run stops."""
    policies: dict[FailureClass, ClassPolicy] = Field(default_factory=_default_class_policies)
    """Per-class policy; classes left out keep their defaults."""
    on_nan: Literal["rollback_skip", "fail"] = "rollback_skip"
    """After a NaN/Inf: roll back and skip the offending batch range, or fail."""
    on_exhausted: Literal["fail", "pause"] = "fail"
    """Past a retry limit, or for a failure that needs a person (a repeated hang or NaN, a
    checkpoint that fails verification, a data permission error): fail the run, or pause it
    with its checkpoints held, an alert and a diagnostics bundle (control/escalation.py). fail
    by default: an unattended run (a sweep, a drill, CI) needs a terminal state to free its
    place, and a paused run waits for a person for good."""
    stop_grace_seconds: PositiveFloat = Field(default=30.0, le=limits.MAX_SECONDS)
    """Time a worker group gets to stop at a step boundary before it is killed."""
    warm_standby: bool = False
    """Keep the next generation's worker group started and waiting beside the one that trains
    (interpreters up, imports done), so a restart after a failure activates it instead of
    starting processes (docs/control.md, "Warm standby"). Costs a second idle process per rank
    and its memory. The local executor only; other executors ignore it."""

    @model_validator(mode="after")
    def _timeouts_ordered(self) -> "RecoverySpec":
        hi, ht, pt = (
            self.heartbeat_interval_seconds,
            self.heartbeat_timeout_seconds,
            self.progress_timeout_seconds,
        )
        if not hi < ht < pt:
            raise ValueError(
                "need heartbeat_interval_seconds < heartbeat_timeout_seconds < "
                f"progress_timeout_seconds; got {hi} < {ht} < {pt}. "
                f"e.g. heartbeat_timeout_seconds >= {hi * 3:g} and progress_timeout_seconds "
                f">= {max(ht, hi * 3) * 2:g}"
            )
        return self

    def policy_for(self, failure: FailureClass) -> ClassPolicy:
        return self.policies.get(failure) or _default_class_policies()[failure]


class BudgetSpec(Section):
    """Hard limits; at a limit the run stops at a step boundary with a checkpoint."""

    device_hours: PositiveFloat | None = Field(default=None, le=limits.MAX_DEVICE_HOURS)
    """Device-hours (processes x hours allocated)."""
    tokens: PositiveInt | None = Field(default=None, le=limits.MAX_TOKENS)
    """Training tokens consumed."""
    wall_seconds: PositiveFloat | None = Field(default=None, le=limits.MAX_SECONDS)
    """Wall-clock seconds from first start."""
    warn_fraction: float = Field(default=0.9, gt=0.0, lt=1.0)
    """Share of a limit at which the controller warns."""


class ReproducibilitySpec(Section):
    """What 'the same run' means (seed 004, "proving recovery equivalence")."""

    level: Literal["bitwise", "statistical", "semantic"] = "bitwise"
    """`bitwise`: deterministic kernels, parameters equal bit for bit after recovery."""


class LossAbove(Section):
    """Stop when the training loss, averaged over the last `window_steps` steps, is still above
    `loss` once `after_tokens` tokens were trained (the run is not learning as hoped)."""

    kind: Literal["loss_above"]
    loss: float
    after_tokens: int = Field(default=0, ge=0, le=limits.MAX_TOKENS)
    window_steps: PositiveInt = Field(default=10, le=limits.MAX_STEPS)


class NoImprovement(Section):
    """Stop when the loss has not come `min_delta` below its best earlier window in the last
    `windows` windows (a plateau). `metric: loss` averages the training loss per window of
    `window_steps` steps; `metric: eval_loss` takes each evaluation on the eval split
    (training.eval_every_steps) as one window."""

    kind: Literal["no_improvement"]
    metric: Literal["loss", "eval_loss"] = "loss"
    window_steps: PositiveInt = Field(default=50, le=limits.MAX_STEPS)
    windows: PositiveInt = Field(default=3, le=1000)
    min_delta: float = Field(default=0.0, ge=0.0)


class BudgetShare(Section):
    """Stop when `share` of a budget limit (`of`: tokens, device_hours or wall_seconds; the
    spec's `budget` must set it) is spent and the loss, averaged over the last `window_steps`
    steps, is not yet below `unless_loss_below` (the target will not be reached in time)."""

    kind: Literal["budget_share"]
    share: float = Field(gt=0.0, lt=1.0)
    of: Literal["tokens", "device_hours", "wall_seconds"]
    unless_loss_below: float
    window_steps: PositiveInt = Field(default=10, le=limits.MAX_STEPS)


StopCriterion = Annotated[LossAbove | NoImprovement | BudgetShare, Field(discriminator="kind")]
"""A stop criterion the controller evaluates (control/criteria.py)."""


class GovernanceSpec(Section):
    """Who owns the run and why it exists."""

    owner: str = "unknown"
    """Person or team accountable for the run."""
    hypothesis: str = ""
    """What the run is meant to show."""
    stop_criteria: list[StopCriterion | str] = Field(default_factory=list)
    """Conditions under which the run is stopped early: each a criterion the controller
    evaluates as the run trains (`kind`: loss_above, no_improvement, budget_share; met, it stops
    the run at a step boundary with a save, CANCELLED with STOP_CRITERION), or words for a
    person (recorded, not evaluated)."""
    tags: dict[str, str] = Field(default_factory=dict)
    """Free labels (project, licence, data usage)."""
