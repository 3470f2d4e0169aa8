"""The worker protocol: what the controller and a training process agree on, versioned.

The controller starts a generation's processes with the environment below, a spec file and a rank
manifest; the processes answer through append-only channel files (one per generation and rank)
and read stop requests from a file the controller writes. Both sides import this module and
nothing of each other (tests/test_layers.py), and the file paths come from `runwright.layout`.

Versioning: every channel message and stop request carries `v`, the protocol version of its
writer. A reader takes every version up to its own (a line written before `v` existed reads as
version 1: the fields are the same) and refuses a newer one with `ProtocolVersionError` instead
of guessing at fields it does not know. The controller also passes its version to the workers
(ENV_PROTOCOL_VERSION), so a worker whose library is older than its controller stops at once with
a message naming both versions, rather than training with messages nobody can read.
"""

import json
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from runwright.errors import RunwrightError
from runwright.layout import RunPaths
from runwright.records import Record

PROTOCOL_VERSION = 1
"""Bump when a message gains a field a reader must understand, or changes a field's meaning."""

# -- the launch environment (the executor sets these; torchrun adds RANK, WORLD_SIZE, ...) ------
ENV_RUN_ID = "RUNWRIGHT_RUN_ID"
ENV_GENERATION = "RUNWRIGHT_GENERATION"
ENV_RUN_DIR = "RUNWRIGHT_RUN_DIR"
ENV_SPEC_FILE = "RUNWRIGHT_SPEC_FILE"
ENV_RANK_MANIFEST = "RUNWRIGHT_RANK_MANIFEST"
ENV_PROTOCOL_VERSION = "RUNWRIGHT_PROTOCOL_VERSION"
# The executor's index of the node whose torchrun agent started the process (its slot in the
# allocation, `RankEntry.node`); set per agent, so it also tags one node's processes. Under c10d
# rendezvous it need not equal torchrun's GROUP_RANK (see `placed_entry`).
ENV_NODE = "RUNWRIGHT_NODE"
# JSON list of [first, last] step ranges whose batches a restarted group must skip (after a
# non-finite loss, recovery.on_nan: rollback_skip).
ENV_SKIP_STEPS = "RUNWRIGHT_SKIP_STEPS"
# The checkpoint root (folder or URL) of `checkpoint.resume_from`, resolved by the controller
# against the run's root: where a run with no checkpoint of its own starts from.
ENV_RESUME_FROM = "RUNWRIGHT_RESUME_FROM"
# The newest step a restarted group may restore (an alert's rollback to before a bad step).
ENV_RESTORE_AT_MOST_STEP = "RUNWRIGHT_RESTORE_AT_MOST_STEP"
# JSON object shard name -> reason in words: train shards an operator told the run to skip
# (control/operator.py). The loader quarantines them (reason `operator`) from the step it starts
# at, so every rank of every later generation leaves out the same documents.
ENV_SKIP_SHARDS = "RUNWRIGHT_SKIP_SHARDS"
# Set ("1") on a warm standby's ranks (control/executors/local.py): each waits in `runtime.init`,
# after its imports and before it writes anything, for its generation's activation file.
ENV_STANDBY = "RUNWRIGHT_STANDBY"

HEARTBEAT = "HEARTBEAT"
"""The channel message type that only updates liveness; every other type is an `EventType`."""
DUMP_SIGNAL = signal.SIGUSR1
"""The controller's request that a rank dump its collective log and Python stacks
(runtime/collective_log.py answers it, control/hang_dumps.py sends it)."""


class ProtocolVersionError(RunwrightError):
    """A message, a stop request or a controller speaks a newer protocol than this library."""


def check_version(version: int, what: str) -> None:
    if version > PROTOCOL_VERSION:
        raise ProtocolVersionError(
            f"{what} speaks worker protocol v{version}, this runwright speaks v{PROTOCOL_VERSION}: "
            "install the same runwright version on the controller and the workers"
        )


