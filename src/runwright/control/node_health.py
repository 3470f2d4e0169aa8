"""Node health from the system samples: a node whose GPUs report ECC errors or hardware Xids
past a threshold leaves the scheduler's offer, drained with the reason in words.

Seed 004 ("调度先看资源画像"): a node carries its health with a reason and a short history, so a
pending reason can say why devices are out of service. The evidence is what each node's sampler
reports (SYSTEM_SAMPLE, runtime/system_sampler.py): NVML's volatile ECC counts (errors since the
driver loaded) and the Xids of a failing part (observe/nvml.py's HARDWARE_XIDS).

- The ledger (`<root>/node_health.json`): per host, the last MAX_READINGS readings that said
  something (a GPU's ECC counts changed, or a hardware Xid arrived), written by the controller as
  it ingests samples (control/ingest.py). A quiet GPU writes nothing, so the file changes only
  on news and stays small: bounded by hosts x MAX_READINGS. A file, not a store table, because a
  node outlives the runs whose events carry its samples; it is replaced atomically under a lock
  (one controller's write never tears another's, though two controllers that ingest the same
  host at once may each keep only their own newest reading).
- The decision (`drain_reason`, pure): the newest reading of a GPU whose uncorrected (or
  corrected) ECC count reached the policy's threshold, or hardware Xids within the policy's
  window reaching its threshold. The reason names the GPU, the count and the threshold.
- The inventory (`HealthGatedInventory`): wraps the scheduler's source (a file's fixed
  inventory or a cluster read live) and drains each such node (`Inventory.with_health`, its
  history kept), so admission stops offering it and a waiting run's reason counts its devices
  as out of service and names why (sched/reasons.py).

The policy is the site's, not the experiment's: an optional `node_health:` mapping in the
controller's inventory file (`load_drain_policy`). A drained node stays drained while its
readings say so; an operator who replaced the part removes its entry from the ledger (or the
file), and the next pass offers it again.
"""

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError

from runwright.errors import RunwrightError
from runwright.layout import node_health_file
from runwright.records import Record
from runwright.sched.inventory import ClusterView, Inventory

MAX_READINGS = 32
"""Readings kept per host: enough to see a GPU's errors grow, small enough to read every pass."""
HARDWARE_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120})
"""The Xids of a failing part (observe/nvml.py's list; control/ may not import observe/'s
GPU reader, and tests/control/test_node_health.py checks that the two agree)."""


class NodeHealthError(RunwrightError):
    """The inventory file's `node_health:` section cannot be read as a drain policy."""


class DrainPolicy(Record):
    """When a node's GPU evidence takes it out of service (the inventory file's
    `node_health:`)."""

    uncorrected_ecc_errors: int = Field(default=1, ge=1)
    """Drain once a GPU's uncorrected ECC errors since the driver loaded reach this: any
    uncorrected error has already corrupted data or killed a process."""
    corrected_ecc_errors: int = Field(default=10_000, ge=1)
    """Drain once a GPU's corrected ECC errors reach this (a few are normal; a storm precedes
    retirement of memory pages)."""
    hardware_xids: int = Field(default=1, ge=1)
    """Drain once this many hardware Xids (bus loss, ECC, NVLink, GSP) arrived within
    `window_seconds`."""
    window_seconds: float = Field(default=86_400.0, gt=0, le=366 * 86_400)
    """How far back Xids count."""


class HealthReading(Record):
    """One GPU's evidence in one sample that said something."""

    at_unix_s: float
    """When the node sampled it."""
    run_id: str
    """The run whose sampler reported it."""
    gpu: int
    """The device index on its node."""
    ecc_corrected_errors: int = 0
    ecc_uncorrected_errors: int = 0
    hardware_xids: tuple[int, ...] = ()
    """Hardware Xids that arrived during the sample's interval."""


def readings_of(attributes: dict[str, Any], run_id: str, at_unix_s: float) -> list[HealthReading]:
    """The GPU evidence of one SYSTEM_SAMPLE's attributes (nothing for a node without GPUs)."""
    found = []
    for gpu in attributes.get("gpus") or []:
        if not isinstance(gpu, dict) or not isinstance(gpu.get("index"), int):
            continue
        xids = tuple(x for x in gpu.get("xids") or [] if x in HARDWARE_XIDS)
        found.append(
            HealthReading(
                at_unix_s=at_unix_s,
                run_id=run_id,
                gpu=gpu["index"],
                ecc_corrected_errors=_count(gpu.get("ecc_corrected_errors")),
                ecc_uncorrected_errors=_count(gpu.get("ecc_uncorrected_errors")),
                hardware_xids=xids,
            )
        )
    return found


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def drain_reason(readings: Iterable[HealthReading], policy: DrainPolicy, now: float) -> str | None:
    """Why a node with these readings (oldest first) must be drained, or None."""
    newest: dict[int, HealthReading] = {}
    xids: dict[int, list[int]] = {}
    for r in readings:
        newest[r.gpu] = r
        if r.hardware_xids and now - r.at_unix_s <= policy.window_seconds:
            xids.setdefault(r.gpu, []).extend(r.hardware_xids)
    for gpu, r in sorted(newest.items()):
        if r.ecc_uncorrected_errors >= policy.uncorrected_ecc_errors:
            return (
                f"GPU {gpu}: {r.ecc_uncorrected_errors} uncorrected ECC errors since the driver "
                f"loaded (threshold {policy.uncorrected_ecc_errors})"
            )
        if r.ecc_corrected_errors >= policy.corrected_ecc_errors:
            return (
                f"GPU {gpu}: {r.ecc_corrected_errors} corrected ECC errors since the driver "
                f"loaded (threshold {policy.corrected_ecc_errors})"
            )
    for gpu, codes in sorted(xids.items()):
        if len(codes) >= policy.hardware_xids:
            hours = policy.window_seconds / 3600
            listed = ", ".join(str(c) for c in codes[-5:])
            return (
                f"GPU {gpu}: {len(codes)} hardware Xid event(s) ({listed}) in the last "
                f"{hours:g} h (threshold {policy.hardware_xids})"
            )
    return None


