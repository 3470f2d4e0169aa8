"""Bookkeeping of the recovery sequence, derived from the event log so it survives a controller
restart: past failures, the recovery in progress, the diagnostic bundle, and the batch ranges to
skip."""

import json
import time
from pathlib import Path
from typing import Any

from runwright.control.executor import WorkerGroup, run_dir
from runwright.control.failures import Classification, read_error_files
from runwright.control.policy import PastFailure
from runwright.spec import FailureClass
from runwright.store import EventRecord, RunRecord, Store

RECENT_EVENTS = 200
LOG_TAIL_BYTES = 4000


def past_failures(events: list[EventRecord]) -> list[PastFailure]:
    return [
        PastFailure(
            failure_class=FailureClass(e.attributes["failure_class"]),
            signature=str(e.attributes.get("signature", "")),
            restored_step=int(e.attributes.get("restored_step") or 0),
            last_step=int(e.attributes.get("last_step") or 0),
        )
        for e in events
        if e.type == "FAILURE_CLASSIFIED"
    ]


def restored_step_of(events: list[EventRecord], generation: int) -> int:
    """The step generation `generation` restored from (0 when it started fresh)."""
    steps = [
        int(e.step or 0) for e in events if e.type == "RESTORED" and e.generation == generation
    ]
    return max(steps, default=0)


def open_recovery(events: list[EventRecord]) -> EventRecord | None:
    """The newest RECOVERY_STARTED not yet followed by RECOVERY_SUCCEEDED."""
    pending = None
    for e in events:
        if e.type == "RECOVERY_STARTED":
            pending = e
        elif e.type == "RECOVERY_SUCCEEDED":
            pending = None
    return pending


def skip_ranges(events: list[EventRecord]) -> list[list[int]]:
    ranges = [
        e.attributes["skip_steps"]
        for e in events
        if e.type == "RECOVERY_STARTED" and e.attributes.get("skip_steps")
    ]
    return sorted({tuple(r) for r in ranges})  # type: ignore[return-value]


def tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-limit:].decode("utf-8", errors="replace")


def write_diagnostics(
    store: Store, run: RunRecord, group: WorkerGroup | None, failure: Classification
) -> Path:
    """Everything an operator needs to judge the failure without the processes: spec, rank
    manifest, last healthy step, error records, recent events and the log tails of every rank."""
    folder = run_dir(Path(run.root), run.run_id) / "diagnostics" / f"gen{run.generation:05d}"
    folder.mkdir(parents=True, exist_ok=True)
    events = store.events(run.run_id)
    logs: dict[str, str] = {}
    errors: list[dict[str, Any]] = []
    if group is not None:
        logs["torchrun"] = tail(group.log_path)
        for path in sorted(group.log_dir.glob("*/attempt_*/*/std*.log")):
            logs[f"rank{path.parent.name}/{path.name}"] = tail(path)
        errors = [r.model_dump() for r in read_error_files(group.log_dir)]
    bundle = {
        "run_id": run.run_id,
        "generation": run.generation,
        "written_unix_s": time.time(),
        "classification": failure.model_dump(mode="json"),
        "last_healthy_step": run.last_step,
        "latest_checkpoint_id": run.latest_checkpoint_id,
        "spec": run.spec,
        "rank_manifest": run.rank_manifest,
        "error_records": errors,
        "recent_events": [e.model_dump(mode="json") for e in events[-RECENT_EVENTS:]],
        "log_tails": logs,
    }
    path = folder / "bundle.json"
    path.write_text(json.dumps(bundle, indent=1, default=str))
    return path
