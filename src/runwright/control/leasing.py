"""A controller's leases: which runs it drives, and until when it may act on their workers.

Several controllers may share one store; each run is driven by the holder of its lease
(store/leases.py: holder, fencing epoch, expiry on the database's clock). This module is the
controller's side of it:

- **Identity.** A controller is `host:pid:suffix` (`holder_id`), readable in `runwright status`;
  its node is the machine's boot id and the process's pid namespace (`node_id`).
- **Taking.** A run whose lease is free, released or expired is taken with the store's
  compare-and-set. A live lease of another controller is left alone (the controller stands by),
  unless its holder is on this same node and its process has ended: a dead process cannot act,
  so there is nothing to wait out (a controller restarted after a crash picks its runs up at
  once). A holder on another node is only ever known gone by its lease running out.
- **Renewal** every pass (`renew`, one statement for all the runs held), and in a long sweep
  again once a quarter of the lease has passed (`renew_if_due`), so a lease lapses only when its
  holder cannot reach the store, or is stopped, for about the whole lease.
- **Fencing.** A pass over a run runs inside `fenced(run)`: every store write carries the lease
  token and is refused in its own transaction once the epoch is not current (`Store.begin`).
- **Acting on workers.** Launching, stopping and killing processes is not a store write, so it
  cannot be refused there. The controller acts only until `deadline_monotonic` = the start of its
  last successful acquire or renewal + `lease_seconds` x (1 - `SAFETY_FRACTION`), on its own
  monotonic clock (`LeaseGuardedExecutor`). The database set the expiry no earlier than that
  start, so the holder stops acting a safety margin before anyone else may take the run; the
  margin absorbs clock-rate differences between hosts and the time between the check and the
  act. A controller stopped (SIGSTOP, a VM paused) past its lease therefore wakes to find its
  deadline passed: it acts on nothing until a renewal succeeds, and the renewal fails if the run
  was taken over meanwhile.
"""

import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runwright.control.processes import is_alive
from runwright.errors import LeaseLostError
from runwright.store import Store
from runwright.store.leases import Lease, LeaseOutcome, LeaseResult, LeaseToken

if TYPE_CHECKING:  # `runwright status` imports this module for describe_lease: keep it light
    from runwright.control.executors.protocol import Executor

log = logging.getLogger(__name__)

LEASE_SECONDS = 15.0
"""Default lease (`runwright controller --lease-seconds`): a controller that dies is replaced
within about this long. Renewed every pass (0.2 s apart), so 15 s rides out a pass or a store
hiccup of several seconds without a needless handover."""
SAFETY_FRACTION = 0.2
"""Share of the lease at its end in which the holder no longer acts on workers (3 s of 15 s)."""
RENEW_FRACTION = 0.25
"""A sweep renews again once this share of the lease has passed since the last renewal."""
NODE_ENV = "RUNWRIGHT_CONTROLLER_NODE"
"""Overrides this controller's node id. Controllers with different node ids never judge each
other's processes, only their leases: what controllers on two hosts do (the tests and the
takeover benchmark run two such controllers on one host)."""


class PassOutcome(StrEnum):
    """What one leased pass over a run did."""

    PASSED = "PASSED"
    """Reconciled; the run goes on."""
    FINISHED = "FINISHED"
    """The run is terminal and no worker of it is left; its lease was handed back."""
    LOST = "LOST"
    """The lease was no longer this controller's: nothing was written, the run was dropped."""


