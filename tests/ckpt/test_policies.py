"""Pure parts: the Young/Daly interval and retention planning (property tests)."""

import math

from hypothesis import assume, given
from hypothesis import strategies as st

from runwright.ckpt.interval import IntervalPolicy
from runwright.ckpt.manifest import HealthVerdict
from runwright.ckpt.retention import RetentionEntry, plan_retention
from runwright.plan.interval import (
    daly_interval_seconds,
    expected_waste_fraction,
    young_interval_seconds,
)
from runwright.spec.policies import CheckpointIntervalSpec


def test_young_worked_example():
    # C = 20 s, M = one day: sqrt(2 * 20 * 86400) = 1858.9 s
    assert math.isclose(young_interval_seconds(20, 86_400), 1858.93, rel_tol=1e-4)


@given(st.floats(0.01, 1e3), st.floats(1e3, 1e7))
def test_daly_close_to_young_and_near_optimal(stall, mtbf):
    assume(mtbf >= 100 * stall)  # the regime both models are derived for (C << M)
    daly, young = daly_interval_seconds(stall, mtbf), young_interval_seconds(stall, mtbf)
    assert 0.9 * young <= daly <= 1.2 * young
    best = expected_waste_fraction(young, stall, mtbf)
    assert expected_waste_fraction(daly, stall, mtbf) <= best * 1.05


def test_auto_policy_records_inputs_and_uses_measured_stall():
    spec = CheckpointIntervalSpec(policy="auto", mtbf_seconds=3600)
    policy = IntervalPolicy(spec, assumed_stall_seconds=10)
    assumed = policy.choice()
    assert assumed.stall_source == "assumed" and assumed.mtbf_source == "declared"
    policy.observe_stall(2.0)
    policy.observe_mtbf(7200)
    chosen = policy.choice()
    assert chosen.stall_seconds == 2.0 and chosen.mtbf_source == "observed"
    assert math.isclose(chosen.every_seconds, daly_interval_seconds(2.0, 7200))
    policy.mark_saved(now_monotonic=0.0)
    assert not policy.due(1, now_monotonic=chosen.every_seconds - 1)
    assert policy.due(2, now_monotonic=chosen.every_seconds + 1)


entries = st.lists(
    st.tuples(st.integers(1, 10_000), st.sampled_from(list(HealthVerdict)), st.booleans()),
    min_size=1,
    max_size=30,
    unique_by=lambda e: e[0],
)


@given(entries, st.integers(1, 5), st.one_of(st.none(), st.integers(1, 50)), st.data())
def test_retention_never_drops_what_it_must_keep(items, keep_last, every, data):
    rows = [
        RetentionEntry(checkpoint_id=f"c{s}", folder=f"f{s}", step=s, health=h, suspect=x)
        for s, h, x in items
    ]
    latest = data.draw(st.sampled_from(rows))
    known_good = data.draw(st.one_of(st.none(), st.integers(0, 10_000)))
    plan = plan_retention(
        rows,
        keep_last=keep_last,
        keep_every_steps=every,
        latest_checkpoint_id=latest.checkpoint_id,
        known_good_step=known_good,
    )
    assert set(plan.keep) | set(plan.delete) == {r.folder for r in rows}
    assert not set(plan.keep) & set(plan.delete)
    assert latest.folder in plan.keep
    newest = sorted(rows, key=lambda r: r.step, reverse=True)
    assert {r.folder for r in newest[:keep_last]} <= set(plan.keep)
    healthy = [r for r in newest if r.health != HealthVerdict.UNHEALTHY and not r.suspect]
    if healthy:
        assert healthy[0].folder in plan.keep
    # The rollback target of a failed corruption check: the newest good one at or before the
    # last passing check, however many newer ones keep_last holds.
    checked = [r for r in healthy if known_good is not None and r.step <= known_good]
    if checked:
        assert checked[0].folder in plan.keep
    if every:
        assert {r.folder for r in rows if r.step % every == 0} <= set(plan.keep)
