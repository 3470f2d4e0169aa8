"""A run's SYSTEM_SAMPLE events as points on its time axis and as Prometheus series.

Seed 004 wants the system layer on the step timeline's clock: each point keeps the writer's
time and the newest healthy step of the sampling rank, so a chart draws CPU, memory, disk,
network and GPU beside step time, and a table can say "at step 812 node a07's checkpoint disk
wrote 1.9 GB/s". Pure, like observe/timeline.py: events in, records out.

Prometheus (https://prometheus.io/docs/practices/naming/): base units (bytes, seconds, ratios
0..1, hertz, celsius, watts); levels are gauges holding the newest sample; the interval rates a
sample carries become counters (`rate x interval_seconds` added up: a restart's new sampler
does not reset them). Labels stay bounded: `node` (the host name: one per machine of the run),
`folder` (`run`, `checkpoints`), `gpu` (the device index on its node), ECC `kind`.
"""

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from pydantic import Field

from runwright.events import EventType
from runwright.observe.records import Event
from runwright.observe.timeline import number
from runwright.records import Record

FOLDERS = ("run", "checkpoints")
"""The folder roles a sample reports disks for (runtime/system_sampler.py)."""


class GpuPoint(Record):
    """One GPU in one sample; None: the device did not give the field."""

    index: int
    utilization_percent: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None
    sm_clock_mhz: float | None = None
    ecc_corrected_errors: float | None = None
    ecc_uncorrected_errors: float | None = None
    xids: list[int] = Field(default_factory=list)
    """Xid events NVML delivered during the sample's interval."""


class SystemPoint(Record):
    """One node's sample on the run's time axis."""

    generation: int
    """Generation of the sampling rank."""
    step: int | None
    """The sampling rank's newest healthy step when it sampled."""
    time_unix_s: float
    """When the sample was taken (the writer's clock, like a step's end)."""
    node: str
    """The sampled machine's host name."""
    interval_seconds: float | None = None
    cpu_percent: float | None = None
    """Busy share of all the node's cores over the interval, 0..100."""
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    disk_used_bytes: dict[str, float] = Field(default_factory=dict)
    """folder role -> bytes used on its file system."""
    disk_total_bytes: dict[str, float] = Field(default_factory=dict)
    disk_read_bytes_per_second: dict[str, float] = Field(default_factory=dict)
    disk_write_bytes_per_second: dict[str, float] = Field(default_factory=dict)
    net_sent_bytes_per_second: float | None = None
    net_recv_bytes_per_second: float | None = None
    gpus: list[GpuPoint] = Field(default_factory=list)
    sample_cpu_seconds: float | None = None
    """CPU seconds the sampler spent taking this sample (its overhead)."""


def _node(event: Event) -> str:
    attrs = event.attributes
    host = attrs.get("host")
    if isinstance(host, str) and host:
        return host
    return f"node{attrs.get('node', attrs.get('rank', 0))}"


def _by_folder(value: Any, key: str) -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(value, Mapping):
        for role in FOLDERS:
            found = value.get(role)
            if isinstance(found, Mapping) and (n := number(found, key)) is not None:
                out[role] = n
    return out


def _gpus(value: Any) -> list[GpuPoint]:
    gpus = []
    for item in value if isinstance(value, list) else []:
        if not isinstance(item, Mapping) or not isinstance(item.get("index"), int):
            continue
        fields = {k: number(item, k) for k in GpuPoint.model_fields if k not in ("index", "xids")}
        xids = [x for x in item.get("xids") or [] if isinstance(x, int)]
        gpus.append(GpuPoint(index=item["index"], xids=xids, **fields))
    return gpus


def system_point(event: Event) -> SystemPoint:
    """One SYSTEM_SAMPLE as a point; missing or malformed fields are None."""
    attrs = event.attributes
    usage, io = attrs.get("disk_usage"), attrs.get("disk_io")
    return SystemPoint(
        generation=event.generation,
        step=event.step,
        time_unix_s=event.time_unix_s,
        node=_node(event),
        interval_seconds=number(attrs, "interval_seconds"),
        cpu_percent=number(attrs, "cpu_percent"),
        memory_used_bytes=number(attrs, "memory_used_bytes"),
        memory_total_bytes=number(attrs, "memory_total_bytes"),
        disk_used_bytes=_by_folder(usage, "used_bytes"),
        disk_total_bytes=_by_folder(usage, "total_bytes"),
        disk_read_bytes_per_second=_by_folder(io, "read_bytes_per_second"),
        disk_write_bytes_per_second=_by_folder(io, "write_bytes_per_second"),
        net_sent_bytes_per_second=number(attrs, "net_sent_bytes_per_second"),
        net_recv_bytes_per_second=number(attrs, "net_recv_bytes_per_second"),
        gpus=_gpus(attrs.get("gpus")),
        sample_cpu_seconds=number(attrs, "sample_cpu_seconds"),
    )


