"""values.py: non-tensor checkpoint values round-trip bit-exactly and are read without running
code."""

import collections
import os
import pickle
import random

import numpy as np
import pytest
import torch

from runwright.ckpt.errors import CheckpointCorruptError, CheckpointError
from runwright.ckpt.values import decode, encode_json, encode_pickle, load_pickle


class Touch:
    """A pickle that creates `path` when fully unpickled."""

    def __init__(self, path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return os.system, (f"touch '{self.path}'",)


def test_payload_runs_under_plain_pickle(tmp_path):
    """The payload the refusal tests use is live: a plain unpickle creates the file."""
    marker = tmp_path / "ran"
    pickle.loads(pickle.dumps(Touch(marker)))
    assert marker.exists()


def test_rng_states_round_trip_bit_exactly():
    random.seed(11)
    random.random()
    np.random.seed(12)
    np.random.randn(3)  # odd draws leave a cached Gaussian (has_gauss=1) in NumPy's state
    python_state, numpy_state = random.getstate(), np.random.get_state()
    assert numpy_state[3] == 1
    assert decode("rng.python", encode_pickle("rng.python", python_state)) == python_state
    back = decode("rng.numpy", encode_pickle("rng.numpy", numpy_state))
    assert back[0] == numpy_state[0] and back[2:] == numpy_state[2:]
    assert back[1].dtype == numpy_state[1].dtype and np.array_equal(back[1], numpy_state[1])
    np.random.set_state(back)
    expected = np.random.rand(4)
    np.random.set_state(numpy_state)
    assert np.array_equal(np.random.rand(4), expected)


def test_scheduler_and_scaler_states_round_trip_exactly():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.3, total_steps=10)
    optimizer.step()
    scheduler.step()
    for value in (
        scheduler.state_dict(),
        torch.amp.GradScaler("cpu").state_dict(),
        {"betas": (0.9, 0.999), "lr": 1 / 3, "nan": float("inf"), "lambdas": [None]},
        collections.OrderedDict(a=1, b={2, 3}, c=frozenset([4]), d=1 + 2j, e=b"x"),
    ):
        back = decode("scheduler", encode_pickle("scheduler", value))
        assert back == value and type(back) is type(value)


def test_json_values_decode_and_old_pickled_progress_still_reads():
    progress = {"step": 7, "counters": {"tokens_seen": 1 << 40}}
    assert decode("progress", encode_json(progress)) == progress
    old = pickle.dumps(progress, protocol=pickle.HIGHEST_PROTOCOL)
    assert decode("progress", old) == progress


def test_numpy_1_pickles_read_through_the_allow_list():
    """NumPy 1.x names its reconstructor numpy.core.multiarray._reconstruct. Protocol 3 names
    globals as newline-ended text (no frames), so the module can be renamed in place."""
    state = np.random.get_state()
    raw = pickle.dumps(state, protocol=3)
    assert b"numpy._core.multiarray" in raw
    old = raw.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    back = load_pickle(old)
    assert np.array_equal(back[1], state[1]) and back[2:] == state[2:]


@pytest.mark.parametrize("key", ["scheduler", "ranks.r0.rng.python", "progress"])
def test_a_pickle_naming_code_is_refused_before_it_runs(tmp_path, key):
    marker = tmp_path / "ran"
    raw = pickle.dumps({"state": [Touch(marker)]}, protocol=pickle.HIGHEST_PROTOCOL)
    with pytest.raises(CheckpointCorruptError, match=rf"{key}.*holds code.*posix.system"):
        decode(key, raw)
    assert not marker.exists()


def test_damaged_value_is_corrupt_not_a_crash():
    with pytest.raises(CheckpointCorruptError, match="'progress' does not decode"):
        decode("progress", b"\x80\x05truncated")


def test_a_state_restore_would_refuse_fails_the_save():
    with pytest.raises(CheckpointError, match=r"'extra\.sampler' holds a posix\.system"):
        encode_pickle("extra.sampler", {"fn": Touch("/nonexistent")})
