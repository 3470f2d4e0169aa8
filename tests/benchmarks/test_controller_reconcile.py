"""The controller benchmark's arithmetic: percentiles, RUNNING spans and their overlap."""

import importlib.util
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
PATH = BENCHMARKS / "controller_reconcile.py"
sys.path.insert(0, str(BENCHMARKS))  # what `python benchmarks/x.py` puts first: its helpers
spec = importlib.util.spec_from_file_location("controller_reconcile", PATH)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100: the q-th percentile is q
    assert bench.percentile(values, 50) == 50.0
    assert bench.percentile(values, 90) == 90.0
    assert bench.percentile(values, 99) == 99.0
    assert bench.percentile(values, 100) == 100.0
    assert bench.percentile([7.0], 99) == 7.0
    assert bench.percentile(values, 7) == 7.0  # 0.07 * 100 is 7.000000000000001
    assert bench.percentile([1.0, 2.0], 50) == 1.0  # rank ceil(1.0) = 1, not rounded half up


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=200), st.integers(1, 100))
def test_percentile_has_at_least_q_percent_at_or_below_it(values: list[float], q: int) -> None:
    found = bench.percentile(values, q)
    at_or_below = sum(1 for v in values if v <= found)
    below = sum(1 for v in values if v < found)
    assert at_or_below * 100 >= q * len(values)
    assert below * 100 < q * len(values)


def test_running_intervals_close_at_the_next_change_or_the_end() -> None:
    changes = [(1.0, "QUEUED"), (2.0, "STARTING"), (3.0, "RUNNING"), (9.0, "SUCCEEDED")]
    assert bench.running_intervals(changes, 20.0) == [(3.0, 9.0)]
    recovered = [(3.0, "RUNNING"), (5.0, "RECOVERING"), (6.0, "RUNNING")]
    assert bench.running_intervals(recovered, 10.0) == [(3.0, 5.0), (6.0, 10.0)]


def test_peak_overlap_does_not_count_touching_spans() -> None:
    assert bench.peak_overlap([]) == 0
    assert bench.peak_overlap([(0.0, 2.0), (2.0, 4.0)]) == 1
    assert bench.peak_overlap([(0.0, 3.0), (1.0, 4.0), (2.0, 5.0), (4.5, 6.0)]) == 3


spans = st.lists(
    st.tuples(st.integers(0, 50), st.integers(1, 20)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=30,
)


@given(spans)
def test_peak_overlap_is_the_most_spans_open_at_any_instant(found: list[tuple[int, int]]) -> None:
    # Spans have integer ends, so sampling every half-unit sees every distinct overlap.
    instants = [x / 2 for x in range(0, 2 * 71)]
    expected = max((bench.running_at(found, t) for t in instants), default=0)
    assert bench.peak_overlap(found) == expected