class ChannelMessage(Record):
    """One line of a channel file. HEARTBEAT messages update liveness; all others become events."""

    v: int = 1
    """Protocol version of the writer (absent in lines written before it existed: version 1)."""
    event_id: str
    """Unique per message; the store ignores a second copy."""
    type: str
    """An `EventType` name, or HEARTBEAT."""
    generation: int
    """The writer's generation (fencing token)."""
    rank: int
    """The writer's global rank."""
    step: int | None = None
    """Global optimizer step the message concerns, if any."""
    world_size: int | None = None
    """World size of the writer's group."""
    checkpoint_id: str | None = None
    """Checkpoint the message concerns, if any."""
    time_unix_s: float
    """When it was written (writer's clock)."""
    attributes: dict[str, Any] = Field(default_factory=dict)
    """Details, as named by `EventType`."""


def encode_message(message: ChannelMessage) -> str:
    """One channel line, newline included."""
    return message.model_dump_json() + "\n"


def decode_message(line: bytes) -> ChannelMessage | None:
    """One message, or None for a blank or unreadable line (a torn or foreign line: skipped).
    A line from a newer protocol raises ProtocolVersionError rather than being misread."""
    if not line.strip():
        return None
    try:
        # The common case in one pass of pydantic's own JSON parser (about half the cost of
        # json.loads and a validation of the dict, which the controller pays per message).
        message = ChannelMessage.model_validate_json(line)
    except ValueError:
        return _decode_odd_line(line)
    check_version(message.v, "a channel message")
    return message


def _decode_odd_line(line: bytes) -> ChannelMessage | None:
    """A line that is not a valid message: a newer protocol's (its version is checked before its
    fields, which may be new) or a torn or foreign one (None)."""
    try:
        raw = json.loads(line)
    except ValueError:
        return None
    if isinstance(raw, dict) and isinstance(raw.get("v"), int):
        check_version(raw["v"], "a channel message")
    try:
        return ChannelMessage.model_validate(raw)
    except (ValueError, TypeError):
        return None


# -- warm standby activation ------------------------------------------------------------------
class Activation(Record):
    """What turns a waiting standby into generation `generation`'s group: the launch
    environment that depends on why and from where it starts (skipped steps, a resume source, a
    rollback bound, pinned devices), applied by each rank before it reads any of it."""

    v: int = 1
    generation: int
    env: dict[str, str]
    activated_unix_s: float


def write_activation(path: Path, generation: int, env: dict[str, str]) -> None:
    """Controller side, atomically: the ranks never read a half-written activation."""
    tmp = path.with_suffix(".tmp")
    record = Activation(v=PROTOCOL_VERSION, generation=generation, env=env,
                        activated_unix_s=time.time())  # fmt: skip
    tmp.write_text(record.model_dump_json())
    os.replace(tmp, path)


def read_activation(path: Path) -> Activation | None:
    """Worker side: the activation in `path`, or None while there is none."""
    try:
        raw = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    if isinstance(raw, dict) and isinstance(raw.get("v"), int):
        check_version(raw["v"], f"the standby activation {path}")
    return Activation.model_validate(raw)


# -- stop requests ------------------------------------------------------------------------------
STOP_REASONS = (
    "cancel",
    "preemption",
    "budget",
    "controller",
    "criterion",
    "alert",
    "rollback",
    "pause",
    "resize",
    "operator_stop",
    "skip_shard",
    "move_pool",
)
"""In this order for ever: the ranks' stop vote sends a reason as its index here."""
OPERATOR_SAVING_STOPS = ("operator_stop", "skip_shard", "move_pool")
"""An operator's stops that save at the stop step whatever checkpoint.save_on_stop says (the
other reasons save only under save_on_stop, as they always did)."""


class StopRequest(Record):
    """Why the group stops and whether it saves first."""

    v: int = 1
    """Protocol version of the writer (absent before it existed: version 1)."""
    reason: str
    """One of STOP_REASONS: cancel, preemption, budget, controller, criterion, alert,
    rollback, pause, resize (an elastic run grows back: control/membership.py), and an
    operator's operator_stop, skip_shard, move_pool (control/operator.py)."""
    save: bool = True
    """Save a checkpoint at the stop step before exiting."""
    requested_unix_s: float
    """When the stop was asked for."""
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
        v=PROTOCOL_VERSION,
        reason=reason,
        save=save,
        requested_unix_s=time.time(),
        fence_generation=fence_generation,
    )
    tmp.write_text(request.model_dump_json())
    os.replace(tmp, path)
    return path


