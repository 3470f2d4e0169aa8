"""How each fault of the matrix is injected, from outside the training processes.

An injector sees the run's events as the controller records them and acts once: at rank 0's
first healthy step at or past the fault's step in generation 1, once the run has committed the
checkpoints the fault needs (or at generation 1's launch, for a fault aimed at step 0). It
signals processes (found by their WORKER_STARTED pid or their launch tags), flips bytes in a
checkpoint file, starts a stale worker, or kills the controller; a knob fault (armed in the
spec's `code.args`) only records the step it fires at. What it did is an `Injection`; `finish`
undoes what it left behind (SIGCONT a stopped rank, reap a stale worker), whatever became of
the run.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from runwright.control.executors.local import free_port
from runwright.control.executors.local_group import node_tags
from runwright.control.processes import (
    is_alive,
    processes_tagged,
    sample,
    signal_all,
)
from runwright.events import EventType
from runwright.layout import run_paths
from runwright.observe.rank_steps import rank_view
from runwright.protocol import ENV_GENERATION, ENV_RUN_DIR, ENV_RUN_ID, ENV_SPEC_FILE
from runwright.spec import JobSpec
from runwright.store import EventRecord, Store

CORRUPT_BYTES = 64
"""Bytes flipped in the middle of the shard: any one flipped bit fails its checksum."""
STALE_WORKER_SECONDS = 120.0
"""The most a stale worker may take once let go (torch's import, one tiny save, one report)
before it is killed; a bound that marks a hang, not an expected time. The controller waits
for it (see `stale_worker`), so it is no longer than a progress timeout a busy machine needs."""


@dataclass
class Target:
    """What an injector acts on: one run of one fault."""

    store: Store
    root: Path
    run_id: str
    step: int
    """The step the fault is aimed at; 0: the launch of generation 1, before any step."""
    checkpoints_before: int
    """Committed checkpoints the run must have before the fault."""
    folder: Path
    """The fault's folder in the drill's output (logs of what the injector started)."""
    restart_controller: Callable[[], str] | None = None
    """Kill the run's controller process and start another (the process driver's); what it did,
    in words."""
    spec: JobSpec | None = None
    """The fault's run's spec (its dataset copy, its checkpoint location)."""


@dataclass
class Injection:
    """What an injector did."""

    step: int | None
    """Rank 0's newest healthy step when it acted, or the step a knob fires at."""
    detail: str
    """What was done, in words (pids, files, offsets)."""
    time_unix_s: float = field(default_factory=time.time)
    """When: now for a signal, the end of the step before for a knob."""
    rank: int | None = None
    pids: tuple[int, ...] = ()
    undo: Callable[[], str | None] | None = None
    """Called once the run is over: leaves nothing of the fault behind; says what it did."""


Action = Callable[[Target, EventRecord], Injection]


class Injector:
    """Fires `action` once, when the run reaches the fault's step (see the module's docstring)
    and `ready()` holds. A knob (`lead=1`) is recorded at the report of the step before its
    own, which it fires inside, whatever the drill has seen committed: the trainer arms it, not
    the drill. `cleanup` runs at the end whether it fired or not."""

    def __init__(
        self,
        target: Target,
        action: Action,
        *,
        lead: int = 0,
        ready: Callable[[], bool] = lambda: True,
        arm: Callable[[], None] | None = None,
        cleanup: Callable[[], str | None] | None = None,
    ) -> None:
        self.target, self.action, self.lead = target, action, lead
        self.ready, self.arm, self.cleanup = ready, arm, cleanup
        self.committed = 0
        self.injection: Injection | None = None

    def __call__(self, event: EventRecord) -> Injection | None:
        if self.injection is not None or event.generation != 1:
            return None
        if event.type == EventType.WORKER_GROUP_LAUNCHED:
            if self.arm is not None:
                self.arm()
                self.arm = None
            if self.target.step == 0:  # aimed at the launch itself
                self.injection = self.action(self.target, event)
                return self.injection
        elif event.type == EventType.CHECKPOINT_COMMITTED:
            self.committed += 1
        elif (
            rank_view(event, 0) is not None
            and (event.step or 0) >= self.target.step - self.lead
            and (self.lead or self.committed >= self.target.checkpoints_before)
            and self.ready()
        ):
            self.injection = self.action(self.target, event)
            return self.injection
        return None

    def finish(self) -> str | None:
        """Undo what the fault left behind; what was done, in words (None: nothing)."""
        said = [
            undo()
            for undo in (self.injection.undo if self.injection else None, self.cleanup)
            if undo is not None
        ]
        return "; ".join(s for s in said if s) or None


