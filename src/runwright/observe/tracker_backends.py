"""The trackers a run writes to: TensorBoard event files and MLflow. Each is a small class with
`start`, `write` and `finish`, called only from the sink's writer thread (`trackers.py`), so a
slow or failing tracker never holds up a training step. Their libraries are imported in `start`,
so nothing here costs an import until a run switches a tracker on.
"""

import contextlib
import json
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from runwright.errors import RunwrightError
from runwright.spec import MLflowSpec

TAG_PREFIX = "runwright."
"""MLflow tags runwright sets: `runwright.run_id` finds a run's MLflow run again."""
MAX_PARAM_CHARS = 6000
"""Longest MLflow param value (mlflow.utils.validation.MAX_PARAM_VAL_LENGTH); longer values
are cut there, the spec.json artifact keeps them whole."""
PARAMS_PER_CALL = 100
"""MLflow's limit of params and tags in one log_batch (MAX_PARAMS_TAGS_PER_BATCH)."""
METRICS_PER_CALL = 1000
"""MLflow's limit of metrics in one log_batch (MAX_METRICS_PER_BATCH)."""
MAX_TAG_CHARS = 5000
"""Longest tag value runwright sends (MLflow's limit is 8000 in 3.x, 5000 in older servers)."""
_NOT_IN_KEYS = re.compile(r"[^\w\-. ]")
"""What MLflow takes in a key everywhere: letters, digits, `_`, `-`, `.` and ` ` (it also takes
`/` and, off Windows, `:`, but a `/` makes the key a path that must not resolve elsewhere). A
governance tag's free name may hold anything, which would refuse the whole batch."""


def mlflow_key(key: str) -> str:
    """`key` as MLflow accepts it: other characters become `_`, at most 250 characters."""
    return _NOT_IN_KEYS.sub("_", key)[:250]


class Point(NamedTuple):
    """One scalar of one step (a tuple: the training thread makes six per step)."""

    name: str
    value: float
    step: int
    time_unix_s: float


@dataclass(frozen=True)
class RunFacts:
    """Who the run is, for the trackers' run names, tags and parameters."""

    run_id: str
    name: str
    generation: int
    spec_hash: str
    params: dict[str, str]
    """The spec and the resolved plan, flattened (`training.optimizer.lr` -> `0.003`)."""
    tags: dict[str, str]
    """Identity and governance (owner, hypothesis, tags)."""
    evidence: dict[str, str]
    """File name -> JSON text (spec.json, plan.json) logged at the start."""


class TrackerMissingError(RunwrightError):
    """A tracker's library is not installed where rank 0 runs."""


@contextlib.contextmanager
def _installed(tracker: str) -> Iterator[None]:
    """Turn the ImportError of a tracker's library into what to install."""
    try:
        yield
    except ImportError as exc:
        raise TrackerMissingError(
            f"the spec names {tracker}, but {exc.name or 'its library'} is not installed where "
            "rank 0 runs: pip install 'runwright[trackers]' in the workers' environment"
        ) from None


class Tracker(Protocol):
    name: str
    where: str
    """Where it writes, for messages (a folder, a tracking URI)."""

    def start(self, facts: RunFacts) -> None:
        """Open (or find again) the run and record its identity and parameters."""
        ...

    def write(self, points: list[Point]) -> None:
        """Record points; raises on failure (the sink counts it)."""
        ...

    def finish(self, files: list[Path], completed: bool) -> None:
        """Attach the evidence files and close the run."""
        ...

    def status(self) -> dict[str, Any]:
        """What a later reader needs to find this run's record (written into trackers.json)."""
        ...


def flatten(value: Any, prefix: str = "") -> dict[str, str]:
    """`{"a": {"b": 1}, "c": [1, 2]}` -> `{"a.b": "1", "c": "[1, 2]"}`: nested mappings by dotted
    keys, everything else as compact JSON (strings as they are)."""
    if isinstance(value, dict) and value:
        out: dict[str, str] = {}
        for key, item in value.items():
            out |= flatten(item, f"{prefix}{key}.")
        return out
    text = value if isinstance(value, str) else json.dumps(value, separators=(", ", ": "))
    return {prefix.rstrip("."): text}


class TensorBoardTracker:
    """Event files through PyTorch's SummaryWriter; TensorBoard reads each scalar as a series
    and the spec as text."""

    name = "tensorboard"

    def __init__(self, log_dir: Path) -> None:
        self.where = str(log_dir)
        self._log_dir = log_dir
        self._writer: Any = None

    def start(self, facts: RunFacts) -> None:
        with _installed("tensorboard"):
            from torch.utils.tensorboard import SummaryWriter

        self._log_dir.mkdir(parents=True, exist_ok=True)
        # flush_secs: the sink already batches; TensorBoard's own queue writes at once on flush.
        self._writer = SummaryWriter(log_dir=str(self._log_dir), flush_secs=30)
        for file, text in facts.evidence.items():
            self._writer.add_text(f"runwright/{file}", f"```\n{text}\n```", 0)
        identity = {**facts.tags, "runwright.generation": str(facts.generation)}
        self._writer.add_text("runwright/identity", json.dumps(identity, indent=1), 0)
        self._writer.flush()

    def write(self, points: list[Point]) -> None:
        for point in points:
            self._writer.add_scalar(point.name, point.value, point.step, point.time_unix_s)
        self._writer.flush()

    def finish(self, files: list[Path], completed: bool) -> None:
        for path in files:
            if path.suffix == ".json":
                self._writer.add_text(f"runwright/{path.name}", f"```\n{path.read_text()}\n```", 0)
        self._writer.close()

    def status(self) -> dict[str, Any]:
        return {"log_dir": self.where}