class NodeHealthLedger:
    """The hosts' bounded reading histories in `<root>/node_health.json`."""

    def __init__(self, root: Path) -> None:
        self.path = node_health_file(Path(root))

    def read(self) -> dict[str, list[HealthReading]]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise NodeHealthError(
                f"{self.path} is unreadable ({exc}); remove it to start the node health history "
                "afresh"
            ) from None
        return {host: [HealthReading.model_validate(r) for r in rs] for host, rs in raw.items()}

    def record(self, host: str, readings: list[HealthReading]) -> list[HealthReading] | None:
        """Add the readings that say something new; the host's history if it changed."""
        if not readings:
            return None
        with self._locked():
            hosts = self.read()
            history = hosts.get(host, [])
            last = {r.gpu: r for r in history}
            news = [r for r in readings if _news(r, last.get(r.gpu))]
            if not news:
                return None
            history = (history + news)[-MAX_READINGS:]
            hosts[host] = history
            body = {h: [r.model_dump(mode="json") for r in rs] for h, rs in hosts.items()}
            tmp = self.path.with_suffix(".tmp")
            with open(tmp, "w", encoding="utf-8") as out:
                json.dump(body, out, indent=1)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
            return history

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def drained(self, policy: DrainPolicy, now: float | None = None) -> dict[str, str]:
        """host -> why it must be drained, for every host whose readings cross the policy."""
        now = time.time() if now is None else now
        found = {}
        for host, readings in self.read().items():
            reason = drain_reason(readings, policy, now)
            if reason is not None:
                found[host] = reason
        return found

    def stamp(self) -> float | None:
        """The ledger's modification time (None: no ledger): what a cached view is keyed by."""
        try:
            return self.path.stat().st_mtime_ns
        except FileNotFoundError:
            return None


def record_sample(
    root: Path, run_id: str, attributes: dict[str, Any], at_unix_s: float
) -> list[HealthReading] | None:
    """The controller's hook for one ingested SYSTEM_SAMPLE: its GPU evidence into the ledger
    under `root`; the host's new history when it said something new."""
    host = attributes.get("host")
    readings = readings_of(attributes, run_id, at_unix_s)
    if not isinstance(host, str) or not host or not any(_says_something(r) for r in readings):
        return None  # a healthy GPU (no errors, no Xid): the ledger file is not even read
    return NodeHealthLedger(root).record(host, readings)


def _says_something(reading: HealthReading) -> bool:
    return bool(
        reading.hardware_xids or reading.ecc_corrected_errors or reading.ecc_uncorrected_errors
    )


def _news(reading: HealthReading, last: HealthReading | None) -> bool:
    if reading.hardware_xids:
        return True
    if last is None:
        return reading.ecc_corrected_errors > 0 or reading.ecc_uncorrected_errors > 0
    return (reading.ecc_corrected_errors, reading.ecc_uncorrected_errors) != (
        last.ecc_corrected_errors,
        last.ecc_uncorrected_errors,
    )


def _matches(node_name: str, host: str) -> bool:
    # A sample names its host as socket.gethostname() says (`a07` or `a07.cluster.example`),
    # an inventory as its source does (Slurm's NodeName is usually the short name).
    return node_name == host or node_name.split(".")[0] == host.split(".")[0]


class HealthGatedInventory:
    """The scheduler's inventory source with every node the ledger condemns drained."""

    def __init__(
        self,
        source: Inventory | Callable[[], ClusterView],
        ledger: NodeHealthLedger,
        policy: DrainPolicy,
    ) -> None:
        fixed = ClusterView(source) if isinstance(source, Inventory) else None
        self.source: Callable[[], ClusterView] = (
            (lambda: fixed) if fixed is not None else source  # type: ignore[assignment]
        )
        self.ledger = ledger
        self.policy = policy
        self._cached: tuple[ClusterView, float | None, ClusterView] | None = None

    def __call__(self) -> ClusterView:
        view, stamp = self.source(), self.ledger.stamp()
        if self._cached is not None and self._cached[0] is view and self._cached[1] == stamp:
            return self._cached[2]  # the same object: admission skips what it already knows
        gated = self._gate(view)
        self._cached = (view, stamp, gated)
        return gated

    def _gate(self, view: ClusterView) -> ClusterView:
        drained = self.ledger.drained(self.policy)
        inventory = view.inventory
        for node in view.inventory.nodes:
            for host, reason in drained.items():
                if _matches(node.name, host) and node.health.state == "healthy":
                    inventory = inventory.with_health(node.name, "drained", reason, time.time())
        if inventory is view.inventory:
            return view
        return ClusterView(inventory=inventory, allocated=view.allocated)


def load_drain_policy(path: Path | None) -> DrainPolicy:
    """The `node_health:` section of the inventory file at `path` (defaults without one)."""
    if path is None or not path.is_file():
        return DrainPolicy()
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise NodeHealthError(f"cannot read {path}: {exc}") from None
    section = raw.get("node_health") if isinstance(raw, dict) else None
    if section is None:
        return DrainPolicy()
    try:
        return DrainPolicy.model_validate(section)
    except ValidationError as exc:
        problems = "; ".join(
            f"node_health.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise NodeHealthError(
            f"inventory file {path}: {problems} (fields: uncorrected_ecc_errors, "
            "corrected_ecc_errors, hardware_xids: whole numbers >= 1; window_seconds > 0)"
        ) from None
