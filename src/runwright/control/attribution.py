"""Hang attribution (issue 24, seed 000 8.7): from every rank's collective dump, name the rank the
others wait for, and what it was doing, instead of the last rank to time out.

Pure functions over the dumps the ranks wrote (runtime/collective_log.py; read by
control/hang_dumps.py). A dump holds the rank's last collectives (group, sequence number, op,
dtype, bytes, shape, enter and exit times), its phase (e.g. data_wait since when, on which shard)
and its main thread's top frames. The reading:

- **desync**: two ranks issued different collectives (op, dtype or shape) at one sequence number
  of one group. Their peers may wait forever or compute garbage; either way it is the code, not
  a slow rank, and it is reported first.
- **hang**: ranks wait in a collective (entered, never exited); the one they wait in is the
  newest such (group, sequence number). A rank of that group whose newest entry there is older
  never entered it: it is the cause, with what it was doing (waiting in another group's
  collective, its phase and for how long, or its stack's top frame). A rank with no dump at all
  (dead, on another host) is named as such.

Sequence numbers count the collectives each rank issued through runwright's hooks on a group
(DDP buckets, FSDP2 comms, `ctx.all_reduce`), so they line up across ranks that run the same
code; a group's members are the ranks that recorded in it (the default group "0": all ranks).
"""

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

TOP_FRAMES = 3
"""Frames of a culprit's stack quoted in the sentence (the dump keeps more)."""


@dataclass(frozen=True)
class Attribution:
    kind: str
    """desync, hang or unknown (nothing the dumps can say: no rank waits in a collective)."""
    sentence: str
    """What an operator reads in status, logs and the report."""
    culprits: tuple[int, ...] = ()
    """The ranks named as the cause: the ones that never entered, or that issued the odd op."""
    facts: dict[str, Any] = field(default_factory=dict)
    """The same, JSON-ready, for FAILURE_CLASSIFIED and the diagnostics bundle."""

    @property
    def rank(self) -> int | None:
        return self.culprits[0] if self.culprits else None


def records_of(dump: dict[str, Any]) -> list[dict[str, Any]]:
    """A dump's collectives: runwright's own, else the NCCL Flight Recorder's."""
    return list(dump.get("records") or dump.get("flight_recorder") or [])


def _signature(record: dict[str, Any]) -> tuple[str, str, tuple[int, ...]]:
    return str(record["op"]), str(record["dtype"]), tuple(record.get("shape") or ())


def _describe(record: dict[str, Any]) -> str:
    """`all_reduce #1834 (bucket 3, 25.0 MB)`."""
    detail = dict(record.get("detail") or {})
    parts = [f"{k} {v}" for k, v in detail.items() if k not in ("source", "state")]
    size = record.get("bytes")
    if size is not None:
        parts.append(_size(int(size)))
    group = "" if record["group"] == "0" else f" on group {record['group']}"
    inner = f" ({', '.join(parts)})" if parts else ""
    return f"{record['op']} #{record['seq']}{group}{inner}"


def _size(size: int) -> str:
    if size >= 1_000_000:
        return f"{size / 1e6:.1f} MB"
    if size >= 1_000:
        return f"{size / 1e3:.1f} kB"
    return f"{size} B"


def _clock(wall: float | None) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(wall)) if wall else "an unknown time"


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ",".join(map(str, ranks))


