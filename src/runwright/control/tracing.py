"""The controller's tracing hook: one environment look-up per pass while no OTLP endpoint is
configured, so a controller without tracing never imports observe/tracing.py (nor the
OpenTelemetry SDK); with one, the spans of the run's new events (observe/tracing.py)."""

import os
from typing import Any


def trace_run(store: Any, run: Any) -> None:
    """Trace what `run` (a run record) gained since the last pass."""
    env = os.environ  # the variables observe.tracing.endpoint() reads
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        from runwright.observe.tracing import trace_run as trace

        trace(store, run)
