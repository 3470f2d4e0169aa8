"""`runwright report RUN`: a run's evidence chain as report.json and a self-contained
report.html with the dashboard's run charts (the four signal layers on one time axis).

Seed 004: the minimum evidence chain (code and environment version, the configuration actually
applied, data version and tokenizer, mixture, checkpoint ancestry, recovery events, interventions,
key metric curves, cost) and the four signal layers (loss, throughput, system, data) on one
shared timeline. Everything here is read from the store; nothing is written back to it.
"""

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field

from runwright.errors import RunwrightError
from runwright.events import EventType
from runwright.govern.data_contract import DataStanding, standing_of_run
from runwright.govern.data_loss import QuarantineRow, quarantine_rows
from runwright.govern.evidence import (
    CodeVersion,
    DatasetIdentity,
    EnvironmentLock,
    LineageEntry,
    MixtureRow,
    checkpoint_lineage,
    code_version,
    dataset_identity,
    environment_lock,
    mixture_rows,
)
from runwright.govern.incidents import Incident, Intervention, incidents, interventions
from runwright.govern.loss_breakdown import LossBreakdownRow, breakdown_rows
from runwright.govern.membership import MembershipChange, membership_changes
from runwright.govern.page import render_page
from runwright.govern.performance import PerformanceReport, performance_report, report_sha256
from runwright.observe import figures
from runwright.observe.accounting import CostSplit, account
from runwright.observe.timeline import Timeline, build_timeline
from runwright.records import Record
from runwright.spec import ModelSpec, canonical_json, sha256_hex
from runwright.store import EventRecord, RunRecord, Store

REPORT_VERSION = 1


class ReportPaths(Record):
    """Where a report was written."""

    json_path: Path
    """report.json: the evidence chain as data."""
    html_path: Path
    """report.html: the same, readable, with the signal charts."""


class FinalMetrics(Record):
    """The run's headline figures (formulas in `runwright.observe.figures`)."""

    last_loss: float | None
    """Loss of the newest healthy step."""
    last_step: int | None
    """Highest healthy step."""
    steps: int
    """Distinct steps completed (replays counted once)."""
    step_executions: int
    """Steps executed, replays included."""
    device_tokens: int
    """Accepted device tokens (first executions)."""
    padded_tokens: int
    """Accepted padding tokens."""
    loss_tokens: int
    """Accepted loss tokens."""
    replayed_tokens: int
    """Device tokens of replayed steps."""
    wall_seconds: float
    """First allocation to last release."""
    productive_seconds: float
    """Wall seconds of first executions of healthy steps, checkpoint stalls excluded."""
    ettr: float | None
    """productive_seconds / wall_seconds (Kokolis et al. 2024)."""
    loss_tokens_per_second: float | None
    """loss_tokens / wall_seconds."""
    device_tokens_per_second: float | None
    """device_tokens / wall_seconds."""
    input_wait_share: float | None
    """Summed data wait / summed step time over rank-steps."""
    checkpoint_exposure: float | None
    """Checkpoint stall seconds / productive seconds."""
    flops_per_token: int | None
    """6N + 12·L·H·Q·T of the spec's model (PaLM appendix B)."""
    mfu: float | None
    """device_tokens x flops_per_token / (productive device-seconds x peak FLOP/s)."""
    mfu_reason: str | None
    """Why `mfu` is None."""
    straggler_scores: dict[int, float]
    """Per rank: median over steps of its step time / the median across ranks."""
    total_cost: float
    """Cost of the whole allocation at the spec's device-hour price."""


class CriterionOutcome(Record):
    """One of the spec's stop criteria and what became of it."""

    criterion: str
    """Its words, or its fields as JSON."""
    evaluated: bool
    """False for words: a person's criterion, never evaluated."""
    met: bool
    evidence: str | None = None
    """The figures that met it (STOP_CRITERION_MET)."""


class ReleaseOutcome(Record):
    """A release of one of the run's checkpoints (RELEASE_CHECKED, then RELEASE_DECIDED)."""

    release_id: str
    name: str
    version: int
    step: int | None
    checkpoint_id: str | None
    status: str
    """The latest: BLOCKED, AWAITING_APPROVAL, RELEASED or REJECTED."""
    failed: list[str] = Field(default_factory=list)
    """The gates that failed."""
    decided_by: str | None = None


