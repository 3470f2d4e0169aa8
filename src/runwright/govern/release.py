"""Releasing a checkpoint (issue 17): export, gates, the model registry, a person's approval.

`request_release` takes the next version of the model's name in the registry
(store/releases.py), exports the run's checkpoint to `<root>/releases/<project>/<name>/v<N>/`
(ckpt/export.py), runs the automatic gates (govern/release_gates.py) and records their verdicts
with the checkpoint's lineage (run, spec hash, code, datasets, tokenizer, parent checkpoints):
BLOCKED when a gate failed, with the failed gate as the reason, else AWAITING_APPROVAL.
`decide_release` is the approval gate: a person with the role to approve (docs/server.md)
releases or rejects it. Before an approval the export is hashed again: one changed since its
gates is BLOCKED instead, so what was approved is what was checked. Through the server the
approver must be another principal than the one who asked (four eyes); a CLI on the store
itself acts as its one local user, and the approval records that it was so.

Both write an event into the run's log (RELEASE_CHECKED, RELEASE_DECIDED), so the run's report
shows its releases.
"""

import re
import time
from pathlib import Path
from typing import Any, NoReturn

from runwright.ckpt import inventory as inv
from runwright.ckpt.export import RELEASE_FILE, ExportFormat, export_model, read_weights
from runwright.ckpt.export_source import file_sha256, resolve_source
from runwright.errors import RunwrightError
from runwright.events import EventType, NewEvent
from runwright.govern.release_gates import Gate, GateLimits, TrainingSide, check_files, run_gates
from runwright.layout import release_dir
from runwright.spec import spec_from_mapping
from runwright.store import RunRecord, Store
from runwright.store.releases import ReleaseRow, ReleaseStatus

MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class ReleaseError(RunwrightError):
    """A release that cannot be requested or decided as asked; the message says why and what
    to do instead."""


def model_name(given: str) -> str:
    """`given` if it is a plain model name (a folder name under releases/), else an error."""
    if not MODEL_NAME.fullmatch(given) or ".." in given:
        raise ReleaseError(
            f"--name {given[:80]!r} is not a model name: use letters, digits, '.', '_' and '-' "
            "(at most 100, starting with a letter or digit)"
        )
    return given


def request_release(
    store: Store,
    run: RunRecord,
    *,
    checkpoint: str = "latest",
    name: str | None = None,
    format: ExportFormat = ExportFormat.AUTO,
    limits: GateLimits | None = None,
    requested_by: str,
) -> ReleaseRow:
    """Export checkpoint `checkpoint` of `run` as the next version of model `name` (default:
    the run's name), run the gates and record the outcome in the registry."""
    limits = limits or GateLimits()
    format = ExportFormat(format)
    name = model_name(name or run.name)
    folder = inv.checkpoint_root(run.run_id, run.root)
    storage, found = inv.find(folder, checkpoint)
    root = Path(run.root)
    row = store.releases.reserve(
        project=run.project,
        name=name,
        run_id=run.run_id,
        checkpoint_id=found.record.checkpoint_id,
        step=found.record.step,
        format=format.value,
        export_path=lambda version: str(release_dir(root, run.project, name, version)),
        requested_by=requested_by,
    )
    data = data_gate(store, run.run_id)
    try:
        if data.verdict == "fail":  # refused before anything is exported
            gates, written, sha = [data], format.value, None
        else:
            gates, written, sha = _export_and_gate(store, run, row, storage, found, format, limits)
            gates.append(data)
    except BaseException as exc:
        # Never leave a CHECKING row behind a failure of ours: it is recorded as what blocked.
        gate = Gate(name="export", verdict="fail", evidence=f"{type(exc).__name__}: {exc}")
        store.releases.finish(
            row.release_id,
            status=ReleaseStatus.BLOCKED,
            gates=[gate.model_dump(mode="json")],
            lineage={},
            format=format.value,
            release_sha256=None,
        )
        raise
    failed = [g.name for g in gates if g.verdict == "fail"]
    status = ReleaseStatus.BLOCKED if failed else ReleaseStatus.AWAITING_APPROVAL
    gates.append(
        Gate(
            name="approval",
            verdict="pending",
            evidence="waits for a person with the role to approve (`runwright release approve`)"
            if not failed
            else f"not asked: {', '.join(failed)} failed",
        )
    )
    done = store.releases.finish(
        row.release_id,
        status=status,
        gates=[g.model_dump(mode="json") for g in gates],
        lineage=_lineage(store, found.record.checkpoint_id),
        format=written,
        release_sha256=sha,
    )
    _event(
        store,
        done,
        EventType.RELEASE_CHECKED,
        failed=failed,
        requested_by=requested_by,
        format=written,
    )
    return done


