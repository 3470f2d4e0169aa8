"""Restore never runs code a checkpoint carries: crafted values (with a manifest whose checksums
match them, as a crafted checkpoint's would) are refused and restore falls back; checkpoints of
the earlier all-pickle format still restore bit-exactly."""

import json
import pickle
import random

import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp
from ckpt_helpers import CountingLoader, make_state, params, same_params
from test_values import Touch
from typer.testing import CliRunner

import runwright.ckpt.state as state_module
from runwright.ckpt import Checkpointer, MemorySink, NoUsableCheckpointError, RestoreMode, scan
from runwright.ckpt.storage import CheckpointStorage
from runwright.cli.main import app
from runwright.spec.policies import CheckpointSpec


def _ckpt(root) -> Checkpointer:
    return Checkpointer(str(root), policy=CheckpointSpec(), events=MemorySink())


def _crafted_save(root, monkeypatch, marker, target: str, step: int) -> None:
    """Save through the real writer with one value replaced by a payload that creates `marker`:
    `scheduler` and `rng.python` as runwright pickles, `progress` as DCP's own object entry."""
    encode_pickle, encode_json = state_module.encode_pickle, state_module.encode_json
    with monkeypatch.context() as patch:
        if target == "progress":
            patch.setattr(
                state_module,
                "encode_json",
                lambda value: Touch(marker) if "step" in value else encode_json(value),
            )
        else:
            payload = pickle.dumps(Touch(marker), protocol=pickle.HIGHEST_PROTOCOL)
            patch.setattr(
                state_module,
                "encode_pickle",
                lambda key, value: payload if key == target else encode_pickle(key, value),
            )
        _ckpt(root).save(step, make_state(seed=2, steps=step))
    assert not marker.exists()


@pytest.mark.parametrize(
    ("target", "key"),
    [("scheduler", "'scheduler'"), ("rng.python", "'ranks.r0.rng.python'"), ("progress", "")],
)
def test_crafted_value_is_refused_and_restore_falls_back(tmp_path, monkeypatch, target, key):
    marker = tmp_path / "ran"
    _ckpt(tmp_path / "c").save(1, make_state(seed=2, steps=1))
    _crafted_save(tmp_path / "c", monkeypatch, marker, target, step=2)
    fresh = make_state(seed=99, steps=0)
    restored = _ckpt(tmp_path / "c").restore(fresh)
    assert not marker.exists()
    assert restored is not None and restored.step == 1
    (fallback,) = restored.fallbacks
    assert fallback.step == 2 and "refused on load" in fallback.reason
    assert "holds code" in fallback.reason and key in fallback.reason


def test_only_a_crafted_checkpoint_fails_cleanly_and_plain_dcp_would_run_it(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    _crafted_save(tmp_path / "c", monkeypatch, marker, "progress", step=1)
    with pytest.raises(NoUsableCheckpointError, match=r"'progress' holds code"):
        _ckpt(tmp_path / "c").restore(make_state(seed=99, steps=0))
    assert not marker.exists()
    code = CliRunner().invoke(app, ["ckpt", "verify", str(tmp_path / "c"), "--json"]).exit_code
    assert code == 0 and not marker.exists()  # verify checks integrity; restore judges content
    # The payload is live: DCP's default planner unpickles object entries in full.
    (found,) = scan(CheckpointStorage(str(tmp_path / "c")))[0]
    dcp.load({"progress": b""}, checkpoint_id=found.path, no_dist=True)
    assert marker.exists()


def test_crafted_dcp_metadata_is_refused_even_unverified(tmp_path):
    marker = tmp_path / "ran"
    _ckpt(tmp_path / "c").save(1, make_state(seed=2, steps=1))
    _ckpt(tmp_path / "c").save(2, make_state(seed=2, steps=2))
    newest = max((tmp_path / "c").glob("0000000002-*"))
    metadata = newest / ".metadata"
    size = metadata.stat().st_size  # "none" still checks sizes; a pickle ignores what trails it
    metadata.write_bytes(pickle.dumps(Touch(marker)).ljust(size, b"\0"))
    restored = _ckpt(tmp_path / "c").restore(make_state(seed=99, steps=0), verify="none")
    assert not marker.exists()
    assert restored is not None and restored.step == 1
    assert "names posix.system" in restored.fallbacks[0].reason


def test_old_all_pickle_checkpoint_restores_every_stream(tmp_path, monkeypatch):
    """Checkpoints written before values.py pickled `progress` too."""
    state = make_state(seed=1, steps=2)
    random.seed(5)
    np.random.seed(6)
    np.random.randn(1)
    expected = params(state)
    with monkeypatch.context() as patch:
        patch.setattr(
            state_module,
            "encode_json",
            lambda value: (
                pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
                if "step" in value
                else json.dumps(value, sort_keys=True).encode()
            ),
        )
        _ckpt(tmp_path).save(2, state)
    (found,) = scan(CheckpointStorage(str(tmp_path)))[0]
    stored = {"progress": b""}
    dcp.load(stored, checkpoint_id=found.path, no_dist=True)
    assert stored["progress"][:1] == b"\x80"  # the old pickled form
    draws = (random.random(), float(np.random.randn()), float(torch.rand(1)))
    fresh = make_state(seed=99, steps=0)
    fresh.data_loader = CountingLoader(0)
    restored = _ckpt(tmp_path).restore(fresh)
    assert restored is not None and restored.step == 2 and restored.mode == RestoreMode.EXACT
    assert same_params(fresh, expected) and fresh.counters == state.counters
    assert fresh.scheduler.state_dict() == state.scheduler.state_dict()
    assert fresh.data_loader.position == 16 and restored.rng_restored
    assert (random.random(), float(np.random.randn()), float(torch.rand(1))) == draws
