"""Kill a durable writer from outside at uniformly random times, then restart it on the same state.

Probe points (tests/ckpt/test_crash.py) only reach the moments the code names; a fault arrives at
any instruction. A sweep here measures how long one uninterrupted life of the writer takes, then
repeats: start a life, SIGKILL it at a time drawn uniformly from [0, that duration], check that no
process of the killed life is left, and start the next life on what it left. Every life must end
either killed or cleanly: a life that fails on its own is a wedged state, which is what this
harness exists to find.
"""

import contextlib
import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from runwright.control.processes import descendants, is_alive

HERE = Path(__file__).resolve().parent
PROC = Path("/proc")


def session_members(sid: int) -> list[int]:
    """Live processes whose session id is `sid` (a life's setsid makes its pid the session)."""
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:
            found.append(int(entry.name))
    return found


def life_members(pid: int) -> set[int]:
    """Every live process of a life: its session (a life's setsid makes its pid the session)
    and its process tree (torchrun puts each rank in a session of its own)."""
    return {*session_members(pid), *(p for p in descendants(pid) if is_alive(p))} - {pid}


def wait_gone(pids: Callable[[], list[int]], bound_seconds: float) -> list[int]:
    """Poll until `pids()` is empty or the bound passed; returns what is still alive."""
    deadline = time.monotonic() + bound_seconds
    alive = pids()
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = pids()
    return alive


@dataclass
class Life:
    """One start of the writer."""

    index: int
    pid: int
    exit_code: int
    killed: bool
    """True when the harness's SIGKILL ended it (not a clean or failed exit before the kill)."""
    kill_after_seconds: float | None
    seconds: float
    """From the request to the exit."""
    processes_at_kill: int = 0
    """How many processes the life had when it was killed (its own and what it started)."""
    survivors: list[int] = field(default_factory=list)
    """Processes of this life still alive after the kill (and the grace bound)."""
    killed_unix_s: float | None = None
    """When the harness sent the kill (wall clock, to place it on the life's own timeline)."""


@dataclass
class SweepReport:
    """What a sweep did; the tests assert on it and docs/crash.md quotes its counts."""

    writer: str
    lives: list[Life]
    life_seconds: float
    """Measured duration of one uninterrupted life: the range kill times are drawn from."""

    @property
    def kills(self) -> int:
        return sum(life.killed for life in self.lives)

    @property
    def wedged(self) -> list[Life]:
        return [life for life in self.lives if not life.killed and life.exit_code != 0]

    @property
    def survivors(self) -> list[int]:
        return [pid for life in self.lives for pid in life.survivors]

    def summary(self) -> dict:
        return {
            "writer": self.writer,
            "lives": len(self.lives),
            "kills": self.kills,
            "wedged": len(self.wedged),
            "survivors": len(self.survivors),
            "kills_with_children": sum(life.processes_at_kill > 1 for life in self.lives),
            "life_seconds": round(self.life_seconds, 3),
        }


@dataclass(frozen=True)
class PhaseClock:
    """Kill times drawn from one phase of a life instead of the whole life: the harness waits
    until `armed(index)` says the phase began (a file the life's own test code writes, polled
    from outside every POLL_SECONDS), then draws the delay from `uniform(0, span(calibration))`,
    the phase's length in the warm calibration life."""

    armed: Callable[[int], bool]
    span: Callable[[int], float]


POLL_SECONDS = 0.002
"""How often an armed clock is looked at: small against a save of tens of milliseconds."""


class Lives(Protocol):
    """How a sweep starts, awaits and kills one life of a writer."""

    log: Path
    killed_exits: frozenset[int] | None
    """Exit codes that mean the kill ended the life (None: any failure after a kill)."""

    def start(self, index: int) -> int:
        """Start life `index`; returns its main pid."""
        ...

    def wait_exit(self, timeout: float | None) -> int | None:
        """The running life's exit code, or None if it still runs after `timeout` seconds."""
        ...

    def kill(self, pid: int, members: set[int], rng: random.Random) -> None:
        """SIGKILL what a fault would: the main process, one member, or all at once."""
        ...