class Governance(Record):
    """Who owns the run, why it exists, its stop criteria and their outcome, its preflight,
    its releases."""

    owner: str
    hypothesis: str
    stop_criteria: list[CriterionOutcome] = Field(default_factory=list)
    preflight_ok: bool | None = None
    """None: the run was accepted before preflight existed."""
    preflight: list[dict[str, Any]] = Field(default_factory=list)
    """The PREFLIGHT_CHECKED checks: name, verdict, evidence, fix."""
    releases: list[ReleaseOutcome] = Field(default_factory=list)


def _collective_checks(events: list[EventRecord]) -> list[dict[str, Any]]:
    """The workers' collective preflight (COLLECTIVE_CHECKED), one row per generation: its
    failure if a rank saw one, else rank 0's pass."""
    by_generation: dict[int, EventRecord] = {}
    for e in events:
        if e.type != EventType.COLLECTIVE_CHECKED:
            continue
        kept = by_generation.get(e.generation)
        if kept is None or (kept.attributes.get("ok") and not e.attributes.get("ok")):
            by_generation[e.generation] = e
    rows = []
    for generation, e in sorted(by_generation.items()):
        a = e.attributes
        if a.get("ok"):
            evidence = (
                f"{a.get('world_size')} ranks over {a.get('backend')}: barrier "
                f"{float(a.get('barrier_seconds') or 0):.3f} s, all-reduce "
                f"{float(a.get('all_reduce_seconds') or 0):.3f} s"
            )
        else:
            evidence = str(a.get("error"))
        rows.append(
            {
                "name": f"collective (generation {generation})",
                "verdict": "pass" if a.get("ok") else "fail",
                "evidence": evidence,
                "fix": "" if a.get("ok") else "check the named ranks' nodes and network",
            }
        )
    return rows


def governance(spec: dict[str, Any], events: list[EventRecord]) -> Governance:
    section = spec.get("governance") or {}
    met = {
        e.attributes.get("criterion"): e.attributes.get("evidence")
        for e in events
        if e.type == EventType.STOP_CRITERION_MET
    }
    outcomes = [
        CriterionOutcome(
            criterion=c if isinstance(c, str) else canonical_json(c),
            evaluated=not isinstance(c, str),
            met=i in met,
            evidence=met.get(i),
        )
        for i, c in enumerate(section.get("stop_criteria") or [])
    ]
    checked = [e for e in events if e.type == EventType.PREFLIGHT_CHECKED]
    releases: dict[str, ReleaseOutcome] = {}
    for e in events:
        if e.type not in (EventType.RELEASE_CHECKED, EventType.RELEASE_DECIDED):
            continue
        a = e.attributes
        release_id = str(a.get("release_id"))
        before = releases.get(release_id)
        releases[release_id] = ReleaseOutcome(
            release_id=release_id,
            name=str(a.get("name")),
            version=int(a.get("version") or 0),
            step=e.step,
            checkpoint_id=e.checkpoint_id,
            status=str(a.get("status")),
            failed=list(a.get("failed") or (before.failed if before else [])),
            decided_by=a.get("by"),
        )
    return Governance(
        owner=str(section.get("owner", "unknown")),
        hypothesis=str(section.get("hypothesis", "")),
        stop_criteria=outcomes,
        preflight_ok=bool(checked[-1].attributes.get("ok")) if checked else None,
        preflight=(list(checked[-1].attributes.get("checks") or []) if checked else [])
        + _collective_checks(events),
        releases=list(releases.values()),
    )


