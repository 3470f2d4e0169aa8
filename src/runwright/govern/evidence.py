"""The provenance half of a run's evidence chain: code version, environment, dataset and
tokenizer, mixture targets against actual counts, checkpoint lineage.

Seed 004 ("experiment management manages the evidence chain"): a result is credible only if one
can say which code, data, configuration, environment and recovery path produced it. Each
function returns a frozen record; where a link of the chain is unknown, the record says so and
why instead of leaving a silent gap.
"""

import importlib.metadata
import json
import platform
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from runwright.events import EventType
from runwright.records import Record
from runwright.store import CheckpointRow, EventRecord, RunRecord, Store

# Packages whose versions change numerics, data order or storage; recorded in the lock.
KEY_PACKAGES = (
    "runwright",
    "torch",
    "numpy",
    "pydantic",
    "sqlalchemy",
    "tokenizers",
    "pyarrow",
    "fsspec",
    "safetensors",
    "prometheus_client",
)


class CodeVersion(Record):
    """Which code ran."""

    ref: str | None
    """Commit or tag; None when it could not be determined."""
    source: str
    """spec.code.ref, git (HEAD of the run's workdir), or unknown."""
    reason: str | None = None
    """Why `ref` is None."""
    entrypoint: str | None = None
    """Training entrypoint from the spec."""


class EnvironmentLock(Record):
    """The software environment, as far as the record shows it."""

    python_version: str
    """Interpreter version."""
    platform: str
    """OS and machine."""
    packages: dict[str, str | None]
    """Installed versions of the key packages (None: not installed)."""
    lock_file: str | None
    """spec.environment.lock_file."""
    lock_hash: str | None
    """spec.environment.lock_hash."""
    captured: str
    """Where the versions were read: the report's interpreter unless workers reported them."""


class DatasetIdentity(Record):
    """Which data, read with which tokenizer."""

    dataset_id: str | None
    """Content address of the dataset manifest."""
    tokenizer_hash: str | None
    """sha256 of the tokenizer file."""
    source: str
    """DATA_STAGE_READY event, spec.data.manifest_id, or none (synthetic data)."""
    name: str | None = None
    """Registered dataset name."""
    path: str | None = None
    """Where the dataset lives."""


class MixtureRow(Record):
    """One source: its target share against what the run actually consumed."""

    source: str
    """Source name."""
    target_share: float | None
    """Normalised target weight."""
    actual_count: float | None
    """Units consumed (documents, tokens or loss tokens, per the spec's mixture unit)."""
    actual_share: float | None
    """actual_count / sum of actual counts."""
    deviation: float | None
    """actual_share - target_share."""


class LineageEntry(Record):
    """One checkpoint and where it came from."""

    checkpoint_id: str
    """Checkpoint id."""
    step: int
    """Step it captured."""
    generation: int
    """Generation that wrote it."""
    status: str
    """STAGED or COMMITTED."""
    parent: str | None
    """Checkpoint this one continues from."""
    parent_source: str
    """recorded (manifest or catalog) or inferred (restore and commit order)."""
    stall_seconds: float | None = None
    """Training time blocked by the save."""
    persist_seconds: float | None = None
    """Background write time."""
    bytes: int | None = None
    """Bytes written."""
    committed_unix_s: float | None = None
    """Commit event time."""
    path: str = ""
    """Folder of the checkpoint."""


