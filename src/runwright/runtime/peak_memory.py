"""A rank's peak memory and the software it ran, reported once at its close (RANK_PEAK_MEMORY),
so a performance report can list peak memory per rank and the versions behind its figures
(issue 27, "comparable performance reports").

Peak host memory is the process's maximum resident set size (getrusage `ru_maxrss`, which Linux
gives in KiB: https://man7.org/linux/man-pages/man2/getrusage.2.html). Peak device memory is the
CUDA caching allocator's high-water mark (`torch.cuda.max_memory_allocated`), read only when the
process already initialised CUDA: a CPU rank never imports the CUDA runtime for it.
"""

import platform
import resource
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any


def _package(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def software_versions() -> dict[str, str]:
    """python, torch, runwright and, when this torch was built with them, cuda and nccl; the
    driver only when CUDA is initialised (asking would start it)."""
    found: dict[str, str | None] = {
        "python": platform.python_version(),
        "torch": _package("torch"),
        "runwright": _package("runwright"),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        found["cuda"] = getattr(torch.version, "cuda", None)
        if found["cuda"] and torch.cuda.is_initialized():
            nccl = torch.cuda.nccl.version()
            found["nccl"] = ".".join(str(p) for p in nccl) if isinstance(nccl, tuple) else str(nccl)
            found["driver"] = (
                str(torch.cuda.driver_version()) if hasattr(torch.cuda, "driver_version") else None
            )
    return {k: str(v) for k, v in found.items() if v}


def peak_memory_attributes(rank: int, device_type: str | None) -> dict[str, Any]:
    """RANK_PEAK_MEMORY's attributes for this process."""
    # ru_maxrss is KiB on Linux (bytes on macOS, where runwright ranks do not run).
    host = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    device = None
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        device = int(torch.cuda.max_memory_allocated())
    return {
        "rank": rank,
        "peak_host_bytes": int(host),
        "peak_device_bytes": device,
        "device_type": device_type or "cpu",
        "versions": software_versions(),
    }
