"""Escalation (seed 000 8.7, "where a person takes over"): with `recovery.on_exhausted: pause`, a
failure past its retry limit, or one that retrying cannot fix and a person must judge, pauses the
run instead of failing or retrying it.

Which failures need a person at once (`needs_person`): a hang right after a hang (a second
restart would wedge the same way), a NaN that came back after the rollback skipped its batch
(not a bad batch, then), a checkpoint that fails verification, and a permission error on data or
storage (no retry grants access). Everything else escalates only when the policy would fail it
(retries or the restart budget exhausted, no progress, the same deterministic failure twice). A
preemption past its requeues still ends CANCELLED: nobody needs to look at it.

What escalating does, in order (`Escalation.escalate`), from the recovery sequence's RECOVERING:
1. keeps the scene: a retention hold names every committed checkpoint that is not UNHEALTHY
   (ckpt/hold.py), so no writer's retention deletes them until `runwright resume`; the failed
   group is already stopped and its generation fenced, and PAUSED starts nothing new, so nothing
   overwrites or adds a checkpoint meanwhile;
2. completes the diagnostics bundle recovery wrote (`bundle.json`: spec, rank manifest, last
   healthy step, error records, log tails) with the escalation's reason, the topology (allocation,
   parallel layout, world size) and every per-rank file under the generation's diagnostics folder
   (guard captures, collective dumps), each bounded;
3. raises an alert: ALERT_FIRED (rule `escalation`, severity critical, the owner), POSTed to the
   webhook of every `notify` rule of the spec;
4. gives the allocation back and moves the run RECOVERING -> PAUSED, with ESCALATED.
`runwright resume` then queues it as any paused run, restoring its newest verified checkpoint.
"""

import json
import re
from pathlib import Path
from typing import Any

from runwright.ckpt.catalog import scan
from runwright.ckpt.errors import CheckpointError
from runwright.ckpt.hold import RetentionHold, write_hold
from runwright.ckpt.manifest import HealthVerdict
from runwright.ckpt.storage import CheckpointStorage, replace_file
from runwright.control.alerts import notify
from runwright.control.allocation import AllocationStep
from runwright.control.executors.protocol import Executor
from runwright.control.failures import Classification
from runwright.control.journal import Journal
from runwright.control.policy import Decision, PastFailure
from runwright.control.states import RunState
from runwright.events import EventType
from runwright.layout import checkpoint_root, run_paths
from runwright.spec import FailureClass, JobSpec, RecoverySpec
from runwright.spec.parallel import parallel_layout
from runwright.store import RunRecord, Store

RANK_FILE_MAX_BYTES = 256 << 10
"""A per-rank diagnostics file is inlined up to 256 KiB (a guard capture is at most ~1 MiB and
is cut with a note; a collective dump of a few thousand entries fits)."""
RANK_FILES_MAX_BYTES = 8 << 20
"""All inlined per-rank files together: 8 MiB, so a 1,000-rank group's bundle stays readable;
files past it are listed by name and size only."""
BUNDLE_NAME = "bundle.json"

VERIFICATION = re.compile(
    r"NoUsableCheckpointError|CheckpointCorruptError|no committed checkpoint verified", re.I
)
HANGS = frozenset({FailureClass.HANG, FailureClass.NO_PROGRESS})
"""A blocked collective is `hang` (a silent rank) or `no_progress` (the stall the ranks' CPU
confirms, control/stall.py): either, twice in a row, is a repeated hang."""
PERMISSION = re.compile(
    r"PermissionError|Permission denied|Errno 13\]|AccessDenied|403 Forbidden", re.I
)


def needs_person(failure: Classification, history: list[PastFailure]) -> str | None:
    """Why this failure needs a person now, in words; None when recovery may retry it."""
    cls = failure.failure_class
    text = "\n".join([failure.message, *failure.error_lines])
    if cls in HANGS and history and history[-1].failure_class in HANGS:
        return "a hang right after a hang: a restart would wedge the same way"
    if cls is FailureClass.NAN_INF and any(p.failure_class is cls for p in history):
        return "non-finite values came back after rolling back past the bad batch"
    if VERIFICATION.search(text):
        return "a checkpoint failed verification"
    if PERMISSION.search(text):
        return "data or storage refused access (a permission error): no retry grants it"
    return None


def escalation_reason(
    recovery: RecoverySpec,
    failure: Classification,
    history: list[PastFailure],
    decision: Decision,
) -> str | None:
    """Why the run pauses for a person instead of taking `decision`; None to take it."""
    if recovery.on_exhausted != "pause" or decision.action == "stop":
        return None
    if decision.action == "fail":
        return decision.reason
    return needs_person(failure, history)


def held_checkpoints(storage: CheckpointStorage) -> list[str]:
    """Every committed checkpoint that is healthy: not marked UNHEALTHY, nor suspect of a
    silent corruption (ckpt/suspect.py); oldest first."""
    committed, _ = scan(storage)
    return [
        c.record.checkpoint_id
        for c in sorted(committed, key=lambda c: c.record.step)
        if c.manifest.health != HealthVerdict.UNHEALTHY and c.suspect is None
    ]


