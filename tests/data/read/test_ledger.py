"""The consumption ledger: compact ranges, and gaps or repeats across restarts."""

from runwright.data import ConsumptionLedger, gaps_and_overlaps, join
from runwright.data.read.ledger import record_step


def test_ledger_merges_contiguous_steps_and_finds_gaps() -> None:
    ledger = ConsumptionLedger()
    for step in range(5):
        ledger = record_step(ledger, "x", step, step * 8, step * 8 + 8)
    assert len(ledger.ranges) == 1
    assert (ledger.ranges[0].end_step, ledger.ranges[0].end_sample) == (5, 40)
    resumed = record_step(ConsumptionLedger(), "x", 5, 40, 48)
    assert len(join(ledger, resumed).ranges) == 1
    assert gaps_and_overlaps(join(ledger, resumed)) == []
    skipped = record_step(ConsumptionLedger(), "x", 6, 48, 56)
    assert gaps_and_overlaps(join(ledger, skipped)) == ["xxx"[:1] + ": samples [40, 48) skipped"]
    repeated = record_step(ConsumptionLedger(), "x", 4, 32, 40)
    assert "repeated" in gaps_and_overlaps(join(ledger, repeated))[0]
