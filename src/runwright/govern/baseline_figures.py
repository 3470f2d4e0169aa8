"""What a baseline keeps of one run of its fixed workload (issue 27, seed 000 8.7): speed
(tokens/s, step-time percentiles, data wait, communication), memory, the loss curve, anomaly
counts, checkpoint save and restore times and the recovery from the drill fault it ran, plus the
environment labels of where it ran.

Every speed figure comes from the run's performance report (govern/performance.py), so it covers
the same window and phases a run report states. The recovery figures come from the drill's own
measurement of the fault (drill/outcome.py): detection to the first healthy step after it.
"""

import os
import platform

from pydantic import Field

from runwright.drill.outcome import FaultResult
from runwright.events import EventType
from runwright.govern.performance import PerformanceFigures, performance_report
from runwright.observe import figures
from runwright.observe.timeline import build_timeline
from runwright.records import Record
from runwright.spec import JobSpec
from runwright.store import Store

ANOMALIES = (
    EventType.NAN_DETECTED,
    EventType.LOSS_SPIKE,
    EventType.LOSS_SPIKE_SKIPPED,
    EventType.SDC_DETECTED,
    EventType.GUARD_CAPTURED,
    EventType.RECOVERY_DIVERGED,
)
"""The events counted as anomalies: each says the numbers went wrong somewhere."""

NODE_LABEL_KEYS = ("driver", "cuda", "nccl")
"""The environment labels an inventory node carries in its `versions` (sched/inventory.py)."""

IMAGE_DIGEST_ENV = "RUNWRIGHT_IMAGE_DIGEST"
"""Where a container's image digest is read from when `--image-digest` does not give it."""


class EnvironmentLabels(Record):
    """Where a workload ran: the labels a scheduler can pin a later run to
    (`resources.node_labels`)."""

    python: str | None = None
    torch: str | None = None
    runwright: str | None = None
    cuda: str | None = None
    """CUDA runtime torch was built with; None on a CPU build."""
    driver: str | None = None
    """The accelerator driver; None without one."""
    nccl: str | None = None
    """NCCL's version; None without CUDA."""
    image_digest: str | None = None
    """The container image's digest (`--image-digest` or $RUNWRIGHT_IMAGE_DIGEST); None when
    the run did not start from an image."""
    node_type: str
    """The node's kind: device type, CPU architecture and logical cores (`cpu/x86_64/16`)."""

    def as_node_labels(self) -> dict[str, str]:
        """Every label that has a value."""
        return {k: v for k, v in self.model_dump().items() if isinstance(v, str)}

    def node_pins(self) -> dict[str, str]:
        """The labels a node's inventory carries (`versions`: driver, cuda, nccl), which a check
        pins to (`resources.node_labels`); the interpreter and packages are the image's."""
        return {k: v for k, v in self.as_node_labels().items() if k in NODE_LABEL_KEYS}


def environment_labels(
    versions: dict[str, str], device_type: str, image_digest: str | None = None
) -> EnvironmentLabels:
    """Labels from the versions the ranks reported, and this host's kind."""
    known = {k: versions.get(k) for k in ("python", "torch", "runwright", "cuda", "driver", "nccl")}
    return EnvironmentLabels(
        **known,
        image_digest=image_digest or os.environ.get(IMAGE_DIGEST_ENV) or None,
        node_type=f"{device_type}/{platform.machine()}/{os.cpu_count() or 0}",
    )


class WorkloadFigures(Record):
    """One run of a baseline's workload, measured."""

    run_id: str
    performance: PerformanceFigures
    """Throughput and step times over the stated window."""
    peak_host_bytes: int | None
    """The largest rank's peak resident memory."""
    peak_device_bytes: int | None
    """The largest rank's accelerator peak; None on CPU."""
    loss_curve: list[tuple[int, float]] = Field(default_factory=list)
    """(step, loss) of the surviving lineage, every step."""
    anomalies: dict[str, int] = Field(default_factory=dict)
    """Count per anomaly event type (ANOMALIES), zeros included."""
    checkpoint_save_seconds: float | None
    """Mean time to persist a checkpoint (CHECKPOINT_COMMITTED persist_seconds)."""
    checkpoint_stall_seconds: float | None
    """Mean time training waited for a save (CHECKPOINT_COMMITTED stall_seconds)."""
    restore_seconds: float | None
    """Mean time of a restore from a checkpoint (RESTORED seconds; fresh starts left out)."""
    recovery_seconds: float | None
    """The drill fault's detection to the first healthy step after it (the fault's RTO)."""
    detection_seconds: float | None
    """The fault's injection to its detection."""
    fault: str | None
    """The drill fault the run recovered from; None when it ran without one."""
    labels: EnvironmentLabels


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def workload_figures(
    store: Store,
    run_id: str,
    spec: JobSpec,
    fault: FaultResult | None,
    image_digest: str | None = None,
) -> WorkloadFigures:
    events = store.events(run_id)
    timeline = build_timeline(events)
    world_size = max((a.world_size for a in store.attempts(run_id)), default=1)
    flops = figures.spec_flops_per_token(spec.model, spec.data.sequence_length)
    report = performance_report(
        spec.model_dump(mode="json"), events, timeline.steps, world_size, flops
    )
    newest: dict[int, tuple[int, float]] = {}
    for point in timeline.steps:
        if point.loss is not None and point.generation >= newest.get(point.step, (-1, 0.0))[0]:
            newest[point.step] = (point.generation, point.loss)
    commits = [e.attributes for e in events if e.type == EventType.CHECKPOINT_COMMITTED]
    restores = [
        float(e.attributes["seconds"])
        for e in events
        if e.type == EventType.RESTORED and not e.attributes.get("fresh")
        if isinstance(e.attributes.get("seconds"), int | float)
    ]
    host = [m.peak_host_bytes for m in report.peak_memory if m.peak_host_bytes is not None]
    device = [m.peak_device_bytes for m in report.peak_memory if m.peak_device_bytes is not None]
    return WorkloadFigures(
        run_id=run_id,
        performance=report.figures,
        peak_host_bytes=max(host, default=None),
        peak_device_bytes=max(device, default=None),
        loss_curve=[(step, loss) for step, (_, loss) in sorted(newest.items())],
        anomalies={str(t): sum(1 for e in events if e.type == t) for t in ANOMALIES},
        checkpoint_save_seconds=_mean(
            [float(a["persist_seconds"]) for a in commits if a.get("persist_seconds") is not None]
        ),
        checkpoint_stall_seconds=_mean(
            [float(a["stall_seconds"]) for a in commits if a.get("stall_seconds") is not None]
        ),
        restore_seconds=_mean(restores),
        recovery_seconds=fault.rto_seconds if fault else None,
        detection_seconds=fault.detected_seconds if fault else None,
        fault=fault.fault if fault else None,
        labels=environment_labels(report.versions, report.device_type, image_digest),
    )
