"""Stop requests reach a worker three ways and are honoured only at a step boundary.

1. The controller writes `<run_dir>/control/stop-gen<G>.json` (cancel, budget, preemption it
   decided on; `runwright.protocol.write_stop_request`). Only generation G's workers read it.
2. The infrastructure sends SIGTERM (as Slurm and Kubernetes do before a preemption): a
   preemption stop.
3. The user presses Ctrl-C under plain torchrun (SIGINT): a cancel.

A signal handler only sets a flag, so nothing is interrupted mid-step. A second signal of the same
kind takes the handler that was there before (Ctrl-C twice interrupts at once), and a handler the
script installed itself is called on every signal too.

All ranks of a data-parallel group must stop at the same step or the others would block in the
next collective. Two boundaries agree on it:
- the step loop (`StepLoop`, the full integration) all-reduces a flag every few boundaries
  (about a quarter second of steps), overlapped with the steps between two votes
  (`OverlappedStopVote`: the vote cast at one voting boundary decides at the next);
- `step_healthy` (the two-line integration) may be called by some ranks only, so it cannot take
  part in a collective: `StopAgreement` writes the step every rank stops after into torchrun's
  store with compare-and-set (the first rank to see a stop at step s names s + 1, after which the
  others read it). Ranks that synchronise every step cannot be a step apart, so every rank reads
  the key before it finishes step s + 1, and all stop after it; the script sees `StopRun`.
"""

import os
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any, NamedTuple

from runwright.layout import RunPaths
from runwright.protocol import STOP_REASONS, StopRequest, read_stop_request

SIGNAL_REASONS = {signal.SIGTERM: "preemption", signal.SIGINT: "cancel"}
"""What each signal asks for, as a stop reason."""
STORE_CONNECT_SECONDS = 30.0
"""How long a rank waits to reach torchrun's store for the stop agreement before it gives up and
stops on its own view (logged)."""


class StopRun(SystemExit):
    """Raised by `RunContext.step_healthy` at the step boundary where the run stops (cancel,
    preemption, budget, Ctrl-C). Catch it to save a checkpoint before exiting; uncaught, it ends
    the process quietly (it is a SystemExit, so `except Exception` does not swallow it) with
    `exit_code`: 0 for a stop the controller asked for, 128 + the signal for a signal."""

    def __init__(self, request: StopRequest, step: int, exit_code: int = 0) -> None:
        self.request, self.step, self.exit_code = request, step, exit_code
        super().__init__(exit_code)

    def __str__(self) -> str:
        return f"run stopped after step {self.step} ({self.request.reason})"


# Reading the stop file costs a stat(); at most this often per process.
STOP_FILE_POLL_SECONDS = 0.5