def system_points(events: Iterable[Event]) -> list[SystemPoint]:
    """Every SYSTEM_SAMPLE of a run as a point, in time order."""
    points = [system_point(e) for e in events if e.type == EventType.SYSTEM_SAMPLE]
    return sorted(points, key=lambda p: (p.time_unix_s, p.node))


def system_line(attributes: Mapping[str, Any]) -> str:
    """A sample in one short line, for event listings: `vm cpu 45% mem 5.1/25.3 GB gpus 8
    hottest 71 C ecc_uncorrected 0 xids 0`."""
    parts = [str(attributes.get("host") or "?")]
    cpu = number(attributes, "cpu_percent")
    if cpu is not None:
        parts.append(f"cpu {cpu:.0f}%")
    used, total = (number(attributes, f"memory_{k}_bytes") for k in ("used", "total"))
    if used is not None and total:
        parts.append(f"mem {used / 1e9:.1f}/{total / 1e9:.1f} GB")
    gpus = _gpus(attributes.get("gpus"))
    if gpus:
        temps = [g.temperature_celsius for g in gpus if g.temperature_celsius is not None]
        parts.append(f"gpus {len(gpus)}")
        if temps:
            parts.append(f"hottest {max(temps):.0f} C")
        parts.append(f"ecc_uncorrected {sum(g.ecc_uncorrected_errors or 0 for g in gpus):.0f}")
        parts.append(f"xids {sum(len(g.xids) for g in gpus)}")
    return " ".join(parts)


@dataclass
class SystemFold:
    """The newest sample of each node and the byte and Xid counters, folded one event at a
    time (observe/fleet.py's RunFold and observe/metrics.py's RunMetrics hold one)."""

    latest: dict[str, SystemPoint] = field(default_factory=dict)
    """node -> its newest sample."""
    disk_bytes: dict[tuple[str, str, str], float] = field(default_factory=dict)
    """(node, folder, read|write) -> bytes moved over the sampled intervals."""
    net_bytes: dict[tuple[str, str], float] = field(default_factory=dict)
    """(node, sent|recv) -> bytes over the sampled intervals."""
    xids: dict[tuple[str, int], float] = field(default_factory=dict)
    """(node, gpu) -> Xid events seen."""

    def observe(self, event: Event) -> None:
        if event.type != EventType.SYSTEM_SAMPLE:
            return
        point = system_point(event)
        newest = self.latest.get(point.node)
        if newest is None or point.time_unix_s >= newest.time_unix_s:
            self.latest[point.node] = point
        seconds = point.interval_seconds or 0.0
        for direction, rates in (
            ("read", point.disk_read_bytes_per_second),
            ("write", point.disk_write_bytes_per_second),
        ):
            for folder, rate in rates.items():
                key = (point.node, folder, direction)
                self.disk_bytes[key] = self.disk_bytes.get(key, 0.0) + max(rate, 0.0) * seconds
        for direction, rate in (
            ("sent", point.net_sent_bytes_per_second),
            ("recv", point.net_recv_bytes_per_second),
        ):
            key2 = (point.node, direction)
            self.net_bytes[key2] = self.net_bytes.get(key2, 0.0) + max(rate or 0.0, 0.0) * seconds
        for gpu in point.gpus:
            key3 = (point.node, gpu.index)
            self.xids[key3] = self.xids.get(key3, 0.0) + len(gpu.xids)


Labelled = Iterable[tuple[list[str], SystemFold]]
"""(the owning run's label values, its fold) for each run a family covers."""


