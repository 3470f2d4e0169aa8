"""Stop requests reach a worker two ways and are honoured only at a step boundary.

1. The controller writes `<run_dir>/control/stop-gen<G>.json` (cancel, budget, preemption it
   decided on). Only generation G's workers read it.
2. The infrastructure sends SIGTERM (as Slurm and Kubernetes do before a preemption); the handler
   only sets a flag, so nothing is interrupted mid-step.

All ranks of a data-parallel group must stop at the same step or the others would block in the
next collective, so the decision is agreed with one all-reduce of a flag (MAX) at the boundary.
"""

import json
import os
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from pydantic import BaseModel, ConfigDict

from runwright.layout import RunPaths

STOP_REASONS = ("cancel", "preemption", "budget", "controller")
# Reading the stop file costs a stat(); at most this often per process.
STOP_FILE_POLL_SECONDS = 0.5


class StopRequest(BaseModel):
    """Why the group stops and whether it saves first."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: str
    """One of cancel, preemption, budget, controller."""
    save: bool = True
    """Save a checkpoint at the stop step before exiting."""
    requested_unix_s: float
    fence_generation: int | None = None
    """For a cancel, the generation the controller already bumped to: the stopping group
    publishes its final checkpoint and events under it (the old one is fenced off)."""


def write_stop_request(
    run_dir: Path,
    generation: int,
    reason: str,
    save: bool = True,
    fence_generation: int | None = None,
) -> Path:
    """Controller side: ask generation `generation` to stop at its next step boundary."""
    path = RunPaths(run_dir).stop_file(generation)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    request = StopRequest(
        reason=reason, save=save, requested_unix_s=time.time(), fence_generation=fence_generation
    )
    tmp.write_text(request.model_dump_json())
    os.replace(tmp, path)
    return path


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
            try:
                self._request = StopRequest.model_validate(json.loads(self.path.read_text()))
            except (FileNotFoundError, ValueError):
                return None
        return self._request

    def read_file(self) -> StopRequest | None:
        """The controller's request itself, whatever this rank saw locally."""
        try:
            return StopRequest.model_validate(json.loads(self.path.read_text()))
        except (FileNotFoundError, ValueError):
            return None


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