def rank_pids(store: Store, run_id: str, generation: int) -> dict[int, int]:
    """rank -> pid of generation `generation`'s ranks, from their WORKER_STARTED events."""
    return {
        int(e.attributes["rank"]): int(e.attributes["pid"])
        for e in store.events(run_id, types=[EventType.WORKER_STARTED])
        if e.generation == generation and isinstance(e.attributes.get("pid"), int)
    }


def _pid_of(target: Target, rank: int) -> int:
    pids = rank_pids(target.store, target.run_id, 1)
    if rank not in pids:
        raise RuntimeError(f"rank {rank} of generation 1 reported no pid (WORKER_STARTED)")
    return pids[rank]


def _resume(pid: int) -> Callable[[], str | None]:
    def undo() -> str | None:
        if not is_alive(pid):
            return None
        os.kill(pid, signal.SIGCONT)
        return f"SIGCONT to pid {pid}, still alive"

    return undo


def signal_rank(rank: int, name: str) -> Callable[[Target], Injector]:
    """Send signal `name` to one rank's process."""
    sig = signal.Signals[name]

    def act(target: Target, event: EventRecord) -> Injection:
        pid = _pid_of(target, rank)
        os.kill(pid, sig)
        return Injection(
            step=event.step,
            detail=f"{name} to rank {rank} (pid {pid})",
            rank=rank,
            pids=(pid,),
            undo=_resume(pid) if sig is signal.SIGSTOP else None,
        )

    return lambda target: Injector(target, act)


def signal_all_ranks(name: str) -> Callable[[Target], Injector]:
    """Send signal `name` to every rank's process, as a scheduler signals a job."""
    sig = signal.Signals[name]

    def act(target: Target, event: EventRecord) -> Injection:
        pids = rank_pids(target.store, target.run_id, 1)
        signal_all(pids.values(), sig)
        return Injection(
            step=event.step,
            detail=f"{name} to every rank (pids {', '.join(map(str, pids.values()))})",
            pids=tuple(pids.values()),
        )

    return lambda target: Injector(target, act)


def kill_node(node: int) -> Callable[[Target], Injector]:
    """SIGKILL to every process of one node of generation 1: its torchrun agent and its ranks,
    found by the launch tags the local executor gives them (control/executors/local.py)."""

    def act(target: Target, event: EventRecord) -> Injection:
        pids = processes_tagged(node_tags(target.root, target.run_id, 1, node))
        signal_all(pids, signal.SIGKILL)
        return Injection(
            step=event.step,
            detail=f"SIGKILL to node {node}'s agent and ranks (pids {', '.join(map(str, pids))})",
            pids=tuple(pids),
        )

    return lambda target: Injector(target, act)


def kill_controller() -> Callable[[Target], Injector]:
    def act(target: Target, event: EventRecord) -> Injection:
        if target.restart_controller is None:
            raise RuntimeError("controller_killed needs its run driven by a controller process")
        return Injection(step=event.step, detail=target.restart_controller())

    return lambda target: Injector(target, act)


def knob_at_step(words: str) -> Callable[[Target], Injector]:
    """A fault armed in the spec's code.args that fires inside its step: recorded when rank 0
    reports the step before, at that report's time (the fault's step starts then)."""

    def act(target: Target, event: EventRecord) -> Injection:
        return Injection(
            step=target.step,
            detail=f"{words} (a fault knob in code.args)",
            time_unix_s=event.time_unix_s,
        )

    return lambda target: Injector(target, act, lead=1)


