"""One node's CPU, memory, disk and network, read with psutil, as a SYSTEM_SAMPLE's attributes.

Seed 004 puts a system layer beside the training, data and checkpoint signals: a loader stall
next to a saturated disk, a slow step next to a swapping host. psutil's counters are cumulative
(CPU times, bytes read and written, bytes sent and received since boot), so a sample is the
difference of two readings divided by the seconds between them (`rates`, a pure function the
tests drive with made-up readings). Usage (`disk_usage`, `virtual_memory`) is a level, read as
is.

Disks: the sample covers the file systems of the folders the run writes (the run folder and a
local checkpoint root), named by their role (`run`, `checkpoints`), never by device, so a
Prometheus label stays bounded. A folder's device is the partition with the longest mount point
above it; file systems without a block device (overlay, tmpfs, NFS) have usage but no I/O
counters, and their rates are left out rather than guessed.

psutil docs: https://psutil.readthedocs.io/en/latest/ (cpu_times, virtual_memory, disk_usage,
disk_partitions, disk_io_counters(perdisk=True), net_io_counters(pernic=True)).
"""

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

LOOPBACK_PREFIXES = ("lo",)
"""Interfaces whose traffic never leaves the node (`lo`): not network load."""


@dataclass(frozen=True)
class DiskCounters:
    read_bytes: int
    write_bytes: int


@dataclass(frozen=True)
class Reading:
    """The cumulative counters at one moment (`time.monotonic()` seconds)."""

    monotonic_s: float
    cpu_busy_s: float
    """CPU seconds not idle (nor iowait), summed over cores, since boot."""
    cpu_total_s: float
    disks: dict[str, DiskCounters] = field(default_factory=dict)
    """role (`run`, `checkpoints`) -> its device's counters; a role without counters is absent."""
    net_sent_bytes: int = 0
    net_recv_bytes: int = 0
    net_errors: int = 0
    """Errors and drops in and out, summed over the node's non-loopback interfaces."""


def rates(before: Reading, after: Reading) -> dict[str, Any]:
    """What happened between two readings, per second; {} when no time passed between them.

    CPU: busy share of all cores, `100 * d(busy) / d(total)` (the same as `top`'s summary line
    and psutil.cpu_percent). A counter that went backwards (a device re-attached, a wrap) gives
    no rate rather than a negative one."""
    seconds = after.monotonic_s - before.monotonic_s
    if seconds <= 0:
        return {}
    out: dict[str, Any] = {"interval_seconds": round(seconds, 3)}
    total = after.cpu_total_s - before.cpu_total_s
    if total > 0:
        busy = after.cpu_busy_s - before.cpu_busy_s
        out["cpu_percent"] = round(min(max(100.0 * busy / total, 0.0), 100.0), 2)
    disks: dict[str, dict[str, float]] = {}
    for role, now in after.disks.items():
        was = before.disks.get(role)
        if was is None or now.read_bytes < was.read_bytes or now.write_bytes < was.write_bytes:
            continue
        disks[role] = {
            "read_bytes_per_second": round((now.read_bytes - was.read_bytes) / seconds, 1),
            "write_bytes_per_second": round((now.write_bytes - was.write_bytes) / seconds, 1),
        }
    out["disk_io"] = disks
    sent = after.net_sent_bytes - before.net_sent_bytes
    recv = after.net_recv_bytes - before.net_recv_bytes
    if sent >= 0 and recv >= 0:
        out["net_sent_bytes_per_second"] = round(sent / seconds, 1)
        out["net_recv_bytes_per_second"] = round(recv / seconds, 1)
    errors = after.net_errors - before.net_errors
    if errors >= 0:
        out["net_errors"] = errors
    return out


def device_of(path: Path, partitions: list[Any]) -> str | None:
    """The block device name (`nvme0n1p1`, as disk_io_counters keys it) holding `path`: the
    partition with the longest mount point above it; None for a file system without one."""
    real = os.path.realpath(path)
    best: tuple[int, str] | None = None
    for part in partitions:
        mount = part.mountpoint.rstrip("/") or "/"
        above = real == mount or real.startswith(mount if mount == "/" else mount + "/")
        if above and (best is None or len(mount) > best[0]):
            best = (len(mount), part.device)
    if best is None or not best[1].startswith("/dev/"):
        return None
    return os.path.basename(os.path.realpath(best[1]))


class HostReader:
    """Reads this node's counters and levels; `folders` maps a role to a local folder."""

    def __init__(self, folders: dict[str, Path]) -> None:
        self.folders = {role: path for role, path in folders.items() if path.exists()}
        partitions = psutil.disk_partitions(all=True)
        self.devices = {
            role: dev for role, path in self.folders.items() if (dev := device_of(path, partitions))
        }

    def read(self) -> Reading:
        cpu = psutil.cpu_times()
        idle = cpu.idle + getattr(cpu, "iowait", 0.0)
        total = sum(cpu)
        disks: dict[str, DiskCounters] = {}
        if self.devices:
            per_disk = psutil.disk_io_counters(perdisk=True) or {}
            for role, device in self.devices.items():
                counters = per_disk.get(device)
                if counters is not None:
                    disks[role] = DiskCounters(counters.read_bytes, counters.write_bytes)
        sent = recv = errors = 0
        for nic, c in (psutil.net_io_counters(pernic=True) or {}).items():
            if nic.startswith(LOOPBACK_PREFIXES):
                continue
            sent, recv = sent + c.bytes_sent, recv + c.bytes_recv
            errors += c.errin + c.errout + c.dropin + c.dropout
        return Reading(
            monotonic_s=time.monotonic(),
            cpu_busy_s=total - idle,
            cpu_total_s=total,
            disks=disks,
            net_sent_bytes=sent,
            net_recv_bytes=recv,
            net_errors=errors,
        )

    def levels(self) -> dict[str, Any]:
        """Memory and disk usage now, and the 1-minute load average."""
        memory = psutil.virtual_memory()
        out: dict[str, Any] = {
            "memory_used_bytes": int(memory.total - memory.available),
            "memory_total_bytes": int(memory.total),
            "swap_used_bytes": int(psutil.swap_memory().used),
            "load1": round(os.getloadavg()[0], 2),
            "cpu_count": psutil.cpu_count() or 0,
        }
        usage: dict[str, dict[str, int]] = {}
        for role, path in self.folders.items():
            try:
                found = psutil.disk_usage(str(path))
            except OSError:
                continue  # the folder went away (a test's tmp dir); the next sample says so
            usage[role] = {"used_bytes": int(found.used), "total_bytes": int(found.total)}
        out["disk_usage"] = usage
        return out
