"""Collective telemetry (issue 24): every collective a rank issues through runwright's hooks, in a
bounded ring buffer, and what the rank is doing between them, so a hang names the rank that never
arrived instead of the last one to time out (seed 000, 8.7).

    log = collective_log.process_log()          # one per process, always on
    rec = log.enter("all_reduce", tensor, group, bucket=3)   # the hooks do this
    ...; log.exit(rec)
    with collective_log.doing("data_wait", shard="00017"): batch = next(batches)

A record is (group, sequence number, op, dtype, bytes, shape, step, enter and exit times on the
monotonic and the wall clock, detail). The sequence number counts the collectives this rank
issued on that group through the hooks, so ranks that run the same code number them alike: the
ranks at #1834 of a group wait for a rank whose newest entry there is #1833. The hooks that feed
it live in runtime/collective_hooks.py (DDP buckets, FSDP2 all-gather and reduce-scatter, the
explicit helper, NCCL's Flight Recorder).

The buffer leaves the process even when the rank is wedged: `Dumper` registers faulthandler on
SIGUSR1 (its C handler writes every thread's Python stack even while the main thread is blocked
in a C call, where no Python signal handler would run) and a daemon thread that watches the stack
file grow and then writes the buffer, the phase and the main thread's top frames as JSON. The
controller sends the signal when its watchdog declares a hang (control/hang_dumps.py); the same
JSON is written at interpreter exit.
"""

import atexit
import contextlib
import faulthandler
import json
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runwright.protocol import DUMP_SIGNAL
from runwright.runtime.file_growth import FileGrowth

DEFAULT_CAPACITY = 2048
"""Records kept per rank: 2048 x ~200 B of JSON = ~400 KB per dump; at 10 buckets a step, the
last 200 steps."""
SETTLE_SECONDS = 0.01
"""How long faulthandler's writes must pause before the stacks are read as complete."""
STACK_FRAMES = 12
"""Top frames of the main thread a dump keeps."""


_DTYPE_NAMES: dict[Any, str] = {}


def _dtype_name(dtype: Any) -> str:
    """ "float32" for torch.float32, formatted once per dtype (a hook makes one per bucket)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


class Collective:
    """One collective as this rank saw it. Slotted: the hooks make one per call."""

    __slots__ = (
        "bytes", "detail", "dtype", "enter_mono", "enter_wall", "exit_mono", "exit_wall",
        "group", "op", "seq", "shape", "step",
    )  # fmt: skip

    def __init__(
        self, group: str, seq: int, op: str, dtype: str, nbytes: int, shape: tuple, step: int
    ) -> None:
        self.group, self.seq, self.op = group, seq, op
        self.dtype, self.bytes, self.shape, self.step = dtype, nbytes, shape, step
        self.enter_mono, self.enter_wall = time.monotonic(), time.time()
        self.exit_mono: float | None = None
        self.exit_wall: float | None = None
        self.detail: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "seq": self.seq,
            "op": self.op,
            "dtype": self.dtype,
            "bytes": self.bytes,
            "shape": list(self.shape),
            "step": self.step,
            "enter_mono": self.enter_mono,
            "enter_wall": self.enter_wall,
            "exit_mono": self.exit_mono,
            "exit_wall": self.exit_wall,
            **({"detail": self.detail} if self.detail else {}),
        }


class Doing:
    """`with log.doing(phase)`: marks what the rank does until the block ends (the phase a dump
    reports for a rank outside any collective). Slotted, like the step loop's phase timers."""

    __slots__ = ("_before", "_log", "_phase")

    def __init__(self, log: "CollectiveLog", phase: tuple) -> None:
        self._log, self._phase = log, phase

    def __enter__(self) -> None:
        self._before = self._log.phase
        self._log.phase = self._phase

    def __exit__(self, *_exc: object) -> None:
        self._log.phase = self._before


class CollectiveLog:
    """A rank's bounded record of its collectives and current phase."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.records: deque[Collective] = deque(maxlen=capacity)
        self.recording = True
        """False when PyTorch's NCCL Flight Recorder keeps the record instead (not duplicated)."""
        self.step = 0
        """The step being computed (the step loop sets it): each record carries it."""
        self.phase: tuple | None = None
        """(name, since monotonic, since wall, detail) of what the rank does now, or None."""
        self._seq: dict[str, int] = {}
        self._group_names: dict[int, str] = {}

    def group_name(self, group: Any) -> str:
        """A process group's name as torch numbers it ("0" the default group), cached."""
        key = id(group)
        name = self._group_names.get(key)
        if name is None:
            name = "0" if group is None else str(getattr(group, "group_name", key))
            self._group_names[key] = name
        return name

    def enter(self, op: str, tensor: Any, group: Any = None, **detail: Any) -> Collective | None:
        """Record that this rank enters `op` on `group` with `tensor`; None when not recording."""
        if not self.recording:
            return None
        name = self.group_name(group)
        seq = self._seq[name] = self._seq.get(name, 0) + 1
        record = Collective(
            name, seq, op, _dtype_name(tensor.dtype),
            tensor.numel() * tensor.element_size(), tuple(tensor.shape), self.step,
        )  # fmt: skip
        if detail:
            record.detail = detail
        self.records.append(record)
        return record

    @staticmethod
    def exit(record: Collective | None) -> None:
        """The collective `record` completed on this rank."""
        if record is not None:
            record.exit_mono, record.exit_wall = time.monotonic(), time.time()

    @property
    def issued(self) -> int:
        """Collectives recorded since the process started, the ones the ring dropped included."""
        return sum(self._seq.values())

    def doing(self, phase: str, **detail: Any) -> Doing:
        return Doing(self, (phase, time.monotonic(), time.time(), detail or None))

    def snapshot(self) -> dict[str, Any]:
        """The buffer and the phase, JSON-ready, with this process's clocks read now (the
        controller turns monotonic times into ages with them)."""
        records = [r.as_dict() for r in list(self.records)]
        phase = self.phase
        current = None
        if phase is not None:
            current = {"name": phase[0], "since_mono": phase[1], "since_wall": phase[2]}
            current["detail"] = phase[3]
        return {
            "now_mono": time.monotonic(),
            "now_wall": time.time(),
            "step": self.step,
            "recording": self.recording,
            "phase": current,
            "records": records,
        }