def holder_id() -> str:
    """`host:pid:suffix`, one per controller object: readable, and unique even for two
    controllers in one process or a pid used again."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def node_id() -> str | None:
    """The machine (boot id) and pid namespace this process runs in: two controllers with the
    same node id see the same processes. None where /proc does not tell (not Linux)."""
    if os.environ.get(NODE_ENV):
        return os.environ[NODE_ENV]
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return f"{boot}/{namespace}"


def holder_pid(holder: str) -> int | None:
    """The pid in a `host:pid:suffix` holder id."""
    parts = holder.rsplit(":", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def holder_gone(lease: Lease, node: str | None) -> bool:
    """The lease's holder is a controller on `node` (this process's) whose process has ended: a
    dead process cannot act, so its lease need not be waited out."""
    pid = holder_pid(lease.holder or "")
    return (
        node is not None
        and lease.holder_node == node
        and pid is not None
        and pid != os.getpid()
        and not is_alive(pid)
    )


def describe_lease(lease: Lease, now_unix_s: float) -> str:
    """One line on who drives a run and until when, for logs and `runwright status`."""
    if lease.holder is None:
        return "no controller has taken it yet"
    host, _, _ = lease.holder.rpartition(":")[0].rpartition(":")
    who = f"controller {lease.holder} (host {host}, pid {holder_pid(lease.holder)})"
    until = time.strftime("%H:%M:%S", time.localtime(lease.expires_unix_s))
    if lease.released:
        return f"no controller holds it: {who} handed it back at {until}"
    left = lease.expires_unix_s - now_unix_s
    if left <= 0:
        return f"no controller holds it: the lease of {who} ran out at {until} ({-left:.0f} s ago)"
    held = f"lease epoch {lease.epoch}, until {until} (in {left:.0f} s)"
    if holder_gone(lease, node_id()):
        return (
            f"held by {who}, {held}, but that process has ended: the next controller started "
            "on this host takes the run over at once"
        )
    return f"driven by {who}, {held}"


@dataclass
class Held:
    token: LeaseToken
    deadline_monotonic: float
    """After this (this process's monotonic clock) the controller acts on none of its workers."""


class ControllerLeases:
    """The leases one controller holds (single-threaded, like the controller)."""

    def __init__(self, store: Store, lease_seconds: float = LEASE_SECONDS) -> None:
        if lease_seconds <= 0:
            raise ValueError(f"lease_seconds must be positive, got {lease_seconds}")
        self.store = store
        self.lease_seconds = lease_seconds
        self.holder = holder_id()
        self.node = node_id()
        self._held: dict[str, Held] = {}
        self._acting: Held | None = None
        self._renewed_monotonic = 0.0

    @property
    def window_seconds(self) -> float:
        """How long after an acquire or renewal starts the controller may act on workers."""
        return self.lease_seconds * (1.0 - SAFETY_FRACTION)

    def holds(self, run_id: str) -> bool:
        return run_id in self._held

    def take_if_free(
        self, run_id: str, lease: Lease | None, now_unix_s: float
    ) -> LeaseResult | None:
        """Take the run's lease unless `lease` (read at `now_unix_s`, the database's clock)
        shows another live controller holding it: None then, and nothing written."""
        gone: LeaseToken | None = None
        if lease is not None and lease.live(now_unix_s) and lease.holder != self.holder:
            if not holder_gone(lease, self.node):
                return None
            gone = lease.token()
        started = time.monotonic()
        result = self.store.leases.acquire(
            run_id, self.holder, self.lease_seconds, holder_node=self.node, gone=gone
        )
        if result.outcome is LeaseOutcome.HELD:
            self._held.pop(run_id, None)
        else:
            self._held[run_id] = Held(result.lease.token(), started + self.window_seconds)
        return result

    def renew(self) -> list[str]:
        """Renew every lease held, in one statement; returns the runs whose lease was lost."""
        if not self._held:
            return []
        started = time.monotonic()
        epochs = {run_id: held.token.epoch for run_id, held in self._held.items()}
        renewed = self.store.leases.renew(self.holder, epochs, self.lease_seconds)
        self._renewed_monotonic = started
        lost = sorted(set(self._held) - set(renewed))
        for run_id in lost:
            del self._held[run_id]
        for run_id in renewed:
            self._held[run_id].deadline_monotonic = started + self.window_seconds
        return lost

    def renew_if_due(self) -> list[str]:
        """`renew` once `RENEW_FRACTION` of the lease has passed since the last renewal."""
        if time.monotonic() - self._renewed_monotonic < self.lease_seconds * RENEW_FRACTION:
            return []
        return self.renew()

    def release(self, run_ids: list[str] | None = None) -> None:
        """Hand back the leases of `run_ids` (default: all held): free at once for others."""
        ids = list(self._held) if run_ids is None else [r for r in run_ids if r in self._held]
        if not ids:
            return
        self.store.leases.release(self.holder, {r: self._held[r].token.epoch for r in ids})
        for run_id in ids:
            del self._held[run_id]

    def forget(self, run_id: str) -> None:
        """Stop counting the run as held, without a store write (its lease was lost)."""
        self._held.pop(run_id, None)

    @contextlib.contextmanager
    def fenced(self, run_id: str) -> Iterator[None]:
        """Act on `run_id` under its lease: every store write is checked against the lease
        (LeaseLostError if it is no longer current) and so is every act on its workers."""
        held = self._held.get(run_id)
        if held is None:
            raise LeaseLostError(f"controller {self.holder} holds no lease of run {run_id}")
        previous, self._acting = self._acting, held
        try:
            with self.store.fenced_by(held.token):
                yield
        finally:
            self._acting = previous

    def check_may_act(self) -> None:
        """LeaseLostError once the lease being acted under may have run out: until a renewal
        succeeds, this controller must not start or end a process of the run."""
        held = self._acting
        if held is None or time.monotonic() < held.deadline_monotonic:
            return
        raise LeaseLostError(
            f"controller {self.holder} may no longer act on run {held.token.run_id}: its lease "
            f"({self.lease_seconds:g} s) was last renewed more than {self.window_seconds:g} s "
            "ago, so another controller may take the run over; it starts and stops no process "
            "of the run until the lease is renewed"
        )


ACTS = frozenset(
    {
        "launch",
        "stop",
        "kill_generations_below",
        "repair_lost",
        "request_allocation",
        "release_allocation",
        "prepare_standby",
        "activate_standby",
        "discard_standbys",
    }
)
"""The Executor methods that start or end processes (or, on a cluster engine, submit or cancel
the job that holds them); an executor method added later that does either belongs here."""


class LeaseGuardedExecutor:
    """An Executor that starts and ends processes (`ACTS`) only while the controller's lease of
    the run being reconciled is surely its own (`ControllerLeases.check_may_act`). Everything
    else (the engine's name, hosts, adopt, poll, evidence, launched_generations: reads) is the
    wrapped executor's, unchanged; the signatures are the wrapped executor's own."""

    def __init__(self, inner: "Executor", leases: ControllerLeases) -> None:
        self.inner = inner
        self.name = inner.name
        self._leases = leases

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if name not in ACTS:
            return attribute

        def act(*args: Any, **kwargs: Any) -> Any:
            self._leases.check_may_act()
            return attribute(*args, **kwargs)

        return act