class MLflowTracker:
    """An MLflow run per runwright run, found again by its `runwright.run_id` tag, so every
    generation (restarts after a failure) writes into the same MLflow run."""

    name = "mlflow"

    def __init__(self, spec: MLflowSpec, default_experiment: str) -> None:
        self._uri = spec.tracking_uri
        self._experiment = spec.experiment or default_experiment
        self.where = self._uri or "MLflow's default tracking URI"
        self._client: Any = None
        self.run_id: str | None = None
        self.experiment_id: str | None = None

    def start(self, facts: RunFacts) -> None:
        with _installed("mlflow"):
            from mlflow.entities import Param, RunStatus, RunTag
            from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=self._uri)
        self.where = client.tracking_uri
        experiment = client.get_experiment_by_name(self._experiment)
        if experiment is None:
            try:
                self.experiment_id = client.create_experiment(self._experiment)
            except Exception:  # created meanwhile by another run (MlflowException)
                experiment = client.get_experiment_by_name(self._experiment)
                if experiment is None:
                    raise
        if experiment is not None:
            self.experiment_id = experiment.experiment_id
        assert self.experiment_id is not None
        # Run ids are plain names (letters, digits, `.`, `_`, `-`); a local id made from a
        # rendezvous id a user chose might not be, and is then not searched for.
        found = (
            []
            if "'" in facts.run_id or "\\" in facts.run_id
            else client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.`{TAG_PREFIX}run_id` = '{facts.run_id}'",
                max_results=1,
            )
        )
        tags = [RunTag(mlflow_key(k), v[:MAX_TAG_CHARS]) for k, v in facts.tags.items()]
        tags.append(RunTag(f"{TAG_PREFIX}generation", str(facts.generation)))
        if found:
            self.run_id = found[0].info.run_id
            client.update_run(self.run_id, status=RunStatus.to_string(RunStatus.RUNNING))
        else:
            run = client.create_run(self.experiment_id, run_name=facts.run_id)
            self.run_id = run.info.run_id
            params = [Param(mlflow_key(k), v[:MAX_PARAM_CHARS]) for k, v in facts.params.items()]
            for first in range(0, len(params), PARAMS_PER_CALL):
                client.log_batch(self.run_id, params=params[first : first + PARAMS_PER_CALL])
        for first in range(0, len(tags), PARAMS_PER_CALL):
            client.log_batch(self.run_id, tags=tags[first : first + PARAMS_PER_CALL])
        with tempfile.TemporaryDirectory(prefix="runwright-mlflow-") as folder:
            for file, text in facts.evidence.items():
                (Path(folder) / file).write_text(text)
                client.log_artifact(self.run_id, str(Path(folder) / file), "runwright")
        self._client = client

    def write(self, points: list[Point]) -> None:
        from mlflow.entities import Metric

        metrics = [Metric(p.name, p.value, int(p.time_unix_s * 1000), p.step) for p in points]
        for first in range(0, len(metrics), METRICS_PER_CALL):
            self._client.log_batch(self.run_id, metrics=metrics[first : first + METRICS_PER_CALL])

    def finish(self, files: list[Path], completed: bool) -> None:
        for path in files:
            self._client.log_artifact(self.run_id, str(path), "runwright")
        # A stopped or failed generation may be resumed: KILLED until the last one completes.
        status = "FINISHED" if completed else "KILLED"
        self._client.set_terminated(self.run_id, status=status, end_time=int(time.time() * 1000))

    def status(self) -> dict[str, Any]:
        return {
            "tracking_uri": self.where,
            "experiment_id": self.experiment_id,
            "run_id": self.run_id,
        }


def attach_files(status: dict[str, Any], files: list[Path]) -> list[str]:
    """Log `files` as artifacts of the MLflow run `status` (a trackers.json entry) names, and
    return where they went. Used by `runwright report`, after the run, for report.json/html."""
    from mlflow.tracking import MlflowClient

    entry = status.get("mlflow") or {}
    if not entry.get("run_id"):
        return []
    client = MlflowClient(tracking_uri=entry.get("tracking_uri"))
    for path in files:
        client.log_artifact(entry["run_id"], str(path), "runwright")
    return [f"MLflow run {entry['run_id']} at {client.tracking_uri}"]