def rank_files(folder: Path) -> list[dict[str, Any]]:
    """Every file under a generation's diagnostics folder but the bundle: name, bytes and, within
    the bounds, its content (parsed JSON, else text)."""
    found: list[dict[str, Any]] = []
    budget = RANK_FILES_MAX_BYTES
    if not folder.is_dir():
        return found
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != BUNDLE_NAME):
        size = path.stat().st_size
        entry: dict[str, Any] = {"name": str(path.relative_to(folder)), "bytes": size}
        if size > min(RANK_FILE_MAX_BYTES, budget):
            entry["content"] = None
            entry["left_out"] = (
                f"over {RANK_FILE_MAX_BYTES} bytes"
                if size > RANK_FILE_MAX_BYTES
                else "the bundle's budget for rank files is spent"
            )
        else:
            raw = path.read_bytes()
            budget -= size
            try:
                entry["content"] = json.loads(raw)
            except ValueError:
                entry["content"] = raw.decode("utf-8", "replace")
        found.append(entry)
    return found


def complete_bundle(
    bundle_file: Path, run: RunRecord, spec: JobSpec, why: str, held: list[str]
) -> None:
    """Add the escalation, the topology and the per-rank files to recovery's bundle."""
    bundle = json.loads(bundle_file.read_text()) if bundle_file.is_file() else {}
    bundle["escalation"] = {"reason": why, "held_checkpoints": held}
    bundle["topology"] = {
        "world_size": spec.resources.world_size,
        "nodes": spec.resources.nodes,
        "parallel_layout": parallel_layout(spec, None),
        "allocation": run.allocation,
        "rank_manifest": run.rank_manifest,
    }
    bundle["rank_files"] = rank_files(bundle_file.parent)
    data = json.dumps(bundle, indent=1, default=str).encode()
    replace_file(bundle_file, data, action="write of the escalation bundle")


class Escalation:
    """The recovery sequence's way out to a person (module docstring)."""

    def __init__(self, store: Store, journal: Journal, allocations: AllocationStep) -> None:
        self.store = store
        self.journal = journal
        self.allocations = allocations

    def escalate(
        self,
        run: RunRecord,
        spec: JobSpec,
        failure: Classification,
        why: str,
        executor: Executor,
    ) -> None:
        paths = run_paths(Path(run.root), run.run_id)
        reason = f"{failure.failure_class}: {why}"
        bundle_file = paths.diagnostics_bundle(run.generation)
        # The scene is kept best effort: storage that fails now must not keep the run from
        # reaching a person; what could not be done is in ESCALATED's `problems`.
        problems: list[str] = []
        held: list[str] = []
        try:
            storage = CheckpointStorage(checkpoint_root(paths, spec.checkpoint.location))
            held = held_checkpoints(storage)
            if held:
                hold = RetentionHold(checkpoint_ids=held, reason=reason, generation=run.generation)
                write_hold(storage, hold)
        except (OSError, CheckpointError) as exc:
            problems.append(f"retention hold not written: {exc}")
        try:
            complete_bundle(bundle_file, run, spec, why, held)
        except (OSError, ValueError, CheckpointError) as exc:
            problems.append(f"bundle not completed: {exc}")
        owner = spec.governance.owner
        self._alert(run, spec, failure, why, owner, bundle_file)
        released = self.allocations.release(run, executor, f"escalated: {reason}")
        self.journal.record(
            run,
            EventType.ESCALATED,
            reason=why,
            failure_class=str(failure.failure_class),
            bundle=str(bundle_file),
            held_checkpoints=held,
            owner=owner,
            allocation_released=released,
            problems=problems or None,
        )
        last = f"its last healthy step is {run.last_step}" if run.last_step else "no step done"
        self.journal.move(
            self.store.get_run(run.run_id),
            RunState.PAUSED,
            detail=f"escalated to {owner} ({reason}); {last}; {len(held)} checkpoint(s) held, "
            f"diagnostics in {bundle_file}; resume with `runwright resume {run.run_id}`",
        )

    def _alert(
        self,
        run: RunRecord,
        spec: JobSpec,
        failure: Classification,
        why: str,
        owner: str,
        bundle_file: Path,
    ) -> None:
        alert: dict[str, Any] = {
            "alert_id": "escalation",
            "rule": "escalation",
            "kind": "escalation",
            "severity": "critical",
            "owner": owner,
            "summary": f"{failure.failure_class} needs a person: {why}",
            "evidence": failure.message,
            "action": "pause",
            "at_step": run.last_step,
            "bundle": str(bundle_file),
        }
        hooks = sorted(
            {
                rule.webhook
                for rule in spec.observability.alerts.effective()
                if rule.action == "notify" and rule.webhook
            }
        )
        if hooks:
            alert["action_result"] = "; ".join(notify(url, run, alert) for url in hooks)
        self.journal.record(
            run, EventType.ALERT_FIRED, op=f"fire:escalation:g{run.generation}", **alert
        )
