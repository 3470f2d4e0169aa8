"""Nothing left behind (seed 000 8.1 and 8.5, seed 003 "run lifecycle"): what an ended run still
holds, found from the run's own records, and released.

Each kind of resource has one `Releaser` (a Protocol; the registry is keyed by a versioned name)
that lists the run's leftovers of its kind and releases one. Ownership comes from the records
only, never from a name that merely looks like the run's:

    processes-v1   live processes started with the run's launch tags (its run folder in their
                   environment: control/executors/local_group.py `generation_processes`)
    tmp-v1         the per-node temporary folders the run's agents and ranks got as TMPDIR
                   (layout.py `NodePaths.tmp`), under the run's own folder
    staging-v1     its checkpoint root's residue (ckpt/gc.py): staging and uncommitted folders,
                   dead writers' temporary files; a run that ended has no writer left, so no
                   age is waited out
    shm-v1         /dev/shm segments torch named after a pid (`torch_<pid>_...`) where that pid
                   is one the run's ranks reported (WORKER_STARTED) and no process has it now
    lease-v1       the run's controller lease still held by a controller whose process is gone
    allocation-v1  an allocation (a Slurm job) still PENDING or GRANTED in the run's record; only
                   the controller, which holds the executor, can give it back (Journal's
                   `before_finished` does), so elsewhere it is reported, not released
    credentials-v1 a generation's object-store credentials (control/credentials.py) issued and
                   never revoked (a controller that died before its end-of-run revocation):
                   revoked through the configured issuer and recorded as CREDENTIALS_REVOKED;
                   with no issuer configured here, reported with the setting that would

Other resources (a node cache entry) plug in with `register_releaser`. A releaser never raises
for what it finds: a leftover it cannot release is reported with the error, so one stuck
resource does not keep the others. Releasing is idempotent:
what is gone is not found again, so a second pass finds nothing.
"""

import contextlib
import os
import re
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pydantic import Field

from runwright.control import credentials
from runwright.control.executors.local_group import generation_processes
from runwright.control.executors.protocol import AllocationState
from runwright.control.journal import Journal
from runwright.control.leasing import holder_gone, node_id
from runwright.control.processes import is_alive, signal_all, wait_gone
from runwright.events import EventType
from runwright.layout import parse_generation, run_paths
from runwright.records import Record
from runwright.store import RunRecord, Store
from runwright.store.fence import run_checkpoint_root

SHM = Path("/dev/shm")
TORCH_SHM = re.compile(r"^torch_(?P<pid>\d+)_")
"""torch's file-system sharing strategy names a segment `torch_<creator pid>_<n>_<random>`
(torch/csrc/shm: `THManagedMapAllocator`'s `_new_shared_filename`)."""
KILL_WAIT_SECONDS = 10.0
"""How long SIGKILLed processes get to leave the kernel (as the local executor's)."""


class Leftover(Record):
    """One resource an ended run still holds."""

    kind: str
    """The releaser's name: `processes-v1`, `tmp-v1`, `staging-v1`, ..."""
    what: str
    """Which one: a pid, a path, a lease, an allocation request."""
    owned_because: str
    """The record that says the run owns it."""
    releasable: bool = True
    """False when this releaser may only report it (it names what would release it)."""


class Cleanup(Record):
    """What one pass over a run found and did."""

    run_id: str
    state: str
    found: list[Leftover] = Field(default_factory=list)
    released: list[Leftover] = Field(default_factory=list)
    failed: dict[str, str] = Field(default_factory=dict)
    """`<kind> <what>` -> why it could not be released."""
    dry_run: bool = False

    @property
    def left(self) -> list[Leftover]:
        """What is still held after the pass."""
        done = {(x.kind, x.what) for x in self.released}
        return [x for x in self.found if (x.kind, x.what) not in done]


@dataclass(frozen=True)
class RunScope:
    """What a releaser may look at: the run's record, its root and the store."""

    run: RunRecord
    root: Path
    store: Store


class Releaser(Protocol):
    name: str

    def find(self, scope: RunScope) -> list[Leftover]: ...

    def release(self, scope: RunScope, leftover: Leftover) -> None: ...


class _Processes:
    name = "processes-v1"

    def find(self, scope: RunScope) -> list[Leftover]:
        found = generation_processes(scope.root, scope.run.run_id)
        return [
            Leftover(
                kind=self.name,
                what=str(pid),
                owned_because=f"started with generation {gen}'s launch tags",
            )
            for gen, pids in sorted(found.items())
            for pid in sorted(pids)
        ]

    def release(self, scope: RunScope, leftover: Leftover) -> None:
        pid = int(leftover.what)
        signal_all([pid], signal.SIGKILL)
        if wait_gone([pid], KILL_WAIT_SECONDS):
            raise OSError(f"pid {pid} outlived SIGKILL for {KILL_WAIT_SECONDS:.0f} s")