def find_desync(dumps: dict[int, dict[str, Any]]) -> Attribution | None:
    """The lowest sequence number at which ranks issued different collectives on one group."""
    by_slot: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
    for rank, dump in dumps.items():
        for record in records_of(dump):
            by_slot.setdefault((str(record["group"]), int(record["seq"])), {})[rank] = record
    for (group, seq), issued in sorted(by_slot.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        kinds = Counter(_signature(r) for r in issued.values())
        if len(kinds) < 2:
            continue
        common = kinds.most_common(1)[0][0]
        if list(kinds.values()).count(kinds[common]) > 1:  # a tie: the lowest rank's is the norm
            common = _signature(issued[min(issued)])
        odd = sorted(rank for rank, r in issued.items() if _signature(r) != common)
        said = "; ".join(
            f"{_ranks(ranks)} issued {op} {dtype} {list(shape)}"
            for (op, dtype, shape), ranks in _grouped(issued).items()
        )
        sentence = (
            f"collective desync at #{seq} of group {group}: {said} "
            f"(the ranks run different collectives at one point of their program)"
        )
        return Attribution(
            "desync",
            sentence,
            tuple(odd),
            {"kind": "desync", "group": group, "seq": seq, "odd_ranks": odd,
             "issued": {str(r): _signature(rec) for r, rec in issued.items()}},
        )  # fmt: skip
    return None


def _grouped(issued: dict[int, dict[str, Any]]) -> dict[tuple, list[int]]:
    out: dict[tuple, list[int]] = {}
    for rank in sorted(issued):
        out.setdefault(_signature(issued[rank]), []).append(rank)
    return out


def _open(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest collective the rank entered and never left."""
    return next((r for r in reversed(records) if r.get("exit_wall") is None), None)


def doing(dump: dict[str, Any], waited: tuple[str, int] | None = None) -> str:
    """What a rank that never entered the awaited collective was doing, in words."""
    records = records_of(dump)
    own = _open(records)
    if own is not None and (str(own["group"]), int(own["seq"])) != waited:
        return f"it waits in {_describe(own)} since {_clock(own.get('enter_wall'))}"
    if dump.get("reason") == "exit":  # its process ended: its error is the cause
        error = dump.get("error")
        return f"it exited at step {dump.get('step')}" + (f" with {error}" if error else "")
    phase = dump.get("phase")
    now = dump.get("now_mono")
    words = []
    if phase:
        seconds = now - phase["since_mono"] if now is not None else None
        detail = phase.get("detail") or {}
        on = f" on shard {detail['shard']}" if "shard" in detail else ""
        more = ", ".join(f"{k} {v}" for k, v in detail.items() if k != "shard")
        span = f" {seconds:.0f} s" if seconds is not None else ""
        name = phase["name"].replace("_", " ")
        words.append(f"{name}{span}{on}" + (f" ({more})" if more else ""))
    else:
        words.append(f"in step {dump.get('step')}, outside any collective runwright records")
    frames = _own_frames(list(dump.get("main_frames") or []))[:TOP_FRAMES]
    if frames:
        words.append("at " + " <- ".join(frames))
    return "; ".join(words)


def _own_frames(frames: list[str]) -> list[str]:
    """The stack from its first frame in the script or in runwright: the standard library's
    and third-party packages' frames above it (a lock's wait) say little."""
    for i, frame in enumerate(frames):
        if "/lib/python3" not in frame or "/runwright/" in frame:
            return frames[i:]
    return frames


def attribute(dumps: dict[int, dict[str, Any]], world_size: int) -> Attribution:
    """The attribution of a hang from the ranks' dumps (`dumps`: rank -> dump; a rank missing
    from it sent none)."""
    desync = find_desync(dumps)
    if desync is not None:
        return desync
    waiting: dict[tuple[str, int], list[int]] = {}
    opened: dict[int, dict[str, Any]] = {}
    for rank, dump in dumps.items():
        record = _open(records_of(dump))
        if record is not None:
            opened[rank] = record
            waiting.setdefault((str(record["group"]), int(record["seq"])), []).append(rank)
    silent = sorted(set(range(world_size)) - set(dumps))
    if not waiting:
        missing = f"; {_ranks(silent)} sent no dump" if silent else ""
        return Attribution(
            "unknown",
            f"no rank waits in a recorded collective{missing}",
            tuple(silent),
            {"kind": "unknown", "no_dump": silent},
        )
    # The collective the group waits in: the newest one anyone entered and is still in; among
    # equals, the one most ranks wait in.
    slot = max(waiting, key=lambda s: (len(waiting[s]), s[1]))
    group, seq = slot
    waiters = sorted(waiting[slot])
    record = opened[waiters[0]]
    members = (
        set(range(world_size))
        if group == "0"
        else {r for r, d in dumps.items() if any(str(x["group"]) == group for x in records_of(d))}
    )
    absent = []
    for rank in sorted(members - set(waiters)):
        if rank not in dumps:
            continue
        newest = max(
            (int(x["seq"]) for x in records_of(dumps[rank]) if str(x["group"]) == group),
            default=0,
        )
        if newest < seq:
            absent.append(rank)
    since = min(opened[r].get("enter_wall") or 0 for r in waiters) or None
    sentence = f"{_ranks(waiters)} wait in {_describe(record)} since {_clock(since)}"
    causes = [f"rank {r} never entered it: {doing(dumps[r], slot)}" for r in absent]
    causes += [f"rank {r} sent no dump (its process is gone or elsewhere)" for r in silent]
    if causes:
        sentence += "; " + "; ".join(causes)
    else:
        sentence += "; every rank of the group entered it (a transport or device fault)"
    facts = {
        "kind": "hang",
        "group": group,
        "seq": seq,
        "op": record["op"],
        "bytes": record.get("bytes"),
        "detail": record.get("detail"),
        "waiting_ranks": waiters,
        "waiting_since_unix_s": since,
        "absent_ranks": absent,
        "no_dump": silent,
        "absent_doing": {str(r): doing(dumps[r], slot) for r in absent},
    }
    return Attribution("hang", sentence, tuple(absent or silent), facts)
