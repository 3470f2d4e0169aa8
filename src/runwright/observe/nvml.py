"""Per-GPU readings through NVML (nvidia-ml-py's `pynvml`), imported only where it is asked for.

What a sample carries per GPU, in base units: utilisation (percent of the last sample period the
GPU ran a kernel), memory used and total (bytes), temperature (degrees Celsius), power (watts;
NVML reports milliwatts), SM and memory clocks (MHz), the volatile ECC counts (corrected and
uncorrected errors since the driver loaded), and the Xid events NVML delivered since the last
sample. A field the device does not support (ECC on a consumer card, power on some boards) is
left out rather than reported as 0.

Xid events come from an NVML event set registered for `nvmlEventTypeXidCriticalError`, polled
without blocking (`nvmlEventSetWait_v2(set, 0)` raises NVML_ERROR_TIMEOUT when none is pending).
Despite the name, NVML delivers every Xid through it, including those a user's program causes
(13, 31, 43); `HARDWARE_XIDS` are the ones the NVIDIA Xid catalogue attributes to the GPU, its
memory or its links, and only those count towards draining a node (control/node_health.py).

API: https://docs.nvidia.com/deploy/nvml-api/ (Device Queries, Event Handling Methods); Xid
catalogue: https://docs.nvidia.com/deploy/xid-errors/. This module was written against those
documents and nvidia-ml-py 13.615; no GPU ran it here (the conversion is tested with a stand-in
NVML in tests/observe/test_nvml.py), so the GPU path is unmeasured.
"""

from collections.abc import Callable
from types import ModuleType
from typing import Any

HARDWARE_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120})
"""Xids of a failing part (NVIDIA Xid catalogue): 48 double-bit ECC error, 63/64 row-remapping
event/failure, 74 NVLink error, 79 GPU fell off the bus, 92 high single-bit ECC rate, 94/95
contained/uncontained ECC error, 119/120 GSP timeout/error."""


def _field(nvml: Any, read: Callable[[], Any]) -> Any:
    """`read()`, or None when NVML says the device cannot answer (not supported, no permission,
    a GPU lost mid-sample: the next sample tries again)."""
    try:
        return read()
    except nvml.NVMLError:
        return None


def gpu_fields(nvml: Any, handle: Any, index: int) -> dict[str, Any]:
    """One GPU's sample in base units; fields the device cannot give are absent."""
    out: dict[str, Any] = {"index": index}
    util = _field(nvml, lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
    if util is not None:
        out["utilization_percent"] = int(util.gpu)
    memory = _field(nvml, lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    if memory is not None:
        out["memory_used_bytes"] = int(memory.used)
        out["memory_total_bytes"] = int(memory.total)
    readings = {
        "temperature_celsius": lambda: nvml.nvmlDeviceGetTemperature(
            handle, nvml.NVML_TEMPERATURE_GPU
        ),
        "power_watts": lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,  # mW -> W
        "sm_clock_mhz": lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
        "memory_clock_mhz": lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
        "ecc_corrected_errors": lambda: nvml.nvmlDeviceGetTotalEccErrors(
            handle, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_VOLATILE_ECC
        ),
        "ecc_uncorrected_errors": lambda: nvml.nvmlDeviceGetTotalEccErrors(
            handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
        ),
    }
    for name, read in readings.items():
        value = _field(nvml, read)
        if value is not None:
            out[name] = round(float(value), 1) if name == "power_watts" else int(value)
    return out


class GpuReader:
    """The node's GPUs through an initialised NVML; `open_gpus` builds one."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        count = nvml.nvmlDeviceGetCount()
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.xid_events_total = [0] * count
        self.events: Any = None
        try:
            self.events = nvml.nvmlEventSetCreate()
            for handle in self.handles:
                nvml.nvmlDeviceRegisterEvents(
                    handle, nvml.nvmlEventTypeXidCriticalError, self.events
                )
        except nvml.NVMLError:
            self.events = None  # no Xid events on this driver or device: the counts stay 0

    def read(self) -> list[dict[str, Any]]:
        """Every GPU's fields, with the Xids that arrived since the last read."""
        xids = self._pending_xids()
        gpus = []
        for index, handle in enumerate(self.handles):
            fields = gpu_fields(self.nvml, handle, index)
            mine = [code for i, code in xids if i == index]
            self.xid_events_total[index] += len(mine)
            fields["xid_events_total"] = self.xid_events_total[index]
            if mine:
                fields["xids"] = mine
            gpus.append(fields)
        return gpus

    def _pending_xids(self) -> list[tuple[int, int]]:
        """(GPU index, Xid) of every event waiting in the set, read without blocking."""
        if self.events is None:
            return []
        found = []
        while True:
            try:
                data = self.nvml.nvmlEventSetWait_v2(self.events, 0)
            except self.nvml.NVMLError as exc:
                if getattr(exc, "value", None) != self.nvml.NVML_ERROR_TIMEOUT:
                    self.events = None  # the set broke (driver gone): stop polling it
                return found
            found.append((self._index_of(data.device), int(data.eventData)))

    def _index_of(self, handle: Any) -> int:
        for index, mine in enumerate(self.handles):
            if _same_device(mine, handle):
                return index
        return -1

    def close(self) -> None:
        try:
            if self.events is not None:
                self.nvml.nvmlEventSetFree(self.events)
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass  # the driver is gone already: nothing left to release


def _same_device(a: Any, b: Any) -> bool:
    # pynvml hands device handles back as ctypes pointers: equal devices have equal addresses.
    value = getattr(a, "contents", None)
    other = getattr(b, "contents", None)
    if value is not None and other is not None:
        import ctypes

        return ctypes.addressof(value) == ctypes.addressof(other)
    return a == b


def open_gpus(nvml: ModuleType | None = None) -> GpuReader | None:
    """A reader of this node's GPUs, or None without nvidia-ml-py, an NVIDIA driver or a GPU."""
    if nvml is None:
        try:
            import pynvml as nvml  # lazily: only the sampling thread of a node pays for it
        except ImportError:
            return None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return None  # no driver (this CPU machine): the samples carry no `gpus`
    try:
        reader = GpuReader(nvml)
    except nvml.NVMLError:
        nvml.nvmlShutdown()
        return None
    if not reader.handles:
        reader.close()
        return None
    return reader