def _node_tmp_folders(scope: RunScope) -> Iterator[Path]:
    paths = run_paths(scope.root, scope.run.run_id)
    if not paths.attempts.is_dir():
        return
    found = (parse_generation(p.name) for p in paths.attempts.iterdir())
    for generation in sorted(g for g in found if g is not None):
        for node in paths.attempt(generation).node_paths():
            if node.tmp.exists():
                yield node.tmp


class _Temporary:
    name = "tmp-v1"

    def find(self, scope: RunScope) -> list[Leftover]:
        return [
            Leftover(
                kind=self.name,
                what=str(folder),
                owned_because="the TMPDIR of one of the run's node agents",
            )
            for folder in _node_tmp_folders(scope)
        ]

    def release(self, scope: RunScope, leftover: Leftover) -> None:
        shutil.rmtree(leftover.what)


class _Staging:
    name = "staging-v1"

    def _root(self, scope: RunScope) -> str:
        return run_checkpoint_root(scope.run)

    def find(self, scope: RunScope) -> list[Leftover]:
        from runwright.ckpt.inventory import collect

        root = self._root(scope)
        if "://" not in root and (not Path(root).is_dir() or not any(Path(root).iterdir())):
            return []  # no checkpoint root yet (nothing saved): nothing staged either
        report = collect(root, 0.0, 10_000, dry_run=True)
        return [
            Leftover(kind=self.name, what=f"{root}/{path}", owned_because=why)
            for path, why in sorted(report.removed.items())
        ]

    def release(self, scope: RunScope, leftover: Leftover) -> None:
        from runwright.ckpt.inventory import collect

        report = collect(self._root(scope), 0.0, 10_000)
        if report.failed:
            raise OSError("; ".join(f"{k}: {v}" for k, v in sorted(report.failed.items())))


def _worker_pids(scope: RunScope) -> set[int]:
    from runwright.observe.rank_steps import per_rank

    events = scope.store.events(scope.run.run_id, types=[EventType.WORKER_STARTED])
    return {int(e.attributes["pid"]) for e in per_rank(events) if "pid" in e.attributes}


class _SharedMemory:
    name = "shm-v1"

    def find(self, scope: RunScope) -> list[Leftover]:
        if not SHM.is_dir():
            return []
        pids = _worker_pids(scope)
        found = []
        for entry in sorted(SHM.iterdir()):
            match = TORCH_SHM.match(entry.name)
            if match and int(match["pid"]) in pids and not is_alive(int(match["pid"])):
                why = f"torch's segment of rank pid {match['pid']} (WORKER_STARTED), now gone"
                found.append(Leftover(kind=self.name, what=str(entry), owned_because=why))
        return found

    def release(self, scope: RunScope, leftover: Leftover) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leftover.what)


class _Lease:
    name = "lease-v1"

    def find(self, scope: RunScope) -> list[Leftover]:
        lease, now = scope.store.leases.get(scope.run.run_id)
        if lease is None or not lease.live(now):
            return []
        gone = holder_gone(lease, node_id())
        return [
            Leftover(
                kind=self.name,
                what=f"{lease.holder} epoch {lease.epoch}",
                owned_because="the run's lease row, held past the run's end",
                releasable=gone,
            )
        ]

    def release(self, scope: RunScope, leftover: Leftover) -> None:
        lease, _ = scope.store.leases.get(scope.run.run_id)
        if lease is None or lease.holder is None:
            return
        scope.store.leases.release(lease.holder, {scope.run.run_id: lease.epoch})


class _Allocation:
    name = "allocation-v1"

    def find(self, scope: RunScope) -> list[Leftover]:
        record = scope.run.allocation or {}
        if record.get("state") not in (AllocationState.PENDING, AllocationState.GRANTED):
            return []
        what = f"req{int(record.get('request') or 0)} ({record.get('state')})"
        return [
            Leftover(
                kind=self.name,
                what=what,
                releasable=False,
                owned_because="the run's allocation record; its controller gives it back "
                "(`runwright controller RUN` on a reachable engine)",
            )
        ]

    def release(self, scope: RunScope, leftover: Leftover) -> None:
        raise OSError("only the run's controller can give an allocation back")