def code_version(run: RunRecord, spec: dict[str, Any]) -> CodeVersion:
    """spec.code.ref, else `git rev-parse HEAD` in the run's workdir, else unknown with why."""
    code = spec.get("code") or {}
    entrypoint = code.get("entrypoint")
    if code.get("ref"):
        return CodeVersion(ref=str(code["ref"]), source="spec.code.ref", entrypoint=entrypoint)
    workdir = Path(run.workdir)
    if not workdir.is_dir():
        reason = f"spec.code.ref is unset and the workdir {workdir} is not on this machine"
        return CodeVersion(ref=None, source="unknown", reason=reason, entrypoint=entrypoint)
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        reason = f"spec.code.ref is unset and git could not run: {exc}"
        return CodeVersion(ref=None, source="unknown", reason=reason, entrypoint=entrypoint)
    if done.returncode != 0:
        reason = (
            f"spec.code.ref is unset and {workdir} is not a git checkout "
            f"({done.stderr.strip().splitlines()[-1] if done.stderr.strip() else 'git failed'})"
        )
        return CodeVersion(ref=None, source="unknown", reason=reason, entrypoint=entrypoint)
    return CodeVersion(
        ref=done.stdout.strip(), source=f"git HEAD of {workdir}", entrypoint=entrypoint
    )


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment_lock(spec: dict[str, Any], events: Sequence[EventRecord]) -> EnvironmentLock:
    """Versions reported by a worker (WORKER_STARTED attributes `python_version`,
    `torch_version`, `platform`) when present, else those of the interpreter writing the
    report, which the record says."""
    env = spec.get("environment") or {}
    packages = {name: _version(name) for name in KEY_PACKAGES}
    python, system = platform.python_version(), platform.platform()
    captured = f"report interpreter {sys.executable}"
    for event in events:
        attrs = event.attributes
        if event.type == EventType.WORKER_STARTED and attrs.get("python_version"):
            python = str(attrs["python_version"])
            system = str(attrs.get("platform") or system)
            if attrs.get("torch_version"):
                packages["torch"] = str(attrs["torch_version"])
            captured = f"WORKER_STARTED of rank {attrs.get('rank', '?')}, generation "
            captured += f"{event.generation}; other packages from the report interpreter"
            break
    return EnvironmentLock(
        python_version=python,
        platform=system,
        packages=packages,
        lock_file=env.get("lock_file"),
        lock_hash=env.get("lock_hash"),
        captured=captured,
    )


def dataset_identity(
    store: Store, spec: dict[str, Any], events: Sequence[EventRecord]
) -> DatasetIdentity:
    """From the last DATA_STAGE_READY, else the spec's manifest id; the dataset catalog fills
    in the name, path and (if the event lacks it) the tokenizer hash."""
    dataset_id: str | None = None
    tokenizer_hash: str | None = None
    source = "none (synthetic data)"
    for event in events:
        if event.type == EventType.DATA_STAGE_READY and event.attributes.get("dataset_id"):
            dataset_id = str(event.attributes["dataset_id"])
            tokenizer_hash = event.attributes.get("tokenizer_hash") or tokenizer_hash
            source = "DATA_STAGE_READY event"
    data = spec.get("data") or {}
    if dataset_id is None and data.get("manifest_id"):
        dataset_id, source = str(data["manifest_id"]), "spec.data.manifest_id"
    row = store.datasets.get(dataset_id) if dataset_id else None
    if row is not None and tokenizer_hash is None:
        tokenizer_hash = (row.manifest.get("tokenizer") or {}).get("sha256")
    if tokenizer_hash is None:
        tokenizer_hash = (spec.get("tokenizer") or {}).get("hash")
    return DatasetIdentity(
        dataset_id=dataset_id,
        tokenizer_hash=tokenizer_hash,
        source=source,
        name=row.name if row else None,
        path=row.path if row else None,
    )


def _shares(values: dict[str, float]) -> dict[str, float]:
    total = sum(v for v in values.values() if v > 0)
    return {k: (v / total if total > 0 else 0.0) for k, v in values.items()}