class RunReport(Record):
    """report.json."""

    report_version: int = REPORT_VERSION
    """Format version of this file."""
    generated_unix_s: float
    """When the report was written."""
    run: dict[str, Any]
    """Run id, name, state, terminal reason, generation, times."""
    state_history: list[dict[str, Any]]
    """Every state transition."""
    code: CodeVersion
    """Code version."""
    environment: EnvironmentLock
    """Environment lock."""
    spec_hash: str
    """Hash recorded at submit."""
    spec_hash_verified: bool
    """sha256 of the stored spec's canonical JSON equals `spec_hash`."""
    spec: dict[str, Any]
    """The spec as submitted."""
    plan: dict[str, Any]
    """Resolved plan, each value with its reason."""
    dataset: DatasetIdentity
    """Dataset id and tokenizer hash."""
    mixture: list[MixtureRow] = Field(default_factory=list)
    """Mixture targets vs actual counts (draws: a quarantined shard's skipped ones included)."""
    data_quarantine: list[QuarantineRow] = Field(default_factory=list)
    """Shards quarantined as corrupt or missing, and the documents and tokens lost to each."""
    loss_breakdown: list[LossBreakdownRow] = Field(default_factory=list)
    """The loss by mixture source and by document length bucket (issue 26)."""
    checkpoint_lineage: list[LineageEntry] = Field(default_factory=list)
    """Checkpoints with parents."""
    incidents: list[Incident] = Field(default_factory=list)
    """Failures with classification and recovery."""
    membership_changes: list[MembershipChange] = Field(default_factory=list)
    """An elastic run's size changes, with the old and new layouts."""
    interventions: list[Intervention] = Field(default_factory=list)
    """Cancels, stale writes rejected, budget events."""
    attempts: list[dict[str, Any]] = Field(default_factory=list)
    """Worker-group attempts as stored."""
    cost_split: CostSplit
    """Productive, checkpoint, replay, recovery and idle seconds, device-seconds and cost."""
    final_metrics: FinalMetrics
    """Headline figures."""
    governance: Governance | None = None
    """Owner, hypothesis, stop criteria and their outcome, preflight (None in reports written
    before it existed)."""
    data_standing: list[DataStanding] = Field(default_factory=list)
    """How each dataset the run trained on stands now: in use, withdrawn or deleted (who, when,
    why; govern/data_contract.py)."""
    performance: PerformanceReport | None = None
    """Throughput and step-time figures with the phases and window they include, software
    versions, device type, peak memory per rank (govern/performance.py; None in reports written
    before it existed)."""
    report_sha256: str | None = None
    """sha256 of this report's canonical JSON without this field and `generated_unix_s`; the run's
    record keeps it (REPORT_HASHED) once the report is served."""


def final_metrics(spec: dict[str, Any], timeline: Timeline, split: CostSplit) -> FinalMetrics:
    """The headline figures from the timeline and the cost split."""
    accepted = [p for p in timeline.steps if not p.replay]
    replayed = [p for p in timeline.steps if p.replay]
    last = max(timeline.steps, key=lambda p: p.end_unix_s) if timeline.steps else None
    device = sum(p.device_tokens for p in accepted)
    loss_tokens = sum(p.loss_tokens for p in accepted)
    wall = split.wall_seconds.total
    productive = split.wall_seconds.productive
    flops, reason = None, None
    try:
        model = ModelSpec.model_validate(spec.get("model") or {})
        sequence_length = int((spec.get("data") or {}).get("sequence_length") or 0)
        flops = figures.spec_flops_per_token(model, sequence_length)
    except (ValueError, RunwrightError) as exc:
        reason = f"FLOPs per token unknown: {exc}"
    peak = (spec.get("resources") or {}).get("peak_flops_per_device")
    mfu = None
    if flops is not None and peak:
        mfu = figures.mfu(device, flops, split.device_seconds.productive, float(peak))
        reason = None if mfu is not None else "no productive device-seconds yet"
    elif flops is not None:
        reason = "resources.peak_flops_per_device is not declared in the spec"
    return FinalMetrics(
        last_loss=last.loss if last else None,
        last_step=max(p.step for p in timeline.steps) if timeline.steps else None,
        steps=len({p.step for p in timeline.steps}),
        step_executions=len(timeline.steps),
        device_tokens=device,
        padded_tokens=sum(p.padded_tokens for p in accepted),
        loss_tokens=loss_tokens,
        replayed_tokens=sum(p.device_tokens for p in replayed),
        wall_seconds=wall,
        productive_seconds=productive,
        ettr=figures.ettr(productive, wall),
        loss_tokens_per_second=figures.loss_tokens_per_second(loss_tokens, wall),
        device_tokens_per_second=figures.device_tokens_per_second(device, wall),
        input_wait_share=figures.input_wait_share(
            sum(p.data_wait_seconds for p in timeline.steps),
            sum(p.rank_seconds for p in timeline.steps),
        ),
        checkpoint_exposure=figures.checkpoint_exposure(split.wall_seconds.checkpoint, productive),
        flops_per_token=flops,
        mfu=mfu,
        mfu_reason=reason,
        straggler_scores=figures.run_straggler_scores(
            [p.rank_step_seconds for p in timeline.steps]
        ),
        total_cost=split.cost.total,
    )