class _Credentials:
    name = "credentials-v1"

    @staticmethod
    def _live(scope: RunScope) -> dict[str, tuple[int, dict]]:
        kinds = (EventType.CREDENTIALS_ISSUED, EventType.CREDENTIALS_REVOKED)
        live = credentials.live_credentials(scope.store.events(scope.run.run_id, types=kinds))
        return {
            f"g{generation} {issued.get('user')} {issued.get('access_key_id')}": (
                generation,
                issued,
            )
            for generation, issued in live.items()
        }

    def find(self, scope: RunScope) -> list[Leftover]:
        live = self._live(scope)
        if not live:
            return []
        issuer = credentials.configured_issuer()  # a misnamed one fails the find, with its fix
        found = []
        for what, (generation, issued) in sorted(live.items()):
            why = f"generation {generation}'s CREDENTIALS_ISSUED, never revoked"
            if issuer is None:
                expires = time.strftime(
                    "%Y-%m-%d %H:%M:%S UTC",
                    time.gmtime(float(issued.get("expires_unix_s") or 0)),
                )
                why += (
                    f"; no issuer here to revoke it: set {credentials.ISSUER_ENV}="
                    f"{issued.get('issuer') or 'iam-user-v1'} where its IAM service answers "
                    f"(it expires {expires})"
                )
            found.append(
                Leftover(
                    kind=self.name, what=what, owned_because=why, releasable=issuer is not None
                )
            )
        return found

    def release(self, scope: RunScope, leftover: Leftover) -> None:
        live = self._live(scope)
        if leftover.what not in live:
            return  # revoked since the find (its controller's pass)
        generation, issued = live[leftover.what]
        issuer = credentials.configured_issuer()
        if issuer is None:
            raise OSError(leftover.owned_because)
        # An unanswered IAM service raises CredentialError: reported, tried on the next sweep.
        issuer.revoke(str(issued["user"]), str(issued["access_key_id"]))
        # The controller's own revocation writes this very event id (launching.py), so a
        # cleaner and a late controller record it once.
        Journal(scope.store).record(
            scope.run.model_copy(update={"generation": generation}),
            EventType.CREDENTIALS_REVOKED,
            op=f"revoke{generation}",
            per_step=False,
            user=issued["user"],
            access_key_id=issued["access_key_id"],
            reason=f"released by the cleaner after the run ended {scope.run.state}",
        )


RELEASERS: dict[str, Releaser] = {
    r.name: r
    for r in (
        _Processes(),
        _Temporary(),
        _Staging(),
        _SharedMemory(),
        _Lease(),
        _Allocation(),
        _Credentials(),
    )
}
"""Releasers by versioned name, processes first: nothing may still write what the others
remove."""


def register_releaser(releaser: Releaser) -> None:
    """Add a releaser (a worker credential, a node cache); its name must be new."""
    if releaser.name in RELEASERS:
        raise ValueError(f"a releaser named {releaser.name!r} is registered already")
    RELEASERS[releaser.name] = releaser


def clean_run(store: Store, root: Path, run: RunRecord, *, dry_run: bool = False,
              skip: frozenset[str] = frozenset()) -> Cleanup:  # fmt: skip
    """Find and (unless `dry_run`) release what ended run `run` still holds; `skip` names
    releasers to leave out (the controller's own lease while it still drives the run)."""
    scope = RunScope(run=run, root=root, store=store)
    cleanup = Cleanup(run_id=run.run_id, state=run.state, dry_run=dry_run)
    for name, releaser in RELEASERS.items():
        if name in skip:
            continue
        try:
            found = releaser.find(scope)
        except Exception as exc:  # one releaser's trouble must not keep the others
            cleanup.failed[f"{name} find"] = f"{type(exc).__name__}: {exc}"
            continue
        cleanup.found.extend(found)
        for leftover in found:
            if dry_run:
                continue
            if not leftover.releasable:
                cleanup.failed[f"{name} {leftover.what}"] = leftover.owned_because
                continue
            try:
                releaser.release(scope, leftover)
            except Exception as exc:
                cleanup.failed[f"{name} {leftover.what}"] = f"{type(exc).__name__}: {exc}"
            else:
                cleanup.released.append(leftover)
    return cleanup


def release_ended(store: Store, journal: "Journal", run: RunRecord) -> Cleanup:
    """The controller's pass as a run ends (before RUN_FINISHED): everything but its own lease,
    which it hands back when it stops driving the run. RESOURCES_RELEASED when anything was
    found, so the run's log says what it left and what became of it."""
    cleanup = clean_run(store, Path(run.root), run, skip=frozenset({"lease-v1"}))
    if cleanup.found or cleanup.failed:
        released: dict[str, int] = {}
        for leftover in cleanup.released:
            released[leftover.kind] = released.get(leftover.kind, 0) + 1
        journal.record(
            run,
            EventType.RESOURCES_RELEASED,
            op="cleanup",
            per_step=False,
            released=released,
            left=dict(cleanup.failed),
        )
    return cleanup