def flip_bytes(path: Path, count: int = CORRUPT_BYTES) -> int:
    """Invert `count` bytes in the middle of `path`, written back with fsync; the offset."""
    status = path.stat()
    size = status.st_size
    offset = max(0, size // 2 - count // 2)
    # A dataset's shards are read-only (control/credentials.py, read_only_dataset): the drill
    # damages one on purpose, so it lifts the mode for its write and puts it back.
    path.chmod(status.st_mode | 0o200)
    try:
        with path.open("r+b") as f:
            f.seek(offset)
            data = f.read(count)
            f.seek(offset)
            f.write(bytes(b ^ 0xFF for b in data))
            f.flush()
            os.fsync(f.fileno())
    finally:
        path.chmod(status.st_mode & 0o7777)
    return offset


def corrupt_newest_checkpoint(rank: int) -> Callable[[Target], Injector]:
    """Flip bytes in the newest committed checkpoint's largest file, then SIGKILL `rank`."""

    def act(target: Target, event: EventRecord) -> Injection:
        latest = target.store.checkpoints.latest(target.run_id)
        if latest is None:
            raise RuntimeError("no committed checkpoint to corrupt")
        folder = Path(latest.path.removeprefix("file://"))
        shard = max((p for p in folder.iterdir() if p.is_file()), key=lambda p: p.stat().st_size)
        offset = flip_bytes(shard)
        pid = _pid_of(target, rank)
        os.kill(pid, signal.SIGKILL)
        return Injection(
            step=event.step,
            detail=f"flipped {CORRUPT_BYTES} bytes at offset {offset} of {shard.name} in "
            f"checkpoint {latest.checkpoint_id} (step {latest.step}), then SIGKILL to rank "
            f"{rank} (pid {pid})",
            rank=rank,
            pids=(pid,),
        )

    return lambda target: Injector(target, act)


def stale_worker() -> Callable[[Target], Injector]:
    """A worker of the generation before the live one (drill/stale_worker.py): started once the
    run's group is launched, it loads and stops itself before it writes anything; SIGCONT at the
    fault's step lets it save and report under its old generation while the live group
    trains."""

    def start(target: Target) -> Injector:
        log = target.folder / "stale_worker.log"
        process: list[subprocess.Popen[bytes]] = []

        def arm() -> None:
            """Once generation 1 is launched: a controller kills processes of older generations
            it finds before it launches one (control/launching.py), as this one would be."""
            paths = run_paths(target.root, target.run_id)
            env = {
                **os.environ,
                ENV_RUN_ID: target.run_id,
                ENV_GENERATION: "0",  # the generation before the run's first
                ENV_RUN_DIR: str(paths.folder),
                ENV_SPEC_FILE: str(paths.spec_file),
                # A world of its own: it is no member of the live group's rendezvous.
                "WORLD_SIZE": "1",
                "RANK": "0",
                "LOCAL_RANK": "0",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(free_port()),
            }
            target.folder.mkdir(parents=True, exist_ok=True)
            argv = [sys.executable, "-m", "runwright.drill.stale_worker", "--step"]
            with log.open("w") as out:
                process.append(
                    subprocess.Popen(
                        [*argv, str(target.step)], env=env, stdout=out, stderr=subprocess.STDOUT
                    )
                )

        def stopped() -> bool:
            found = sample(process[0].pid) if process else None
            return found is not None and found.state == "T"

        def reap() -> str | None:
            if not process:
                return None
            worker = process[0]
            if worker.poll() is None and stopped():
                worker.kill()  # never let go: the run got past the fault's step without it
            try:
                code = worker.wait(timeout=STALE_WORKER_SECONDS)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
                return f"the stale worker (pid {worker.pid}) was still running: killed"
            return f"the stale worker exited {code}: {log.read_text().strip()[-300:]}"

        def act(target: Target, event: EventRecord) -> Injection:
            pid = process[0].pid
            os.kill(pid, signal.SIGCONT)
            # Its save and its report must be in the channel before the controller reads on:
            # the group may finish its last steps in less time than the worker takes to import
            # torch, and a run already ended would never judge them. Waiting holds up the
            # controller only (the group trains on, its heartbeats are read afterwards).
            with contextlib.suppress(subprocess.TimeoutExpired):  # reap() kills it, says so
                process[0].wait(timeout=STALE_WORKER_SECONDS)
            return Injection(
                step=event.step,
                detail=f"SIGCONT to a worker of generation 0 (pid {pid}), stopped since "
                f"generation 1 launched: it saves step {target.step} and reports it healthy "
                "while generation 1 trains",
                pids=(pid,),
            )

        return Injector(target, act, ready=stopped, arm=arm, cleanup=reap)

    return start