def system_families(labels: list[str], folds: Labelled) -> Iterator[Metric]:
    """The system series of every fold, each sample labelled with `labels` (the run's, e.g.
    run_id and project: [] for one run's registry) and then its own (node, folder, gpu)."""
    folds = list(folds)

    def node_gauge(name: str, doc: str, value: Callable[[SystemPoint], float | None]) -> Metric:
        family = GaugeMetricFamily(name, doc, labels=[*labels, "node"])
        for run, fold in folds:
            for node, point in sorted(fold.latest.items()):
                if (v := value(point)) is not None:
                    family.add_metric([*run, node], v)
        return family

    yield node_gauge(
        "runwright_node_cpu_ratio",
        "Busy share of the node's cores over its newest sample's interval (0..1).",
        lambda p: None if p.cpu_percent is None else p.cpu_percent / 100.0,
    )
    yield node_gauge(
        "runwright_node_memory_used_bytes", "Host memory in use.", lambda p: p.memory_used_bytes
    )
    yield node_gauge(
        "runwright_node_memory_total_bytes", "Host memory.", lambda p: p.memory_total_bytes
    )
    for name, doc, attr in (
        ("runwright_node_disk_used_bytes", "Bytes used on a run folder's file system.", "used"),
        ("runwright_node_disk_total_bytes", "Size of a run folder's file system.", "total"),
    ):
        family = GaugeMetricFamily(name, doc, labels=[*labels, "node", "folder"])
        for run, fold in folds:
            for node, point in sorted(fold.latest.items()):
                values = point.disk_used_bytes if attr == "used" else point.disk_total_bytes
                for folder, v in sorted(values.items()):
                    family.add_metric([*run, node, folder], v)
        yield family
    disk = CounterMetricFamily(
        "runwright_node_disk_bytes",
        "Bytes read and written on a run folder's device over the sampled intervals.",
        labels=[*labels, "node", "folder", "direction"],
    )
    net = CounterMetricFamily(
        "runwright_node_network_bytes",
        "Bytes sent and received on the node's non-loopback interfaces over the sampled intervals.",
        labels=[*labels, "node", "direction"],
    )
    for run, fold in folds:
        for (node, folder, direction), v in sorted(fold.disk_bytes.items()):
            disk.add_metric([*run, node, folder, direction], v)
        for (node, direction), v in sorted(fold.net_bytes.items()):
            net.add_metric([*run, node, direction], v)
    yield disk
    yield net
    yield from _gpu_families(labels, folds)


def _gpu_families(labels: list[str], folds: list[tuple[list[str], SystemFold]]) -> Iterator[Metric]:
    def gpu_gauge(name: str, doc: str, value: Callable[[GpuPoint], float | None]) -> Metric:
        family = GaugeMetricFamily(name, doc, labels=[*labels, "node", "gpu"])
        for run, fold in folds:
            for node, point in sorted(fold.latest.items()):
                for gpu in point.gpus:
                    if (v := value(gpu)) is not None:
                        family.add_metric([*run, node, str(gpu.index)], v)
        return family

    def ratio(v: float | None) -> float | None:
        return None if v is None else v / 100.0

    yield gpu_gauge(
        "runwright_gpu_utilization_ratio",
        "Share of the last NVML sample period a kernel ran (0..1).",
        lambda g: ratio(g.utilization_percent),
    )
    yield gpu_gauge("runwright_gpu_memory_used_bytes", "GPU memory in use.",
                    lambda g: g.memory_used_bytes)  # fmt: skip
    yield gpu_gauge("runwright_gpu_memory_total_bytes", "GPU memory.",
                    lambda g: g.memory_total_bytes)  # fmt: skip
    yield gpu_gauge("runwright_gpu_temperature_celsius", "GPU die temperature.",
                    lambda g: g.temperature_celsius)  # fmt: skip
    yield gpu_gauge("runwright_gpu_power_watts", "GPU board power draw.", lambda g: g.power_watts)
    yield gpu_gauge(
        "runwright_gpu_sm_clock_hertz",
        "SM clock.",
        lambda g: None if g.sm_clock_mhz is None else g.sm_clock_mhz * 1e6,
    )
    ecc = GaugeMetricFamily(
        "runwright_gpu_ecc_errors",
        "ECC errors since the driver loaded (NVML volatile counts), by kind.",
        labels=[*labels, "node", "gpu", "kind"],
    )
    xid = CounterMetricFamily(
        "runwright_gpu_xid_events", "Xid events NVML delivered.", labels=[*labels, "node", "gpu"]
    )
    for run, fold in folds:
        for node, point in sorted(fold.latest.items()):
            for gpu in point.gpus:
                for kind, v in (
                    ("corrected", gpu.ecc_corrected_errors),
                    ("uncorrected", gpu.ecc_uncorrected_errors),
                ):
                    if v is not None:
                        ecc.add_metric([*run, node, str(gpu.index), kind], v)
        for (node, index), v in sorted(fold.xids.items()):
            xid.add_metric([*run, node, str(index)], v)
    yield ecc
    yield xid
