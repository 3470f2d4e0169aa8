"""The NVML reader's conversion logic (observe/nvml.py), against a STAND-IN for pynvml: this
machine has no GPU and no NVIDIA driver, so nothing here touches a real NVML. The stand-in
mimics the documented pynvml API (https://docs.nvidia.com/deploy/nvml-api/): the functions the
reader calls, their units (milliwatts, bytes, MHz), NVMLError with its `value`, and the event
set that raises NVML_ERROR_TIMEOUT when no event is pending. The GPU path itself is unmeasured."""

from types import SimpleNamespace

from runwright.observe.nvml import GpuReader, gpu_fields, open_gpus


class StandInNvml:
    """Two GPUs: GPU 0 a data-centre card with every field; GPU 1 a card without ECC or power.
    Xid events are queued per test."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_TIMEOUT = 10
    nvmlEventTypeXidCriticalError = 0x8

    class NVMLError(Exception):
        def __init__(self, value):
            super().__init__(value)
            self.value = value

    def __init__(self, gpus: int = 2, driver: bool = True) -> None:
        self.gpus, self.driver = gpus, driver
        self.pending: list[tuple[int, int]] = []
        self.calls: list[str] = []

    def nvmlInit(self):
        if not self.driver:
            raise self.NVMLError(9)  # NVML_ERROR_DRIVER_NOT_LOADED
        self.calls.append("init")

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self):
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"handle{i}"

    def _unsupported_on_1(self, handle):
        if handle == "handle1":
            raise self.NVMLError(self.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=88 if h == "handle0" else 5, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=60 * 2**30, total=80 * 2**30, free=20 * 2**30)

    def nvmlDeviceGetTemperature(self, h, sensor):
        assert sensor == self.NVML_TEMPERATURE_GPU
        return 67

    def nvmlDeviceGetPowerUsage(self, h):
        self._unsupported_on_1(h)
        return 612_345  # milliwatts

    def nvmlDeviceGetClockInfo(self, h, clock):
        return {self.NVML_CLOCK_SM: 1980, self.NVML_CLOCK_MEM: 2619}[clock]

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        self._unsupported_on_1(h)
        assert counter == self.NVML_VOLATILE_ECC
        return {
            self.NVML_MEMORY_ERROR_TYPE_CORRECTED: 12,
            self.NVML_MEMORY_ERROR_TYPE_UNCORRECTED: 1,
        }[kind]

    def nvmlEventSetCreate(self):
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h, types, event_set):
        assert types == self.nvmlEventTypeXidCriticalError and event_set == "event-set"

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        assert timeout_ms == 0  # never blocks the sampler
        if not self.pending:
            raise self.NVMLError(self.NVML_ERROR_TIMEOUT)
        gpu, xid = self.pending.pop(0)
        return SimpleNamespace(device=f"handle{gpu}", eventType=0x8, eventData=xid)

    def nvmlEventSetFree(self, event_set):
        self.calls.append("free")


def test_fields_in_base_units_and_unsupported_ones_left_out():
    nvml = StandInNvml()
    assert gpu_fields(nvml, "handle0", 0) == {
        "index": 0,
        "utilization_percent": 88,
        "memory_used_bytes": 60 * 2**30,
        "memory_total_bytes": 80 * 2**30,
        "temperature_celsius": 67,
        "power_watts": 612.3,  # 612,345 mW
        "sm_clock_mhz": 1980,
        "memory_clock_mhz": 2619,
        "ecc_corrected_errors": 12,
        "ecc_uncorrected_errors": 1,
    }
    partial = gpu_fields(nvml, "handle1", 1)
    assert "power_watts" not in partial and "ecc_uncorrected_errors" not in partial
    assert partial["utilization_percent"] == 5


def test_xid_events_are_counted_per_gpu_between_reads():
    nvml = StandInNvml()
    reader = open_gpus(nvml)
    assert isinstance(reader, GpuReader) and len(reader.handles) == 2
    nvml.pending = [(1, 79), (0, 13), (1, 48)]
    first = reader.read()
    assert [g.get("xids") for g in first] == [[13], [79, 48]]
    assert [g["xid_events_total"] for g in first] == [1, 2]
    second = reader.read()  # nothing new: totals stay, no `xids`
    assert [g.get("xids") for g in second] == [None, None]
    assert [g["xid_events_total"] for g in second] == [1, 2]
    reader.close()
    assert nvml.calls == ["init", "free", "shutdown"]


def test_no_driver_or_no_gpu_means_no_reader():
    assert open_gpus(StandInNvml(driver=False)) is None
    no_gpu = StandInNvml(gpus=0)
    assert open_gpus(no_gpu) is None and no_gpu.calls[-1] == "shutdown"