def read_stop_request(path: Path) -> StopRequest | None:
    """Worker side: the request in `path`, or None while there is none (or it is half written;
    the writer replaces the file atomically, so the next read sees it whole)."""
    try:
        raw = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    if isinstance(raw, dict) and isinstance(raw.get("v"), int):
        check_version(raw["v"], f"the stop request {path}")
    try:
        return StopRequest.model_validate(raw)
    except ValueError:
        return None


# -- rank manifest ------------------------------------------------------------------------------
class RankEntry(Record):
    """One rank's placement and coordinates in the (pp, dp, tp) grid."""

    rank: int
    """Global rank."""
    local_rank: int
    """Rank within its node."""
    node: int
    """Node index within the allocation."""
    host: str
    """Host name of its node."""
    device: str
    """`cpu` or `cuda:<local_rank>`."""
    dp: int
    """Data-parallel coordinate."""
    tp: int
    """Tensor-parallel coordinate."""
    pp: int
    """Pipeline-parallel coordinate."""


def build_rank_manifest(
    *,
    nodes: int,
    devices_per_node: int,
    dp: int,
    tp: int,
    pp: int,
    device_type: str,
    hosts: list[str],
) -> list[RankEntry]:
    """Lay ranks out with tp innermost (so a tensor-parallel group shares a node's fast links),
    then dp, then pp: rank = (pp_i * dp + dp_i) * tp + tp_i, as Megatron-LM orders them."""
    world = nodes * devices_per_node
    entries = []
    for rank in range(world):
        tp_i = rank % tp
        dp_i = (rank // tp) % dp
        pp_i = rank // (tp * dp)
        node, local = divmod(rank, devices_per_node)
        entries.append(
            RankEntry(
                rank=rank,
                local_rank=local,
                node=node,
                host=hosts[node],
                device="cpu" if device_type == "cpu" else f"cuda:{local}",
                dp=dp_i,
                tp=tp_i,
                pp=pp_i,
            )
        )
    return entries


def node_hosts(entries: list[RankEntry]) -> dict[int, str]:
    """node -> its host, as a manifest names them."""
    return {entry.node: entry.host for entry in entries}


def placed_entry(
    entries: list[RankEntry],
    rank: int,
    *,
    node: int | None,
    host: str,
    hosts: Mapping[int, str] | None = None,
) -> RankEntry | None:
    """Global rank `rank`'s entry as it really runs: started by node `node`'s agent.

    The manifest is built before launch in launch order (rank r on node r // devices_per_node),
    but under c10d rendezvous torchrun assigns node ranks (GROUP_RANK, and with them the global
    ranks) from the rendezvous, not from the order the agents were started
    (pytorch/pytorch#182223): global rank 0 may run on the agent the executor started as node 1.
    The grid coordinates (dp, tp, pp), the local rank and the device follow from the global and
    local rank and stay; the node is the one that started the rank, and the host the
    allocation's name for that node (`hosts`, node -> host; by default as `entries` name them),
    else `host`, the name the rank's machine gives itself. `node` None (a process no executor
    placed) keeps the entry as it is."""
    if rank >= len(entries):
        return None
    entry = entries[rank]
    if node is None:
        return entry
    named = (node_hosts(entries) if hosts is None else hosts).get(node, host)
    return entry.model_copy(update={"node": node, "host": named})


def encode_rank_manifest(entries: list[RankEntry]) -> str:
    return json.dumps([entry.model_dump() for entry in entries], indent=1)


def decode_rank_manifest(text: str) -> list[RankEntry]:
    return [RankEntry.model_validate(entry) for entry in json.loads(text)]


def encode_skip_steps(ranges: list[tuple[int, int]]) -> str:
    return json.dumps([[first, last] for first, last in ranges])


def decode_skip_steps(text: str | None) -> list[tuple[int, int]]:
    return [(int(first), int(last)) for first, last in json.loads(text or "[]")]