_LOG = CollectiveLog()


def process_log() -> CollectiveLog:
    """This process's log: the hooks record into it whether or not a run context exists."""
    return _LOG


def doing(phase: str, **detail: Any) -> Doing:
    """Mark what this rank does for the block's duration (e.g. `data_wait` with its shard)."""
    return _LOG.doing(phase, **detail)


def main_thread_frames(stacks: str, limit: int = STACK_FRAMES) -> list[str]:
    """The main thread's top frames from faulthandler's newest dump in `stacks` (most recent
    first, `file:line in function`)."""
    ident = threading.main_thread().ident or 0
    wanted = f"thread 0x{ident:016x}"  # faulthandler: "Thread 0x..." or "Current thread 0x..."
    frames: list[str] = []
    current: list[str] | None = None
    for line in stacks.splitlines():
        if "(most recent call first)" in line:
            current = [] if wanted in line.lower() else None
            if current is not None:
                frames = current
        elif current is not None and line.startswith("  File "):
            current.append(line.strip().removeprefix("File ").replace('", line ', ":", 1)[1:])
    return frames[:limit]


class Dumper:
    """Writes a rank's dump on DUMP_SIGNAL and at exit (module docstring)."""

    def __init__(
        self,
        log: CollectiveLog,
        json_path: Path,
        stack_path: Path,
        identity: dict[str, Any],
        extra: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.log, self.json_path, self.stack_path = log, json_path, stack_path
        self.identity = identity
        """rank, generation, pid: what the controller matches the dump with."""
        self.extra = extra
        """More to dump (the NCCL Flight Recorder's entries, runtime/collective_hooks.py)."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stack_file: Any = None
        self._thread: threading.Thread | None = None
        self._growth: FileGrowth | None = None
        self.dumps = 0

    def install(self) -> None:
        """Register faulthandler and start the watching thread (main thread, once)."""
        self.stack_path.parent.mkdir(parents=True, exist_ok=True)
        self._stack_file = open(self.stack_path, "a", encoding="utf-8")  # noqa: SIM115
        faulthandler.register(DUMP_SIGNAL, file=self._stack_file, all_threads=True, chain=False)
        self._growth = FileGrowth(self.stack_path)
        self._thread = threading.Thread(target=self._watch, name="runwright-dumper", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def _watch(self) -> None:
        # Asleep until faulthandler writes (runtime/file_growth.py): a look at the file's size
        # several times a second took the GIL from the training thread each time.
        growth = self._growth
        assert growth is not None
        while growth.wait():
            # faulthandler writes in many small writes: wait until they end.
            if growth.settled(SETTLE_SECONDS):
                self.dump("signal")

    def dump(self, reason: str) -> Path:
        """Write the dump now (thread-safe; atomically replaced, so a reader never sees half)."""
        with self._lock:
            try:
                stacks = self.stack_path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                stacks = ""
            body = {
                **self.identity,
                "reason": reason,
                **self.log.snapshot(),
                "main_frames": main_thread_frames(stacks),
            }
            error = getattr(sys, "last_value", None) if reason == "exit" else None
            if error is not None:  # the uncaught exception the interpreter exits with
                body["error"] = f"{type(error).__name__}: {error}"[:500]
            if self.extra is not None:
                try:
                    body.update(self.extra())
                except Exception as exc:  # a dump must not fail for an optional part
                    body["extra_error"] = f"{type(exc).__name__}: {exc}"
            self.dumps += 1
            body["dump_index"] = self.dumps
            tmp = self.json_path.with_suffix(".json.tmp")
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(body, fh, default=str)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.json_path)
            return self.json_path

    def close(self) -> None:
        """The exit dump, then stop watching (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._growth is not None:
            self._growth.close()
        try:
            self.dump("exit")
        finally:
            if self._thread is not None and self._growth is not None:
                self._thread.join(timeout=1)
                if not self._thread.is_alive():  # else it may still select on the descriptors
                    self._growth.release()
            faulthandler.unregister(DUMP_SIGNAL)
            # The controller may still ask a rank that has closed (it is finishing): its
            # default action would kill the process, so it is ignored from here.
            if signal.getsignal(DUMP_SIGNAL) == signal.SIG_DFL:
                with contextlib.suppress(ValueError):  # only the main thread may set it
                    signal.signal(DUMP_SIGNAL, signal.SIG_IGN)
            if self._stack_file is not None:
                self._stack_file.close()
