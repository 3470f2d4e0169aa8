"""Stop requests reach a worker two ways and are honoured only at a step boundary.

1. The controller writes `<run_dir>/control/stop-gen<G>.json` (cancel, budget, preemption it
   decided on; `runwright.protocol.write_stop_request`). Only generation G's workers read it.
2. The infrastructure sends SIGTERM (as Slurm and Kubernetes do before a preemption); the handler
   only sets a flag, so nothing is interrupted mid-step.

All ranks of a data-parallel group must stop at the same step or the others would block in the
next collective, so the decision is agreed with one all-reduce of a flag (MAX) at the boundary.
"""

import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from runwright.layout import RunPaths
from runwright.protocol import STOP_REASONS, StopRequest, read_stop_request

# Reading the stop file costs a stat(); at most this often per process.
STOP_FILE_POLL_SECONDS = 0.5


class StopWatcher:
    """Worker side: remembers SIGTERM and polls the stop file, cheaply."""

    def __init__(self, run_dir: Path, generation: int) -> None:
        self.path = RunPaths(run_dir).stop_file(generation)
        self._sigterm = threading.Event()
        self._request: StopRequest | None = None
        self._next_poll = 0.0
        self._previous: Any = None

    def install_signal_handler(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, _signum: int, _frame: FrameType | None) -> None:
        self._sigterm.set()

    def local_request(self) -> StopRequest | None:
        """This process's view: a stop file or a SIGTERM, without talking to other ranks."""
        if self._request is not None:
            return self._request
        if self._sigterm.is_set():
            self._request = StopRequest(reason="preemption", requested_unix_s=time.time())
            return self._request
        now = time.monotonic()
        if now >= self._next_poll:
            self._next_poll = now + STOP_FILE_POLL_SECONDS
            self._request = read_stop_request(self.path)
        return self._request

    def read_file(self) -> StopRequest | None:
        """The controller's request itself, whatever this rank saw locally."""
        return read_stop_request(self.path)


def agree_on_stop(local: StopRequest | None) -> StopRequest | None:
    """Collective: if any rank wants to stop, every rank stops at this boundary."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return local
    # Encode the reason as its index + 1 so MAX picks a defined one and 0 means "go on".
    code = 0 if local is None else STOP_REASONS.index(local.reason) + 1
    device = (
        torch.device("cuda", torch.cuda.current_device())
        if dist.get_backend() == "nccl"
        else torch.device("cpu")
    )
    flag = torch.tensor([code, int(local.save) if local else 0], dtype=torch.int64, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    # One device-to-host copy for both fields (on NCCL each int(flag[i]) would be a sync).
    code, save = flag.tolist()
    if code == 0:
        return None
    if local is not None:
        return local
    return StopRequest(reason=STOP_REASONS[code - 1], save=bool(save), requested_unix_s=time.time())
