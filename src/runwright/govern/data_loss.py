"""What a run lost to corrupt or missing data (`data.on_corrupt_shard: skip`, docs/data.md).

Seed 000: a shard that is damaged may be quarantined and skipped, but the training report must
say how many effective tokens that cost. Two sources, both the workers':
- DATA_SHARD_QUARANTINED: the decision (shard, reason, what was wrong, the first step trained
  without it), once per generation that made it;
- STEP_HEALTHY's `data_lost`: per quarantined shard, the documents and tokens the run skipped so
  far, as the cursor of that step counts them. The newest generation's latest step is the final
  lineage: a restart from a checkpoint before the quarantine decides again (or, the shard
  restored, reads it again), and what the discarded steps skipped is not counted.

The tokens the run trained on (loss and device tokens) come from the batches themselves and never
include a skipped document, so they stay what was trained; this is what was not.
"""

from typing import Any

from runwright.events import EventType
from runwright.observe.rank_steps import per_rank
from runwright.records import Record
from runwright.store import EventRecord


class QuarantineRow(Record):
    """One quarantined shard and what the run lost to it."""

    shard: str
    """Shard name."""
    source: str
    """Mixture source it belongs to."""
    reason: str
    """`corrupt` or `missing`."""
    problems: list[str]
    """What was wrong with it, as rank 0 found it."""
    step: int | None
    """First step trained without it (the newest decision's)."""
    generations: list[int]
    """Generations that decided to quarantine it."""
    documents_lost: int
    """Its documents the final lineage drew and skipped."""
    tokens_lost: int
    """Their tokens (plus the untrained rest of a document cut by the quarantine's step)."""
    in_final_lineage: bool
    """False when the run's last generation never skipped it (a restart from before the
    quarantine found the shard restored and read it)."""


def _final_lost(events: list[EventRecord]) -> dict[str, Any]:
    """`data_lost` of the newest generation's latest healthy step that reports it ({} when none
    of its steps does: that generation skipped nothing)."""
    steps = [e for e in per_rank(events) if e.type == EventType.STEP_HEALTHY and e.step is not None]
    if not steps:
        return {}
    newest = max(e.generation for e in steps)
    reported = [
        e
        for e in steps
        if e.generation == newest and isinstance(e.attributes.get("data_lost"), dict)
    ]
    if not reported:
        return {}
    return max(reported, key=lambda e: e.step or 0).attributes["data_lost"]


def quarantine_rows(events: list[EventRecord]) -> list[QuarantineRow]:
    """One row per quarantined shard, in the order they were first quarantined."""
    lost = _final_lost(events)
    rows: dict[str, QuarantineRow] = {}
    for e in events:
        if e.type != EventType.DATA_SHARD_QUARANTINED:
            continue
        a = e.attributes
        shard = str(a.get("shard"))
        counted = lost.get(shard) if isinstance(lost.get(shard), dict) else None
        earlier = rows.get(shard)
        rows[shard] = QuarantineRow(
            shard=shard,
            source=str(a.get("source")),
            reason=str(a.get("reason")),
            problems=[str(p) for p in a.get("problems") or []],
            step=e.step,
            generations=sorted({*(earlier.generations if earlier else []), e.generation}),
            documents_lost=int((counted or {}).get("documents") or 0),
            tokens_lost=int((counted or {}).get("tokens") or 0),
            in_final_lineage=counted is not None,
        )
    # A quarantine the run inherited in a restored cursor (checkpoint.resume_from) has no
    # decision of its own here.
    for shard, counted in lost.items():
        if shard not in rows and isinstance(counted, dict):
            rows[shard] = QuarantineRow(
                shard=shard,
                source="",
                reason="inherited",
                problems=["quarantined before this run, in the cursor it restored"],
                step=None,
                generations=[],
                documents_lost=int(counted.get("documents") or 0),
                tokens_lost=int(counted.get("tokens") or 0),
                in_final_lineage=True,
            )
    return list(rows.values())
