"""Observability: a run's events on one time axis, the derived figures (throughput, input wait,
checkpoint exposure, ETTR, MFU, stragglers), the cost split, and Prometheus metrics.

Pure functions of event records; the store is read by the callers (`runwright.govern.report`).
"""

from runwright.observe.accounting import (
    CATEGORIES,
    AttemptSpan,
    CostSplit,
    RecoveryWindow,
    Split,
    account,
)
from runwright.observe.figures import (
    checkpoint_exposure,
    cost,
    device_tokens_per_second,
    ettr,
    input_wait_share,
    loss_tokens_per_second,
    mfu,
    palm_flops_per_token,
    run_straggler_scores,
    spec_flops_per_token,
    straggler_scores,
    tokens_per_second,
)
from runwright.observe.metrics import RunMetrics, render, run_metrics
from runwright.observe.timeline import Marker, StepPoint, Timeline, build_timeline

__all__ = [
    "CATEGORIES",
    "AttemptSpan",
    "CostSplit",
    "Marker",
    "RecoveryWindow",
    "RunMetrics",
    "Split",
    "StepPoint",
    "Timeline",
    "account",
    "build_timeline",
    "checkpoint_exposure",
    "cost",
    "device_tokens_per_second",
    "ettr",
    "input_wait_share",
    "loss_tokens_per_second",
    "mfu",
    "palm_flops_per_token",
    "render",
    "run_metrics",
    "run_straggler_scores",
    "spec_flops_per_token",
    "straggler_scores",
    "tokens_per_second",
]
