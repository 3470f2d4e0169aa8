"""Property tests of the pure, versioned algorithms: shuffle, mixture, packing."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runwright.data import MIXTURES, PACKERS, SHUFFLES, UnknownAlgorithmError, pack_documents
from runwright.data.read.mixture import edf_loop, mixture_sequence

permute = SHUFFLES.get("permute-v1")


@given(n=st.integers(1, 5000), key=st.integers(0, 2**63))
@settings(max_examples=60, deadline=None)
def test_permutation_is_a_bijection(n: int, key: int) -> None:
    out = permute.permute(np.arange(n), n, key)
    assert out.min() >= 0 and out.max() < n
    assert np.array_equal(np.sort(out), np.arange(n))


@given(n=st.integers(2, 10_000), key=st.integers(0, 2**63), data=st.data())
@settings(max_examples=40, deadline=None)
def test_permutation_is_random_access(n: int, key: int, data: st.DataObject) -> None:
    # Sample k computed alone equals sample k of the materialised permutation.
    k = data.draw(st.integers(0, n - 1))
    whole = permute.permute(np.arange(n), n, key)
    assert permute.permute(np.array([k]), n, key)[0] == whole[k]


def test_permutation_depends_on_key() -> None:
    a = permute.permute(np.arange(1000), 1000, 1)
    b = permute.permute(np.arange(1000), 1000, 2)
    assert not np.array_equal(a, b)
    assert not np.array_equal(a, np.arange(1000))


@given(
    weights=st.lists(st.floats(0.01, 100.0), min_size=1, max_size=8),
    draws=st.integers(1, 600),
)
@settings(max_examples=120, deadline=None)
def test_quota_prefix_error_is_within_one_sample(weights: list[float], draws: int) -> None:
    seq = mixture_sequence("quota-v1", weights, draws)
    shares = np.asarray(weights) / sum(weights)
    counts = np.zeros(len(weights))
    for k, i in enumerate(seq, start=1):
        counts[i] += 1
        assert np.max(np.abs(counts - shares * k)) <= 1.0 + 1e-9


def test_categorical_matches_expected_proportions() -> None:
    seq = np.asarray(mixture_sequence("categorical-v1", [3.0, 1.0], 20_000, key=7))
    # Binomial(20000, 0.25): sd = sqrt(20000 * 0.25 * 0.75) = 61 draws; allow 5 sd.
    assert abs(int((seq == 1).sum()) - 5000) < 5 * 61


def test_mixtures_are_deterministic_and_keyed() -> None:
    a = mixture_sequence("categorical-v1", [1.0, 1.0], 200, key=1)
    assert a == mixture_sequence("categorical-v1", [1.0, 1.0], 200, key=1)
    assert a != mixture_sequence("categorical-v1", [1.0, 1.0], 200, key=2)


def test_unknown_algorithm_names_the_known_ones() -> None:
    with pytest.raises(UnknownAlgorithmError, match="quota-v1"):
        MIXTURES.get("quota-v9")
    with pytest.raises(UnknownAlgorithmError, match="concat-v1"):
        PACKERS.get("concat-v2")


documents = st.lists(
    st.lists(st.integers(1, 999), min_size=0, max_size=60).map(np.asarray), min_size=1, max_size=40
)


@given(docs=documents, seq_len=st.integers(1, 64))
@settings(max_examples=120, deadline=None)
def test_concat_conserves_tokens(docs: list[np.ndarray], seq_len: int) -> None:
    eod = 0
    stream = np.concatenate([np.append(d.astype(np.int64), eod) for d in docs])
    out = pack_documents(docs, seq_len, "concat-v1", eod)
    rows = out["tokens"].shape[0]
    assert rows == (0 if stream.size < seq_len + 1 else (stream.size - seq_len - 1) // seq_len + 1)
    # Inputs are the stream in order, labels the stream shifted by one: nothing lost or doubled.
    assert np.array_equal(out["tokens"].reshape(-1), stream[: rows * seq_len])
    assert np.array_equal(out["labels"].reshape(-1), stream[1 : rows * seq_len + 1])
    assert out["padded_tokens"] == 0
    assert out["device_tokens"] == rows * seq_len
    assert out["loss_tokens"] == int(out["loss_mask"].sum())
    # Positions restart at every document: position 0 exactly where the segment changes.
    seg, pos = out["segment_ids"], out["position_ids"]
    starts = np.ones_like(seg, dtype=bool)
    starts[:, 1:] = seg[:, 1:] != seg[:, :-1]
    assert np.array_equal(pos == 0, starts)
    # A label is masked only where it belongs to the next document.
    crosses = out["tokens"] == eod
    assert np.array_equal(out["loss_mask"] == 0, crosses)


@given(docs=documents, seq_len=st.integers(1, 64))
@settings(max_examples=120, deadline=None)
def test_pad_keeps_one_document_per_row(docs: list[np.ndarray], seq_len: int) -> None:
    out = pack_documents(docs, seq_len, "pad-v1", 0)
    assert out["tokens"].shape == (len(docs), seq_len)
    kept = [min(d.size + 1, seq_len + 1) for d in docs]
    # Each row trains on its document's kept tokens (the EOD included), minus the first input.
    assert out["loss_tokens"] == sum(k - 1 for k in kept)
    assert out["padded_tokens"] == sum(seq_len - min(k, seq_len) for k in kept)
    assert set(np.unique(out["segment_ids"])) <= {0, 1}
    for r, d in enumerate(docs):
        n = min(d.size, seq_len)
        assert np.array_equal(out["tokens"][r, :n], d[:n])


@given(
    weights=st.lists(st.floats(0.01, 100.0), min_size=1, max_size=6),
    before=st.integers(0, 2000),
    draws=st.integers(1, 3000),
)
@settings(max_examples=60, deadline=None)
def test_compiled_quota_equals_the_one_draw_definition(
    weights: list[float], before: int, draws: int
) -> None:
    total = sum(weights)
    shares = [w / total for w in weights]
    units = [0] * len(weights)
    edf_loop(shares, units, before, None)
    loop_units, fast_units = list(units), list(units)
    expected = edf_loop(shares, loop_units, draws, None)
    fast = MIXTURES.get("quota-v1").choose_block(shares, fast_units, 0, 0, draws, None)
    assert fast.tolist() == expected and fast_units == loop_units


@given(
    weights=st.lists(st.floats(0.01, 100.0), min_size=1, max_size=5),
    draws=st.integers(1, 400),
    seed=st.integers(0, 2**32 - 1),
    start=st.lists(st.integers(0, 5000), min_size=5, max_size=5),
)
@settings(max_examples=60, deadline=None)
def test_compiled_quota_equals_the_definition_in_token_units(
    weights: list[float], draws: int, seed: int, start: list[int]
) -> None:
    # Token units: each draw adds its document's units, so sources can go unreleased and the
    # largest-deficit fallback is exercised too.
    total = sum(weights)
    shares = [w / total for w in weights]
    rng = np.random.default_rng(seed)
    ahead = [rng.integers(1, 900, size=draws) for _ in weights]
    loop_units = start[: len(weights)]
    fast_units = list(loop_units)
    expected = edf_loop(shares, loop_units, draws, ahead)
    fast = MIXTURES.get("quota-v1").choose_block(shares, fast_units, 0, 0, draws, ahead)
    assert fast.tolist() == expected and fast_units == loop_units


def test_categorical_counts_units_of_the_documents_it_took() -> None:
    ahead = [np.arange(1, 101), np.arange(1001, 1101)]
    units = [0, 0]
    picks = MIXTURES.get("categorical-v1").choose_block([0.5, 0.5], units, 0, 3, 100, ahead)
    c0 = int((picks == 0).sum())
    assert units == [int(ahead[0][:c0].sum()), int(ahead[1][: 100 - c0].sum())]


def _reference_permute_v1(k: int, n: int, key: int) -> int:
    """permute-v1 for one position with Python integers: the definition, one step at a time."""
    mask64 = (1 << 64) - 1

    def mix(z: int) -> int:
        z = (z + 0x9E3779B97F4A7C15) & mask64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask64
        return z ^ (z >> 31)

    half = max(1, ((n - 1).bit_length() + 1) // 2)
    mask = (1 << half) - 1
    round_keys = [mix((key + r) & mask64) for r in range(4)]
    while True:
        left, right = k >> half, k & mask
        for rk in round_keys:
            left, right = right, left ^ (mix(right ^ rk) & mask)
        k = (left << half) | right
        if k < n:
            return k


@pytest.mark.parametrize("n", [1, 2, 3, 17, 1000, 6067, 8361])
@pytest.mark.parametrize("key", [0, 0x1234_5678_9ABC_DEF0, 2**64 - 2])
def test_permutation_matches_the_per_position_definition(n: int, key: int) -> None:
    # 2**64 - 2: the round keys' key + r wraps around 2**64.
    got = permute.permute(np.arange(n), n, key).tolist()
    want = [0] * n if n == 1 else [_reference_permute_v1(k, n, key) for k in range(n)]
    assert got == want


def test_permutation_of_huge_ranges_matches_the_definition() -> None:
    # Near 2**62 the halves are 31 bits wide; positions are sampled, not enumerated.
    n = (1 << 62) - 12345
    positions = np.array([0, 1, n // 3, n - 1], dtype=np.int64)
    got = permute.permute(positions, n, 99).tolist()
    assert got == [_reference_permute_v1(int(k), n, 99) for k in positions]


def test_permutation_refuses_positions_outside_the_range() -> None:
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        permute.permute(np.array([3, 10]), 10, 1)
    with pytest.raises(ValueError, match="empty"):
        permute.permute(np.array([0]), 0, 1)
