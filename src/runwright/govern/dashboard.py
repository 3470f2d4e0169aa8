"""What the dashboard and report.html draw (issue 15): a run's report and timeline turned into
chart series and tables, and two or more runs laid over each other for the compare view.

Pure functions of what `collect_report` returns (after the reader's redaction) and the run's
events (already redacted by `runwright.access`). `chart_data` feeds the run charts of both the
live run page and report.html (govern/static/charts.js draws them), so their numbers agree. Every
time is Unix seconds; the page formats them.
"""

from typing import Any

from runwright.events import EventRecord, EventType
from runwright.govern.effective import Difference
from runwright.govern.loss_breakdown import breakdown_series
from runwright.observe.figures import straggler_scores
from runwright.observe.system_series import SystemFold, SystemPoint, system_points
from runwright.observe.timeline import StepPoint, Timeline

EVENTS_SHOWN = 200
"""Newest events listed on a run page (the full log is `GET /v1/runs/{id}/events`)."""
MAX_RANK_LINES = 8
"""Ranks drawn one line each on the step-time chart; beyond it, the slowest rank only (the lines
could not be told apart, and the page would carry one series per rank)."""
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def _per_second(tokens: int, p: StepPoint) -> float | None:
    # Throughput of one step: the tokens every rank fed / the slowest rank's step time (a
    # synchronous step waits for it), e.g. 2 ranks x 8 rows x 128 tokens / 0.5 s.
    return tokens / p.step_seconds if p.step_seconds else None


def _straggler(p: StepPoint) -> float | None:
    # The busiest rank's busy time / the median rank's (observe/figures.py), busy being the step
    # time less the gradient sync: the straggler alert's signal (control/alert_signals.py).
    if len(p.rank_busy_seconds) < 2:
        return None
    return max(straggler_scores(p.rank_busy_seconds).values())


def step_series(timeline: Timeline) -> dict[str, Any]:
    """One entry per step point (all ranks merged), in time order: the x values of every time
    chart and the signals read at each step."""
    points = timeline.steps
    tokens_total = 0
    cumulative: list[int] = []
    for p in points:
        tokens_total += 0 if p.replay else p.device_tokens
        cumulative.append(tokens_total)
    per_rank = len(timeline.ranks) <= MAX_RANK_LINES
    return {
        "time_unix_s": [p.end_unix_s for p in points],
        "step": [p.step for p in points],
        "generation": [p.generation for p in points],
        "replay": [p.replay for p in points],
        "loss": [p.loss for p in points],
        "grad_norm": [p.grad_norm for p in points],
        "tokens_per_second": [_per_second(p.device_tokens, p) for p in points],
        "loss_tokens_per_second": [_per_second(p.loss_tokens, p) for p in points],
        "cumulative_device_tokens": cumulative,
        "device_tokens": [p.device_tokens for p in points],
        "loss_tokens": [p.loss_tokens for p in points],
        "padded_tokens": [p.padded_tokens for p in points],
        # Input-wait share of one step: summed data wait / summed step time over its ranks
        # (the run-wide figure of observe/figures.py, per step).
        "input_wait_share": [
            p.data_wait_seconds / p.rank_seconds if p.rank_seconds else None for p in points
        ],
        "step_seconds": [p.step_seconds for p in points],
        # Empty beyond MAX_RANK_LINES ranks: the chart draws `step_seconds` (the slowest rank).
        "rank_step_seconds": {
            str(rank): [p.rank_step_seconds.get(rank) for p in points] for rank in timeline.ranks
        }
        if per_rank
        else {},
        "straggler_score": [_straggler(p) for p in points],
        # The loss by source and by length bucket (issue 26): name -> a value per point.
        **breakdown_series(points),
    }