def _export_and_gate(
    store: Store,
    run: RunRecord,
    row: ReleaseRow,
    storage: Any,
    found: Any,
    format: ExportFormat,
    limits: GateLimits,
) -> tuple[list[Gate], str, str | None]:
    """(the automatic gates, the layout written, release.json's sha256)."""
    export = Path(row.export_path)
    try:
        source = resolve_source(run.run_id, inv.checkpoint_root(run.run_id, run.root), run.root)
        release = export_model(storage, found, export, source=source, format=format)
    except RunwrightError as exc:
        gate = Gate(
            name="export",
            verdict="fail",
            evidence=str(exc),
            fix="fix what the message names and request the release again",
        )
        return [gate], format.value, None
    side = training_side(store, run, found.record.checkpoint_id)
    gates = run_gates(export, release, side, limits)
    return gates, release.format.value, file_sha256(export / RELEASE_FILE)


def training_side(store: Store, run: RunRecord, checkpoint: str) -> TrainingSide:
    """What the gates compare an export of `run`'s checkpoint `checkpoint` with: its weights
    in the training model, the run's dataset and tokenizer, its evaluation of the checkpoint."""
    folder = inv.checkpoint_root(run.run_id, run.root)
    storage, found = inv.find(folder, checkpoint)
    tokenizer = resolve_source(run.run_id, folder, run.root).tokenizer
    spec = spec_from_mapping(run.spec, f"run {run.run_id}")
    evaluated = [
        e
        for e in store.events(run.run_id, types=[EventType.EVALUATED])
        if e.checkpoint_id == found.record.checkpoint_id and "eval_loss" in e.attributes
    ]
    return TrainingSide(
        checkpoint_id=found.record.checkpoint_id,
        spec=spec,
        weights=read_weights(storage, found),
        dataset=spec.data.dataset,
        tokenizer_file=tokenizer.path if tokenizer else None,
        tokenizer_sha256=tokenizer.sha256 if tokenizer else None,
        train_eval_loss=float(evaluated[-1].attributes["eval_loss"]) if evaluated else None,
    )


def data_gate(store: Store, run_id: str) -> Gate:
    """Refuse a checkpoint of a run that trained on a dataset since withdrawn or deleted
    (issue 25; govern/data_contract.py): every checkpoint of the run consumed it."""
    from runwright.govern.data_contract import withdrawn_inputs

    withdrawn = withdrawn_inputs(store, run_id)
    if not withdrawn:
        return Gate(name="data.policy", verdict="pass", evidence="every dataset it used is active")
    said = "; ".join(
        f"dataset {v.dataset_id[:16]} {v.standing.value} by {v.changed_by}: {v.reason}"
        for v in withdrawn
    )
    return Gate(
        name="data.policy",
        verdict="fail",
        evidence=f"the run trained on withdrawn data ({said})",
        fix="release a checkpoint of a run that did not train on it",
        figures={"datasets": [v.dataset_id for v in withdrawn]},
    )


def _lineage(store: Store, checkpoint_id: str) -> dict[str, Any]:
    """What the checkpoint was trained on (`runwright lineage checkpoint`)."""
    from runwright.govern.lineage import checkpoint_trace

    try:
        return checkpoint_trace(store, checkpoint_id).model_dump(mode="json")
    except RunwrightError as exc:
        return {"error": str(exc)}


