"""Where a run's metrics go besides runwright's own store: the experiment trackers users already
keep their curves in (docs/trackers.md). Off unless a tracker is named."""

import itertools
import re

from pydantic import Field, PositiveFloat, PositiveInt, field_validator

from runwright.spec import limits
from runwright.spec.alerts import AlertsSpec
from runwright.spec.base import Section

DEFAULT_SYSTEM_SAMPLE_SECONDS = 10.0
MIN_SYSTEM_SAMPLE_SECONDS = 1.0
"""The rate bound: one stored event per node per second at most (a 128-node run at the 10 s
default stores 12.8 samples a second, about as many rows as its steps at one step a second)."""
MAX_SYSTEM_SAMPLE_SECONDS = 3600.0

_URI_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


class TensorBoardSpec(Section):
    """TensorBoard event files, written by rank 0."""

    log_dir: str | None = None
    """Parent folder of the event files: they go in `<log_dir>/<run id>/`, so `tensorboard
    --logdir <log_dir>` shows every run by its id. A relative path is read from the folder the
    workers start in (the spec's folder under `runwright submit`). None: the run folder's
    `tensorboard/`."""

    @field_validator("log_dir")
    @classmethod
    def _not_empty(cls, log_dir: str | None) -> str | None:
        if log_dir is not None and not log_dir.strip():
            raise ValueError("log_dir is empty; name a folder, or leave it out for the run's own")
        return log_dir


class MLflowSpec(Section):
    """An MLflow tracking server or local store, written by rank 0."""

    tracking_uri: str | None = None
    """`http(s)://host:port` of a tracking server, or a local store (`sqlite:///mlflow.db`).
    None: MLflow's own default (MLFLOW_TRACKING_URI, else its local default)."""
    experiment: str | None = Field(default=None, min_length=1, max_length=500)
    """Experiment name, created if missing. None: the spec's `name`."""

    @field_validator("tracking_uri")
    @classmethod
    def _usable_uri(cls, uri: str | None) -> str | None:
        if uri is None:
            return None
        if not uri.strip() or any(c.isspace() for c in uri):
            raise ValueError(
                f"tracking_uri {uri!r} is empty or holds spaces; e.g. http://127.0.0.1:5000 or "
                "sqlite:///mlflow.db"
            )
        if uri.startswith(("http:", "https:")) and not re.match(r"^https?://[^/]", uri):
            raise ValueError(f"tracking_uri {uri!r} names no host; e.g. http://127.0.0.1:5000")
        if not _URI_SCHEME.match(uri) and "://" in uri:
            raise ValueError(f"tracking_uri {uri!r} has no valid scheme")
        return uri


class TrackersSpec(Section):
    """The trackers a run reports to; each is off unless named."""

    tensorboard: TensorBoardSpec | None = None
    """TensorBoard event files (`{}` switches them on with the default folder)."""
    mlflow: MLflowSpec | None = None
    """An MLflow tracking server or local store."""
    flush_seconds: PositiveFloat = Field(default=5.0, le=limits.MAX_SECONDS)
    """Longest a reported step waits in memory before the background writer sends it."""
    flush_steps: PositiveInt = Field(default=50, le=limits.MAX_STEPS)
    """Steps after which the writer sends what it holds without waiting for `flush_seconds`."""
    finish_seconds: PositiveFloat = Field(default=15.0, le=limits.MAX_SECONDS)
    """Longest rank 0's exit waits for the trackers to send the rest and close their runs; what
    is not sent by then is counted as dropped (trackers.json). Below
    `recovery.stop_grace_seconds`, so a dead tracker never gets a stopping run killed."""

    @property
    def switched_on(self) -> bool:
        """Whether any tracker is named (else rank 0 starts no writer at all)."""
        return self.tensorboard is not None or self.mlflow is not None


class ObservabilitySpec(Section):
    """What a run reports outside runwright."""

    trackers: TrackersSpec = Field(default_factory=TrackersSpec)
    """Experiment trackers (TensorBoard, MLflow) that get each step's metrics, the spec as
    parameters and the run's evidence as artifacts."""
    alerts: AlertsSpec = Field(default_factory=AlertsSpec)
    """Alert rules the controller evaluates while the run trains (spec/alerts.py)."""
    drift_window_steps: int | None = Field(default=50, ge=1, le=limits.MAX_STEPS)
    """Steps per MIXTURE_WINDOW the reference trainer's loader reports (what each source
    contributed against the recipe's targets, which the `mixture_drift` rule reads); None: no
    windows. Shorter windows see a drift sooner and are noisier."""
    loss_by_source: bool = True
    """The reference trainer reports each step's loss by mixture source and by document length
    bucket (runtime/source_loss.py: `source_loss` and `length_loss` of STEP_HEALTHY), which the
    timeline, the report, the dashboard and the `source_loss_diverged` rule read."""
    loss_length_buckets: tuple[int, ...] = Field(default=(128, 512, 2048, 8192), max_length=32)
    """Inclusive upper bounds, in tokens per document, of the length buckets of the loss
    breakdown (the last bucket is everything longer): (128, 512) gives 1-128, 129-512, >512."""
    system_sample_seconds: float | None = DEFAULT_SYSTEM_SAMPLE_SECONDS
    """Seconds between two samples of each node's CPU, memory, disks, network and GPUs
    (SYSTEM_SAMPLE, taken by a thread of the node's local rank 0: runtime/system_sampler.py);
    None: no samples. Between MIN_SYSTEM_SAMPLE_SECONDS and an hour."""

    @field_validator("loss_length_buckets")
    @classmethod
    def _ascending_buckets(cls, edges: tuple[int, ...]) -> tuple[int, ...]:
        if any(e < 1 for e in edges) or any(b <= a for a, b in itertools.pairwise(edges)):
            raise ValueError(
                f"loss_length_buckets {list(edges)} must be positive, strictly ascending token "
                "counts, e.g. [128, 512, 2048]"
            )
        return edges

    @field_validator("system_sample_seconds")
    @classmethod
    def _bounded_rate(cls, seconds: float | None) -> float | None:
        if seconds is not None and not (
            MIN_SYSTEM_SAMPLE_SECONDS <= seconds <= MAX_SYSTEM_SAMPLE_SECONDS
        ):
            raise ValueError(
                f"system_sample_seconds={seconds:g} is outside {MIN_SYSTEM_SAMPLE_SECONDS:g}.."
                f"{MAX_SYSTEM_SAMPLE_SECONDS:g}; a node is sampled at most once a second (each "
                "sample is one stored event per node), so give e.g. 10, or null to switch "
                "sampling off"
            )
        return seconds
