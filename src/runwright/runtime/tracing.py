"""This process's `RankTracer` (observe/tracing.py), or None when no OTLP endpoint is configured:
the step loop and the checkpoint sink ask here, so a worker without tracing imports nothing of
it and pays one environment look-up per process."""

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runwright.observe.tracing import RankTracer
    from runwright.runtime.context import RunContext

_made: dict[tuple[str, int, int], "RankTracer | None"] = {}


def rank_tracer(ctx: "RunContext") -> "RankTracer | None":
    key = (ctx.run_id, ctx.generation, ctx.rank)
    if key not in _made:
        env = os.environ
        if not (
            env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        ):
            _made[key] = None
        else:
            from runwright.observe.tracing import RankTracer

            made = RankTracer(ctx.run_id, ctx.generation, ctx.rank)
            _made[key] = made if made.on else None
    return _made[key]


def flush() -> None:
    """Send the spans still buffered, if this process traces (the context's close)."""
    if any(made is not None for made in _made.values()):
        from runwright.observe.tracing import flush as flush_spans

        flush_spans()
