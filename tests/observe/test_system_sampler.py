"""The node's system sampler (runtime/system_sampler.py) and what reads its samples: the rates
between two readings (pure), a path's block device, the sampler thread at its bounded rate on a
real channel file, the spec's rate bound, and the samples folded into time points and Prometheus
series (GPU fields included, as a GPU node would send them)."""

import itertools
import json
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from runwright.control.channel import ChannelReader
from runwright.errors import SpecError
from runwright.events import EventRecord, EventType
from runwright.observe import run_metrics
from runwright.observe.host import DiskCounters, Reading, device_of, rates
from runwright.observe.system_series import system_points
from runwright.runtime import ChannelWriter
from runwright.runtime.system_sampler import SystemSampler
from runwright.spec import spec_from_mapping

BASE = {
    "name": "t",
    "code": {"entrypoint": "train.py"},
    "training": {"global_batch_samples": 16, "steps": 10},
    "resources": {"devices_per_node": 2},
}


def test_rates_between_two_readings():
    before = Reading(
        monotonic_s=100.0,
        cpu_busy_s=50.0,
        cpu_total_s=200.0,
        disks={"run": DiskCounters(1_000, 2_000), "checkpoints": DiskCounters(10, 10)},
        net_sent_bytes=5_000,
        net_recv_bytes=7_000,
        net_errors=1,
    )
    after = Reading(
        monotonic_s=102.0,
        cpu_busy_s=53.0,  # 3 busy of 4 CPU-seconds (2 cores x 2 s): 75 %
        cpu_total_s=204.0,
        disks={"run": DiskCounters(3_000, 6_000), "checkpoints": DiskCounters(5, 10)},
        net_sent_bytes=9_000,
        net_recv_bytes=7_000,
        net_errors=3,
    )
    assert rates(before, after) == {
        "interval_seconds": 2.0,
        "cpu_percent": 75.0,
        # a counter that went backwards (a re-attached device) gives no rate, not a negative one
        "disk_io": {"run": {"read_bytes_per_second": 1_000.0, "write_bytes_per_second": 2_000.0}},
        "net_sent_bytes_per_second": 2_000.0,
        "net_recv_bytes_per_second": 0.0,
        "net_errors": 2,
    }
    assert rates(after, after) == {}  # no time between them: nothing to divide by


def test_a_folder_maps_to_the_device_of_its_longest_mount_point():
    part = SimpleNamespace
    partitions = [
        part(mountpoint="/", device="/dev/vda1"),
        part(mountpoint="/data", device="/dev/nvme0n1p1"),
        part(mountpoint="/data/scratch", device="tmpfs"),
    ]
    assert device_of(Path("/data/runs/r1"), partitions) == "nvme0n1p1"
    assert device_of(Path("/database"), partitions) == "vda1"  # /data is no prefix of it
    assert device_of(Path("/data/scratch/x"), partitions) is None  # no block device: no rates


def test_the_sampler_thread_keeps_its_rate_and_takes_a_last_sample_at_stop(tmp_path):
    channel = ChannelWriter(tmp_path / "channel", generation=3, rank=0)
    ctx = SimpleNamespace(channel=channel, last_step=7, generation=3, rank=0, world_size=2)
    sampler = SystemSampler(ctx, 1.0, {"run": tmp_path, "gone": tmp_path / "missing"}, node=0)
    reader = ChannelReader(tmp_path / "channel")
    found: list = []
    sampler.start()
    deadline = time.monotonic() + 60  # a hang's bound; two samples take about 2 s
    while len(found) < 2:
        assert time.monotonic() < deadline, found
        found += list(reader.poll())
        time.sleep(0.05)
    ctx.last_step = 9
    sampler.stop()
    assert not any(t.name == "runwright-system" and t.is_alive() for t in threading.enumerate())
    channel.close()
    found += list(reader.poll())
    assert len(found) == sampler.samples >= 3  # the last one was taken at stop
    times = [m.time_unix_s for m in found[:-1]]
    assert all(b - a >= 0.9 for a, b in itertools.pairwise(times))  # the rate bound
    first = found[0]
    assert first.type == EventType.SYSTEM_SAMPLE and first.step == 7 and first.generation == 3
    assert found[-1].step == 9 and first.event_id == "g3-r0-sys1"
    attrs = first.attributes
    assert attrs["host"] == socket.gethostname() and attrs["node"] == 0
    assert set(attrs["disk_usage"]) == {"run"}  # a folder that does not exist is left out
    assert attrs["memory_total_bytes"] == psutil.virtual_memory().total
    assert 0 <= attrs["cpu_percent"] <= 100 and 0 < attrs["sample_cpu_seconds"] < 1
    assert "gpus" not in attrs  # no NVIDIA driver here