class StopWatcher:
    """Worker side: remembers SIGTERM and polls the stop file, cheaply."""

    def __init__(self, run_dir: Path, generation: int) -> None:
        self.path = RunPaths(run_dir).stop_file(generation)
        self._signalled: dict[int, float] = {}
        """signal -> when it first came."""
        self._request: StopRequest | None = None
        self._next_poll = 0.0
        self._previous: dict[int, Any] = {}

    def install_signal_handler(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in SIGNAL_REASONS:
            previous = signal.signal(signum, self._on_signal)
            # A second init() in one process replaces the first one's watcher rather than
            # chaining to it: chain to what was there before runwright.
            older = getattr(previous, "__self__", None)
            if isinstance(older, StopWatcher):
                previous = older._previous.get(signum, signal.SIG_DFL)
            self._previous[signum] = previous

    def uninstall_signal_handler(self) -> None:
        """Put back the handlers that were there before, where this watcher's are still
        installed (the run context's close does this)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, previous in self._previous.items():
            if signal.getsignal(signum) == self._on_signal:
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        first = signum not in self._signalled
        self._signalled.setdefault(signum, time.time())
        previous = self._previous.get(signum)
        if callable(previous) and previous is not signal.default_int_handler:
            previous(signum, frame)  # the script's own handler
        elif not first:
            # A second Ctrl-C or SIGTERM: the default action, now.
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
            if signum == signal.SIGINT and previous is signal.default_int_handler:
                raise KeyboardInterrupt
            os.kill(os.getpid(), signum)

    @property
    def signal_exit_code(self) -> int:
        """128 + the first signal that asked for the stop, or 0 when none did."""
        return 128 + min(self._signalled, key=self._signalled.__getitem__) if self._signalled else 0

    def local_request(self) -> StopRequest | None:
        """This process's view: a stop file or a signal, without talking to other ranks."""
        if self._request is not None:
            return self._request
        if self._signalled:
            first = min(self._signalled, key=self._signalled.__getitem__)
            self._request = StopRequest(
                reason=SIGNAL_REASONS[signal.Signals(first)], requested_unix_s=time.time()
            )
            return self._request
        now = time.monotonic()
        if now >= self._next_poll:
            self._next_poll = now + STOP_FILE_POLL_SECONDS
            self._request = read_stop_request(self.path)
        return self._request

    def read_file(self) -> StopRequest | None:
        """The controller's request itself, whatever this rank saw locally."""
        return read_stop_request(self.path)


def _vote_device() -> Any:
    import torch
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _encode_vote(local: StopRequest | None, stride: int = 1) -> Any:
    """The rank's vote as [reason index + 1 (0: go on), save, the stride it proposes]: MAX picks
    a defined reason and one stride for every rank."""
    import torch

    # A reason this rank does not know (a newer controller's) still stops the group.
    known = local is None or local.reason in STOP_REASONS
    reason = "controller" if not known else (local.reason if local else "")
    code = 0 if local is None else STOP_REASONS.index(reason) + 1
    save = int(local.save) if local else 0
    return torch.tensor([code, save, stride], dtype=torch.int64, device=_vote_device())


def _decode_vote(flag: Any, local: StopRequest | None) -> tuple[StopRequest | None, int]:
    """(the stop the group agreed on, else None; the stride it agreed on)."""
    # One device-to-host copy for all fields (on NCCL each int(flag[i]) would be a sync).
    code, save, stride = flag.tolist()
    if code == 0:
        return None, max(1, stride)
    if local is not None:
        return local, 1
    request = StopRequest(
        reason=STOP_REASONS[code - 1], save=bool(save), requested_unix_s=time.time()
    )
    return request, 1


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


VOTE_EVERY_SECONDS = 0.25
"""How often the step loop's stop vote runs: about every quarter second of steps, so a stop is
agreed within about half a second (the stop file is read every `STOP_FILE_POLL_SECONDS` too)."""
MAX_VOTE_STRIDE = 16
"""The most steps between two votes. The stride is fixed a vote ahead, from step times measured
before it, so a run whose steps turn slow (an evaluation, a save) waits at most this many of them
for its stop."""


class OverlappedStopVote:
    """The step loop's stop vote, overlapped with the steps that follow it and cast every few
    steps.

    A blocking all-reduce at every boundary costs a round trip per step and, on NCCL, reading
    its result waits for the device to finish the step, so the host can never run a step ahead.
    Here the vote cast at one voting boundary is read at the next: the all-reduce runs while the
    steps between them are computed (and on a device, reading it waits only for the step before
    it). A gloo all-reduce in flight also costs its background thread CPU while it waits for the
    slower rank, a cost per vote: so votes are `stride` boundaries apart, about
    `VOTE_EVERY_SECONDS` of steps (at most `MAX_VOTE_STRIDE`). The stride is part of the vote
    (each rank proposes one from its own step time, the MAX wins), so every rank reads the same
    vote at the same boundary and all still stop after the same step. Without a process group
    (or with one rank) the local request decides at once, at every boundary."""

    def __init__(self) -> None:
        self._pending: tuple[Any, Any, StopRequest | None] | None = None
        """(the all-reduce's work handle, its tensor, this rank's request when it voted)."""
        self._all_reduce: Any = None
        """`dist.all_reduce` once a group of 2+ ranks was seen (it stays for the loop's life)."""
        self._flag: Any = None
        """The vote tensor, reused once its all-reduce was read: a boundary costs no
        allocation and no device lookup (cold, each was a few percent of the boundary)."""
        self.stride = 1
        """Boundaries from one vote to the next, as the group last agreed."""
        self._until_vote = 0
        """Boundaries left before the next vote (0: this one votes)."""
        self._last_vote_at = 0.0
        self._step_seconds = 0.0
        """This rank's step time, measured between votes."""

    def boundary(self, local: StopRequest | None) -> StopRequest | None:
        """The stop every rank agrees on at this boundary, else None (and, at a voting
        boundary, a new vote cast)."""
        if self._all_reduce is None:
            if not _distributed():
                return local
            import torch.distributed as dist

            self._all_reduce = dist.all_reduce
            self._max = dist.ReduceOp.MAX
        if self._until_vote > 0:
            self._until_vote -= 1
            return None
        now = time.monotonic()
        if self._last_vote_at:
            self._step_seconds = (now - self._last_vote_at) / self.stride
        self._last_vote_at = now
        if self._pending is not None:
            work, flag, voted = self._pending
            self._pending = None
            work.wait()
            decided, self.stride = _decode_vote(flag, voted)
            if decided is not None:
                return decided
            self._flag = flag
        proposal = _stride_for(self._step_seconds)
        if local is None and self._flag is not None:
            flag, self._flag = self._flag, None
            flag.zero_()  # [0, 0, ...]: go on
            flag[2] = proposal
        else:
            flag = _encode_vote(local, proposal)
        work = self._all_reduce(flag, op=self._max, async_op=True)
        self._pending = (work, flag, local)
        self._until_vote = self.stride - 1
        return None

    def finish(self) -> None:
        """Complete the vote still in flight when the loop ran to its last step (every rank
        cast it, so this returns as soon as the all-reduce does)."""
        if self._pending is not None:
            work = self._pending[0]
            self._pending = None
            work.wait()


def _stride_for(step_seconds: float) -> int:
    """The boundaries between votes this rank proposes: about `VOTE_EVERY_SECONDS` of steps."""
    if step_seconds <= 0:
        return 1
    return max(1, min(MAX_VOTE_STRIDE, int(VOTE_EVERY_SECONDS / step_seconds)))


class AgreedStop(NamedTuple):
    last_step: int
    """Every rank stops after this step."""
    reason: str
    """The reason of the rank that named it."""


class StopAgreement:
    """The step after which every rank stops, agreed through torchrun's store without a
    collective (see the module doc). One per process and generation."""

    def __init__(self, generation: int, world_size: int) -> None:
        self.key = f"runwright/stop-after-step/g{generation}"
        self.world_size = world_size
        self._store: Any = None
        self._unreachable = False
        self.agreed: AgreedStop | None = None

    def _connect(self) -> Any:
        if self._store is None and not self._unreachable:
            host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
            if host and port:
                from torch.distributed import TCPStore

                try:
                    self._store = TCPStore(
                        host,
                        int(port),
                        is_master=False,
                        timeout=timedelta(seconds=STORE_CONNECT_SECONDS),
                    )
                except (RuntimeError, ValueError) as exc:
                    import logging

                    logging.getLogger(__name__).warning(
                        "cannot reach torchrun's store at %s:%s (%s): this rank stops on its "
                        "own view of stop requests",
                        host,
                        port,
                        exc,
                    )
                    self._unreachable = True
            else:
                self._unreachable = True
        return self._store

    def stop_after(self, step: int, local: StopRequest | None) -> AgreedStop | None:
        """The agreed stop, once any rank has named one; None while the run goes on. `local` is
        this rank's own view at the end of `step`."""
        if self.agreed is not None:
            return self.agreed
        store = self._connect() if self.world_size > 1 else None
        if store is None:
            if local is not None:
                self.agreed = AgreedStop(step, local.reason)
            return self.agreed
        if local is not None:
            # The first rank to ask names the next step; the value read back is whoever won.
            value = store.compare_set(self.key, "", f"{step + 1} {local.reason}")
        elif store.check([self.key]):
            value = store.get(self.key)
        else:
            return None
        last, reason = value.decode().split(" ", 1)
        self.agreed = AgreedStop(int(last), reason)
        return self.agreed