def decide_release(
    store: Store,
    release_id: str,
    *,
    approve: bool,
    by: str,
    authenticated: bool,
    note: str | None = None,
    project: str | None = None,
) -> ReleaseRow:
    """Approve or reject an AWAITING_APPROVAL release. An approval first hashes the export
    again: if it changed since its gates, the release is BLOCKED instead (and this raises)."""
    row = store.releases.get(release_id, project=project)
    if row.status is not ReleaseStatus.AWAITING_APPROVAL:
        raise ReleaseError(
            f"release {row.release_id} ({row.name} v{row.version}) is {row.status.value}: only "
            "one awaiting approval can be decided"
        )
    if approve and authenticated and by == row.requested_by:
        raise ReleaseError(
            f"{by} requested release {row.release_id}: another person with the role to "
            "approve must approve it (four eyes)"
        )
    gates = [g for g in row.gates if g.get("name") != "approval"]
    if approve:
        data = data_gate(store, row.run_id)
        if data.verdict == "fail":  # withdrawn since the gates ran
            _block_at_approval(
                store, row, gates, data, by, f"not approved: {data.evidence}",
                f"release {row.release_id} is BLOCKED, not approved: {data.evidence}",
            )  # fmt: skip
        again = check_files(Path(row.export_path), row.checkpoint_id)
        export_sha = _sha_or_none(Path(row.export_path) / RELEASE_FILE)
        if again.verdict == "pass" and export_sha != row.release_sha256:
            again = Gate(
                name="export.files",
                verdict="fail",
                evidence="release.json changed since the gates ran",
                fix=again.fix or "request a new release",
            )
        if again.verdict != "pass":
            _block_at_approval(
                store, row, gates, again, by,
                f"not approved: the export changed since its gates: {again.evidence}",
                f"release {row.release_id} is BLOCKED, not approved: its export changed since "
                f"the gates ran ({again.evidence}). Request a new release.",
            )  # fmt: skip
    self_approved = approve and by == row.requested_by
    decision = "approved" if approve else "rejected"
    gates.append(
        Gate(
            name="approval",
            verdict="pass" if approve else "fail",
            evidence=f"{decision} by {by}"
            + (" (the requester, as the one local user of the store)" if self_approved else "")
            + (f": {note}" if note else ""),
            figures={"by": by, "at_unix_s": time.time(), "authenticated": authenticated},
        ).model_dump(mode="json")
    )
    status = ReleaseStatus.RELEASED if approve else ReleaseStatus.REJECTED
    done = store.releases.decide(row.release_id, status=status, gates=gates, by=by, note=note)
    _event(store, done, EventType.RELEASE_DECIDED, by=by, note=note)
    return done


def _sha_or_none(path: Path) -> str | None:
    try:
        return file_sha256(path)
    except OSError:
        return None


def _event(store: Store, row: ReleaseRow, kind: EventType, **attributes: Any) -> None:
    """`kind` into the run's log, at the run's current generation (unfenced: written by a
    person's command after the fact, not by a worker)."""
    run = store.get_run(row.run_id)
    store.append_event(
        NewEvent(
            event_id=f"{row.release_id}-{kind.value.lower()}",
            run_id=row.run_id,
            generation=run.generation,
            type=kind,
            step=row.step,
            checkpoint_id=row.checkpoint_id,
            time_unix_s=time.time(),
            attributes={
                "release_id": row.release_id,
                "name": row.name,
                "version": row.version,
                "status": row.status.value,
                **attributes,
            },
        ),
        fenced=False,
    )


def _block_at_approval(
    store: Any, row: Any, gates: list[dict], failed: Gate, by: str, note: str, message: str
) -> NoReturn:
    """A gate that fails when the release is approved (it passed at request): the release is
    BLOCKED with that gate's verdict first among its gates, and the approval refused."""
    gates = [failed.model_dump(mode="json"), *(g for g in gates if g.get("name") != failed.name)]
    blocked = store.releases.decide(
        row.release_id, status=ReleaseStatus.BLOCKED, gates=gates, by=by, note=note
    )
    _event(store, blocked, EventType.RELEASE_DECIDED, by=by, note=blocked.decision_note)
    raise ReleaseError(message)