def test_the_spec_bounds_the_sampling_rate():
    assert spec_from_mapping(BASE).observability.system_sample_seconds == 10.0
    off = spec_from_mapping({**BASE, "observability": {"system_sample_seconds": None}})
    assert off.observability.system_sample_seconds is None
    for bad in (0.2, 0, -1, 7200):
        with pytest.raises(SpecError) as err:
            spec_from_mapping({**BASE, "observability": {"system_sample_seconds": bad}})
        assert "observability.system_sample_seconds" in str(err.value)
        assert "outside 1..3600" in str(err.value) and "null to switch" in str(err.value)


def sample(at: float, step: int, host: str, **attributes) -> EventRecord:
    return EventRecord(
        event_id=f"s-{host}-{at}",
        seq=int(at),
        run_id="r1",
        generation=1,
        type=EventType.SYSTEM_SAMPLE,
        step=step,
        time_unix_s=at,
        attributes={"host": host, "node": 0, "rank": 0, **attributes},
    )


GPU = {
    "index": 0,
    "utilization_percent": 97,
    "memory_used_bytes": 70 * 2**30,
    "memory_total_bytes": 80 * 2**30,
    "temperature_celsius": 71,
    "power_watts": 612.5,
    "sm_clock_mhz": 1980,
    "ecc_corrected_errors": 2,
    "ecc_uncorrected_errors": 0,
    "xid_events_total": 1,
    "xids": [79],
}


def test_samples_become_time_points_and_node_labelled_series():
    events = [
        sample(1010.0, 4, "a07", interval_seconds=10.0, cpu_percent=40.0,
               disk_io={"checkpoints": {"read_bytes_per_second": 0.0,
                                        "write_bytes_per_second": 1e6}},
               net_sent_bytes_per_second=100.0, net_recv_bytes_per_second=50.0, gpus=[GPU]),
        sample(1000.0, 2, "a07", interval_seconds=10.0, cpu_percent=20.0,
               memory_used_bytes=5, memory_total_bytes=10,
               disk_usage={"run": {"used_bytes": 3, "total_bytes": 9}, "tmp": {"used_bytes": 1}},
               disk_io={"checkpoints": {"read_bytes_per_second": 0.0,
                                        "write_bytes_per_second": 2e6}}),
        sample(1005.0, 3, "a08", cpu_percent="n/a"),
    ]  # fmt: skip
    points = system_points(events)
    assert [(p.node, p.step) for p in points] == [("a07", 2), ("a08", 3), ("a07", 4)]
    assert points[0].disk_used_bytes == {"run": 3.0}  # an unknown folder role is left out
    assert points[1].cpu_percent is None  # malformed: missing, never an error
    assert points[2].gpus[0].xids == [79] and points[2].gpus[0].power_watts == 612.5
    text = run_metrics(events).exposition()
    lines = {line for line in text.splitlines() if not line.startswith("#")}
    assert 'runwright_node_cpu_ratio{node="a07"} 0.4' in lines  # the newest sample's
    # 2 MB/s then 1 MB/s over 10 s each: 30 MB written on the checkpoint folder's device.
    assert (
        'runwright_node_disk_bytes_total{direction="write",folder="checkpoints",node="a07"} 3e+07'
        in lines
    )
    assert 'runwright_node_network_bytes_total{direction="sent",node="a07"} 1000.0' in lines
    assert 'runwright_gpu_utilization_ratio{gpu="0",node="a07"} 0.97' in lines
    assert 'runwright_gpu_sm_clock_hertz{gpu="0",node="a07"} 1.98e+09' in lines
    assert 'runwright_gpu_ecc_errors{gpu="0",kind="corrected",node="a07"} 2.0' in lines
    assert 'runwright_gpu_xid_events_total{gpu="0",node="a07"} 1.0' in lines
    assert not any('node="a08"' in line and "cpu_ratio" in line for line in lines)
    assert json.dumps([p.model_dump(mode="json") for p in points])  # the page's data encodes