def _run_section(run: RunRecord) -> dict[str, Any]:
    keys = (
        "run_id",
        "name",
        "state",
        "terminal_reason",
        "state_detail",
        "generation",
        "last_step",
        "latest_checkpoint_id",
        "workdir",
        "root",
        "project",
        "submitted_by",
        "created_unix_s",
        "updated_unix_s",
    )
    return {k: getattr(run, k) for k in keys}


def _history(events: list[EventRecord]) -> list[dict[str, Any]]:
    return [
        {
            "time_unix_s": e.time_unix_s,
            "generation": e.generation,
            "from_state": e.attributes.get("from_state"),
            "to_state": e.attributes.get("to_state"),
            "reason": e.attributes.get("reason"),
        }
        for e in events
        if e.type == EventType.STATE_CHANGED
    ]


def collect_report(
    store: Store, run_id: str, events: list[EventRecord] | None = None
) -> tuple[RunReport, Timeline]:
    """Read one run from the store and assemble its report and timeline (from `events` when
    the caller already read the run's log)."""
    run = store.get_run(run_id)
    events = store.events(run.run_id) if events is None else events
    attempts = store.attempts(run.run_id)
    spec = run.spec
    timeline = build_timeline(events)
    price = float((spec.get("resources") or {}).get("device_hour_price") or 0.0)
    split = account(events, attempts, timeline.steps, device_hour_price=price)
    report = RunReport(
        generated_unix_s=time.time(),
        run=_run_section(run),
        state_history=_history(events),
        code=code_version(run, spec),
        environment=environment_lock(spec, events),
        spec_hash=run.spec_hash,
        spec_hash_verified=sha256_hex(canonical_json(spec)) == run.spec_hash,
        spec=spec,
        plan=run.plan,
        dataset=dataset_identity(store, spec, events),
        mixture=mixture_rows(spec, events),
        data_quarantine=quarantine_rows(events),
        loss_breakdown=breakdown_rows(timeline),
        checkpoint_lineage=checkpoint_lineage(store.checkpoints.list(run.run_id), events),
        incidents=incidents(events, timeline.steps, split.recoveries),
        membership_changes=membership_changes(events),
        interventions=interventions(run, events),
        attempts=[a.model_dump(mode="json") for a in attempts],
        cost_split=split,
        final_metrics=final_metrics(spec, timeline, split),
        governance=governance(spec, events),
        data_standing=standing_of_run(store, run.run_id, Path(run.root)),
    )
    world_size = max((a.world_size for a in attempts), default=1)
    flops = report.final_metrics.flops_per_token
    report = report.model_copy(
        update={"performance": performance_report(spec, events, timeline.steps, world_size, flops)}
    )
    digest = report_sha256(report.model_dump(mode="json", exclude={"report_sha256"}))
    return report.model_copy(update={"report_sha256": digest}), timeline


ReportView = Callable[[dict[str, Any]], dict[str, Any]]
"""What a reader may see of report.json (runwright.access.redaction: secrets, sample text)."""
EventsView = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
"""What a reader may see of the run's events (the same redaction)."""


def render_report(
    store: Store,
    run_id: str,
    view: ReportView | None = None,
    events_view: EventsView | None = None,
) -> tuple[RunReport, str]:
    """A run's report and report.html's text, both as `view` and `events_view` show them."""
    events = store.events(store.get_run(run_id).run_id)
    report, timeline = collect_report(store, run_id, events)
    if view is not None:
        report = RunReport.model_validate(view(report.model_dump(mode="json")))
    shown = [e.model_dump(mode="json") for e in events]
    return report, render_page(report, timeline, events_view(shown) if events_view else shown)


def build_report(
    store: Store, run_id: str, out_dir: Path | str, view: ReportView | None = None
) -> ReportPaths:
    """Write `report.json` and `report.html` for a run into `out_dir` (created if missing)."""
    report, html = render_report(store, run_id, view)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = ReportPaths(json_path=out / "report.json", html_path=out / "report.html")
    paths.json_path.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    paths.html_path.write_text(html, encoding="utf-8")
    return paths