def checkpoint_saves(report: dict[str, Any], timeline: Timeline) -> list[dict[str, Any]]:
    """Each committed checkpoint with its stall and its durability lag: seconds from the end of
    the step it captured to its commit (the window in which that step was not yet recoverable;
    with async saves this is the stall plus the background persist)."""
    step_end = {(p.generation, p.step): p.end_unix_s for p in timeline.steps}
    saves = []
    for entry in report.get("checkpoint_lineage") or []:
        committed = entry.get("committed_unix_s")
        ended = step_end.get((entry.get("generation"), entry.get("step")))
        if committed is not None and ended is not None:
            lag = max(0.0, committed - ended)
        else:
            parts = [entry.get("stall_seconds"), entry.get("persist_seconds")]
            lag = sum(p for p in parts if p is not None) if any(parts) else None
        saves.append({**entry, "durability_lag_seconds": lag})
    return saves


def open_alerts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ALERT_FIRED events whose `alert_id` has no later ALERT_CLEARED (one open alert per id)."""
    open_by_id: dict[str, dict[str, Any]] = {}
    for event in events:
        attrs = event.get("attributes") or {}
        alert_id = str(attrs.get("alert_id"))
        if event["type"] == EventType.ALERT_FIRED:
            open_by_id[alert_id] = {
                "alert_id": alert_id,
                "time_unix_s": event["time_unix_s"],
                "step": event.get("step"),
                **{k: attrs.get(k) for k in ("rule", "severity", "owner", "summary", "action")},
            }
        elif event["type"] == EventType.ALERT_CLEARED:
            open_by_id.pop(alert_id, None)
    return list(open_by_id.values())


def state_spans(report: dict[str, Any], now_unix_s: float) -> list[dict[str, Any]]:
    """The run's states as consecutive spans: the last one open until `now_unix_s`, unless the
    run has ended (then it ends where it starts, so a run's window does not grow after it)."""
    history = report.get("state_history") or []
    spans = []
    for i, change in enumerate(history):
        if i + 1 < len(history):
            end = history[i + 1]["time_unix_s"]
        else:
            end = change["time_unix_s"] if change.get("to_state") in TERMINAL else now_unix_s
        spans.append(
            {
                "state": change.get("to_state"),
                "start_unix_s": change["time_unix_s"],
                "end_unix_s": max(end, change["time_unix_s"]),
                "generation": change.get("generation"),
            }
        )
    return spans


def chart_data(
    report: dict[str, Any], timeline: Timeline, events: list[dict[str, Any]], now_unix_s: float
) -> dict[str, Any]:
    """What the run charts draw (govern/static/charts.js), for the run page and report.html:
    `report` is report.json's content as the reader may see it, `events` the run's log as the
    reader may see it."""
    return {
        "states": state_spans(report, now_unix_s),
        "markers": [m.model_dump(mode="json") for m in timeline.markers],
        "steps": step_series(timeline),
        "evaluations": [e.model_dump(mode="json") for e in timeline.evaluations],
        "checkpoints": checkpoint_saves(report, timeline),
        "system": system_nodes(events),
        "system_series": system_series(events),
        "mixture": report.get("mixture") or [],
        "drift": drift_windows(events),
        "cost_split": {k: report["cost_split"][k] for k in ("wall_seconds", "cost")}
        | {"device_hour_price": report["cost_split"]["device_hour_price"]},
    }


def _samples(events: list[dict[str, Any]]) -> list[SystemPoint]:
    return system_points(
        EventRecord.model_validate(e) for e in events if e.get("type") == EventType.SYSTEM_SAMPLE
    )


def system_series(events: list[dict[str, Any]]) -> dict[str, dict[str, list[Any]]]:
    """Node -> its samples over time (the system layer's chart): CPU busy share and the mean
    GPU utilisation, in percent. The first MAX_RANK_LINES nodes by name: beyond, the lines could
    not be told apart (the node table and /metrics have every node)."""
    series: dict[str, dict[str, list[Any]]] = {}
    for p in _samples(events):
        if p.node not in series and len(series) >= MAX_RANK_LINES:
            continue
        line = series.setdefault(
            p.node, {"time_unix_s": [], "step": [], "cpu_percent": [], "gpu_percent": []}
        )
        util = [g.utilization_percent for g in p.gpus if g.utilization_percent is not None]
        line["time_unix_s"].append(p.time_unix_s)
        line["step"].append(p.step)
        line["cpu_percent"].append(p.cpu_percent)
        line["gpu_percent"].append(sum(util) / len(util) if util else None)
    return dict(sorted(series.items()))


def system_nodes(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each node's newest SYSTEM_SAMPLE as one table row (observe/system_series.py), its
    GPUs summed up: the hottest, the ECC errors and Xids of all of them."""
    fold = SystemFold()
    for event in events:
        if event.get("type") == EventType.SYSTEM_SAMPLE:
            fold.observe(EventRecord.model_validate(event))
    rows = []
    for node, p in sorted(fold.latest.items()):
        gpus = p.gpus
        rows.append(
            {
                "node": node,
                "step": p.step,
                "time_unix_s": p.time_unix_s,
                "cpu_percent": p.cpu_percent,
                "memory_used_bytes": p.memory_used_bytes,
                "memory_total_bytes": p.memory_total_bytes,
                "run_disk_used_bytes": p.disk_used_bytes.get("run"),
                "checkpoint_write_bytes_per_second": p.disk_write_bytes_per_second.get(
                    "checkpoints"
                ),
                "net_sent_bytes_per_second": p.net_sent_bytes_per_second,
                "net_recv_bytes_per_second": p.net_recv_bytes_per_second,
                "gpus": len(gpus),
                "gpu_max_temperature_celsius": max(
                    (g.temperature_celsius for g in gpus if g.temperature_celsius is not None),
                    default=None,
                ),
                "ecc_uncorrected_errors": sum(g.ecc_uncorrected_errors or 0 for g in gpus),
                "xid_events": sum(v for (n, _), v in fold.xids.items() if n == node),
            }
        )
    return rows


def run_view(
    report: dict[str, Any], timeline: Timeline, events: list[dict[str, Any]], now_unix_s: float
) -> dict[str, Any]:
    """The run page's data: the charts' (`chart_data`), the headline figures, incidents, open
    alerts and the newest events."""
    run = report["run"]
    governance = report.get("governance") or {}
    return {
        "run": run,
        "finished": run["state"] in TERMINAL,
        "owner": governance.get("owner"),
        "hypothesis": governance.get("hypothesis"),
        "final_metrics": report["final_metrics"],
        **chart_data(report, timeline, events, now_unix_s),
        "incidents": report.get("incidents") or [],
        "alerts": open_alerts(events),
        "events": events[-EVENTS_SHOWN:],
        "last_seq": events[-1]["seq"] if events else 0,
    }


def drift_windows(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The loader's windows of steps (MIXTURE_WINDOW, data/read/drift.py), oldest first."""
    keys = ("first_step", "last_step", "shares", "targets", "max_deviation", "loss_token_share")
    return [
        {"time_unix_s": e["time_unix_s"], **{k: (e.get("attributes") or {}).get(k) for k in keys}}
        for e in events
        if e.get("type") == EventType.MIXTURE_WINDOW
    ]


def compare_view(
    runs: list[tuple[dict[str, Any], Timeline]], diffs: list[list[Difference]]
) -> dict[str, Any]:
    """Two or more runs overlaid: each run's loss and throughput by step and by cumulative
    tokens (the page picks the x axis), its headline figures, and the spec differences of each
    later run against the first (`diffs[i]` is run i+1 against run 0)."""
    out = []
    for report, timeline in runs:
        series = step_series(timeline)
        keep = [i for i, replay in enumerate(series["replay"]) if not replay]
        out.append(
            {
                "run": report["run"],
                "final_metrics": report["final_metrics"],
                "step": [series["step"][i] for i in keep],
                "tokens": [series["cumulative_device_tokens"][i] for i in keep],
                "loss": [series["loss"][i] for i in keep],
                "tokens_per_second": [series["tokens_per_second"][i] for i in keep],
                "evaluations": [e.model_dump(mode="json") for e in timeline.evaluations],
            }
        )
    return {
        "runs": out,
        "spec_diff": [
            {
                "against": runs[0][0]["run"]["run_id"],
                "run_id": runs[i + 1][0]["run"]["run_id"],
                "differences": [d.model_dump(mode="json") for d in found],
            }
            for i, found in enumerate(diffs)
        ],
    }