class ForkServer:
    """A long-lived interpreter that forks lives of `workloads.py` (see forkserver.py)."""

    killed_exits = frozenset({-signal.SIGKILL})

    def __init__(self, log: Path, workload: str, args_for: Callable[[int], dict]) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE)}
        self.log, self.workload, self.args_for = log, workload, args_for
        self.process = subprocess.Popen(
            [sys.executable, "-u", str(HERE / "forkserver.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
            bufsize=1,
        )
        self._pending = b""

    def _reply(self, timeout: float | None) -> dict | None:
        """The next reply line, or None if none came within `timeout` seconds. Reads the pipe's
        file descriptor itself: a buffered reader could hold a second reply that select() no
        longer sees."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"the fork server died; see {self.log}")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)

    def start(self, index: int) -> int:
        assert self.process.stdin is not None
        request = {"workload": self.workload, "args": self.args_for(index), "log": str(self.log)}
        self.process.stdin.write(json.dumps(request) + "\n")
        reply = self._reply(timeout=60)
        assert reply is not None, "the fork server did not fork within 60 s"
        return int(reply["pid"])

    def wait_exit(self, timeout: float | None) -> int | None:
        reply = self._reply(timeout)
        return None if reply is None else int(reply["exit"])

    def kill(self, pid: int, members: set[int], rng: random.Random) -> None:
        # The life's own process only, as `kill -9` or the OOM killer would: whatever it started
        # must go with it (the survivors check). It may have ended a moment ago, and then its
        # exit code says so.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class ForkedGroupLives(ForkServer):
    """Lives that are 2-rank gloo groups forked by the fork server (workloads.forked_group_life),
    killed as TorchrunLives kills: the whole group at once (a lost node) or, every other time,
    one random rank, whose death the life's agent notices and tears the group down."""

    killed_exits = None  # the agent reports a killed rank as its own failure

    def __init__(self, log: Path, args_for: Callable[[int], dict]) -> None:
        super().__init__(log, "forked_group_life", args_for)
        self._kills = 0

    def kill(self, pid: int, members: set[int], rng: random.Random) -> None:
        self._kills += 1
        kill_node_or_rank(self._kills, pid, members, rng)


class TorchrunLives:
    """Lives that are real `torchrun --standalone` groups of a script (2 ranks, gloo). A kill is
    a lost node (torchrun and every rank at once) or, every other time, one random rank (whose
    death torchrun must notice and tear the group down)."""

    killed_exits = None  # torchrun reports a killed rank as its own failure

    def __init__(self, log: Path, script: Path, argv_for: Callable[[int], list[str]]) -> None:
        self.log, self.script, self.argv_for = log, script, argv_for
        self.process: subprocess.Popen[bytes] | None = None
        self._kills = 0

    def start(self, index: int) -> int:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE)}
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1"]
        argv += ["--nproc-per-node", "2", "--max-restarts", "0", str(self.script)]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [*argv, *self.argv_for(index)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self.process.pid

    def wait_exit(self, timeout: float | None) -> int | None:
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self, pid: int, members: set[int], rng: random.Random) -> None:
        self._kills += 1
        kill_node_or_rank(self._kills, pid, members, rng)


def kill_node_or_rank(count: int, pid: int, members: set[int], rng: random.Random) -> None:
    """The `count`-th kill of a group whose launcher is `pid`: odd ones take the launcher and
    every member at once (a lost node), even ones one random rank (which the launcher must
    notice and tear the group down)."""
    ranks = sorted(p for p in members if is_alive(p) and _parent(p) == pid)
    victims = [pid, *members] if count % 2 or not ranks else [rng.choice(ranks)]
    for victim in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)


def _parent(pid: int) -> int | None:
    try:
        return int((PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def sweep(
    writer: str,
    lives_of: Lives,
    kills: int,
    *,
    seed: int = 0,
    survivor_bound_seconds: float = 5.0,
    after_kill: Callable[[Life], None] | None = None,
    clock: PhaseClock | None = None,
) -> SweepReport:
    """Calibrate on uninterrupted lives, then lives each SIGKILLed at a uniformly random time
    until `kills` kills landed, then one final uninterrupted life (the state must be usable).
    `survivor_bound_seconds` is how long the processes of a killed life may take to follow it.
    `after_kill(life)` looks at what a killed life left, before the next one starts. With a
    `clock`, kill times are drawn from its phase (PhaseClock) rather than the whole life."""
    rng = random.Random(seed)
    lives: list[Life] = []

    def wait_armed(index: int) -> int | None:
        """Until the life's phase began: None then, or its exit code if it ended first."""
        assert clock is not None
        while not clock.armed(index):
            code = lives_of.wait_exit(timeout=POLL_SECONDS)
            if code is not None:
                return code
        return None

    def one_life(kill_after: float | None) -> Life:
        index = len(lives)
        began = time.monotonic()
        pid = lives_of.start(index)
        code = None
        if kill_after is not None and clock is not None:
            code = wait_armed(index)
        if code is None:
            code = lives_of.wait_exit(timeout=kill_after)
        killed, members, killed_unix_s = False, set(), None
        if code is None:
            members = life_members(pid)
            killed_unix_s = time.time()
            lives_of.kill(pid, members, rng)
            code = lives_of.wait_exit(timeout=None)
            expected = lives_of.killed_exits
            killed = code in expected if expected is not None else code != 0
        survivors = wait_gone(
            lambda: [p for p in members | life_members(pid) if is_alive(p)],
            survivor_bound_seconds,
        )
        for member in survivors:
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, signal.SIGKILL)
        seconds = time.monotonic() - began
        lives.append(
            Life(index, pid, int(code), killed, kill_after, seconds, len(members) + 1, survivors,
                 killed_unix_s)
        )  # fmt: skip
        if killed and after_kill is not None:
            after_kill(lives[-1])
        return lives[-1]

    # Two uninterrupted lives: the first also pays lazy imports and cold caches, the second is
    # the duration a restarted writer really has, and the kill times are drawn from it.
    for _ in range(2):
        calibration = one_life(None)
        assert calibration.exit_code == 0, f"an uninterrupted {writer} life failed: {lives_of.log}"
    life_seconds = calibration.seconds if clock is None else clock.span(calibration.index)
    # Until `kills` kills landed: a draw near the end of the range can miss a life that ended
    # early, which is a clean restart and counts as a life, not a kill.
    while sum(life.killed for life in lives) < kills and len(lives) < 3 * kills + 2:
        one_life(rng.uniform(0.0, life_seconds))
    final = one_life(None)
    assert final.exit_code == 0, f"the {writer} state was left wedged; see {lives_of.log}"
    return SweepReport(writer, lives, life_seconds)
