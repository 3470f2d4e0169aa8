"""Consumption ledger: which logical samples each global step consumed, as compact ranges.

A range says "steps [first_step, end_step) consumed global samples [first_sample, end_sample)";
contiguous steps with contiguous samples merge, so an uninterrupted run is one range however long
it is. Joining the ledgers of every attempt of a run and checking `gaps_and_overlaps` proves that
nothing was skipped or repeated across restarts.
"""

import itertools

from pydantic import Field

from runwright.records import Record


class LedgerRange(Record):
    """Consecutive global steps and the consecutive global samples they consumed."""

    dataset_id: str
    """Dataset the samples belong to."""
    first_step: int = Field(ge=0)
    """First global step of the range."""
    end_step: int = Field(gt=0)
    """One past the last global step."""
    first_sample: int = Field(ge=0)
    """First global sample (packed sequence) of the range."""
    end_sample: int = Field(gt=0)
    """One past the last global sample."""


class ConsumptionLedger(Record):
    """Ranges in the order they were consumed."""

    ranges: tuple[LedgerRange, ...] = ()
    """Compact ranges; adjacent ones never continue each other."""


def record_step(
    ledger: ConsumptionLedger, dataset_id: str, step: int, first_sample: int, end_sample: int
) -> ConsumptionLedger:
    """The ledger after one more consumed global step (pure)."""
    return record_steps(ledger, dataset_id, step, step + 1, first_sample, end_sample)


def record_steps(
    ledger: ConsumptionLedger,
    dataset_id: str,
    first_step: int,
    end_step: int,
    first_sample: int,
    end_sample: int,
) -> ConsumptionLedger:
    """The ledger after consecutive steps [first_step, end_step) that consumed consecutive
    samples [first_sample, end_sample); the same as recording them one step at a time (pure)."""
    if ledger.ranges:
        last = ledger.ranges[-1]
        if (
            last.dataset_id == dataset_id
            and last.end_step == first_step
            and last.end_sample == first_sample
        ):
            grown = last.model_copy(update={"end_step": end_step, "end_sample": end_sample})
            return ConsumptionLedger(ranges=(*ledger.ranges[:-1], grown))
    new = LedgerRange(
        dataset_id=dataset_id,
        first_step=first_step,
        end_step=end_step,
        first_sample=first_sample,
        end_sample=end_sample,
    )
    return ConsumptionLedger(ranges=(*ledger.ranges, new))


def join(*ledgers: ConsumptionLedger) -> ConsumptionLedger:
    """Concatenate ledgers (e.g. of successive attempts), merging ranges that continue."""
    out = ConsumptionLedger()
    for ledger in ledgers:
        for r in ledger.ranges:
            if (
                out.ranges
                and out.ranges[-1].dataset_id == r.dataset_id
                and out.ranges[-1].end_step == r.first_step
                and out.ranges[-1].end_sample == r.first_sample
            ):
                last = out.ranges[-1]
                merged = last.model_copy(
                    update={"end_step": r.end_step, "end_sample": r.end_sample}
                )
                out = ConsumptionLedger(ranges=(*out.ranges[:-1], merged))
            else:
                out = ConsumptionLedger(ranges=(*out.ranges, r))
    return out


def gaps_and_overlaps(ledger: ConsumptionLedger) -> list[str]:
    """Problems in the sample coverage per dataset: a gap means skipped, an overlap repeated."""
    problems: list[str] = []
    by_dataset: dict[str, list[LedgerRange]] = {}
    for r in ledger.ranges:
        by_dataset.setdefault(r.dataset_id, []).append(r)
    for dataset_id, ranges in by_dataset.items():
        ordered = sorted(ranges, key=lambda r: r.first_sample)
        for a, b in itertools.pairwise(ordered):
            if b.first_sample > a.end_sample:
                problems.append(
                    f"{dataset_id[:12]}: samples [{a.end_sample}, {b.first_sample}) skipped"
                )
            elif b.first_sample < a.end_sample:
                problems.append(
                    f"{dataset_id[:12]}: samples [{b.first_sample}, {a.end_sample}) repeated"
                )
    return problems