def mixture_rows(spec: dict[str, Any], events: Sequence[EventRecord]) -> list[MixtureRow]:
    """Targets (the last MIXTURE_ACTUAL's `targets`, else the spec's weights, normalised)
    against the last MIXTURE_ACTUAL's `actual` counts (cumulative, per source). A staged
    mixture's rows are its current stage's: `stage_targets` against `stage_units`."""
    mixture = (spec.get("data") or {}).get("mixture") or {}
    targets = {s["name"]: float(s["weight"]) for s in mixture.get("sources", [])}
    actual: dict[str, float] = {}
    for event in events:
        if event.type == EventType.MIXTURE_ACTUAL:
            reported = event.attributes.get("targets")
            if isinstance(reported, dict) and reported:
                targets = {str(k): float(v) for k, v in reported.items()}
            counts = event.attributes.get("actual")
            if isinstance(counts, dict):
                actual = {str(k): float(v) for k, v in counts.items()}
            staged, stage_units = (
                event.attributes.get("stage_targets"),
                event.attributes.get("stage_units"),
            )
            if isinstance(staged, dict) and isinstance(stage_units, dict):
                targets = {str(k): float(v) for k, v in staged.items()}
                actual = {str(k): float(v) for k, v in stage_units.items()}
    target_share, actual_share = _shares(targets), _shares(actual)
    rows = []
    for source in sorted(set(targets) | set(actual)):
        t, a = target_share.get(source), actual_share.get(source)
        rows.append(
            MixtureRow(
                source=source,
                target_share=t,
                actual_count=actual.get(source),
                actual_share=a,
                deviation=a - t if a is not None and t is not None else None,
            )
        )
    return rows


def _recorded_parent(row: CheckpointRow) -> str | None:
    for key in ("parent_checkpoint_id", "parent"):
        if row.attributes.get(key):
            return str(row.attributes[key])
    manifest = Path(row.path) / "manifest.json" if row.path else None
    if manifest is not None and manifest.is_file():
        try:
            parent = json.loads(manifest.read_text()).get("parent_checkpoint_id")
        except (OSError, ValueError):
            return None
        return str(parent) if parent else None
    return None


def checkpoint_lineage(
    rows: Sequence[CheckpointRow], events: Sequence[EventRecord]
) -> list[LineageEntry]:
    """Every checkpoint the store knows with its commit figures and parent. A parent not
    recorded in the catalog or manifest is inferred: the previous commit of the same generation,
    else the checkpoint that generation restored (RESTORED), else the newest earlier commit."""
    commits: dict[str, EventRecord] = {}
    for event in events:
        if event.type == EventType.CHECKPOINT_COMMITTED and event.checkpoint_id:
            commits.setdefault(event.checkpoint_id, event)
    restored = {
        e.generation: e.checkpoint_id
        for e in events
        if e.type == EventType.RESTORED and e.checkpoint_id
    }
    entries: list[LineageEntry] = []
    previous_by_generation: dict[int, str] = {}
    newest: str | None = None
    for row in sorted(rows, key=lambda r: (r.step, r.generation, r.created_unix_s)):
        parent, parent_source = _recorded_parent(row), "recorded"
        if parent is None:
            parent_source = "inferred"
            parent = previous_by_generation.get(row.generation) or restored.get(row.generation)
            parent = parent or newest
        commit = commits.get(row.checkpoint_id)
        attrs = commit.attributes if commit else row.attributes
        entries.append(
            LineageEntry(
                checkpoint_id=row.checkpoint_id,
                step=row.step,
                generation=row.generation,
                status=row.status,
                parent=parent,
                parent_source=parent_source if parent else "none (first checkpoint)",
                stall_seconds=_float(attrs.get("stall_seconds", attrs.get("stage"))),
                persist_seconds=_float(attrs.get("persist_seconds")),
                bytes=int(attrs["bytes"]) if isinstance(attrs.get("bytes"), int) else None,
                committed_unix_s=commit.time_unix_s if commit else None,
                path=row.path,
            )
        )
        if row.status == "COMMITTED":
            previous_by_generation[row.generation] = row.checkpoint_id
            newest = row.checkpoint_id
    return entries


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class Provenance(Record):
    """The provenance sections of the report."""

    code: CodeVersion
    """Code version."""
    environment: EnvironmentLock
    """Environment lock."""
    dataset: DatasetIdentity
    """Dataset and tokenizer."""
    mixture: list[MixtureRow] = Field(default_factory=list)
    """Mixture targets vs actual counts."""
    lineage: list[LineageEntry] = Field(default_factory=list)
    """Checkpoint lineage."""
