"""A train shard corrupted or removed while a real run trains (issue 16, seed 000): the reference
trainer on two gloo ranks under the controller, on a dataset of several shards per source.

- `skip`: the test rewrites a shard from outside at a random step. Both ranks leave it out from
  the same step (DATA_SHARD_QUARANTINED), their step reports agree on every sample range and on
  what was lost, and the report shows the loss. A rank is then killed after a checkpoint that
  holds the quarantine, and the shard restored: the restart still skips it (the cursor says so)
  and the run ends bitwise where an uninterrupted run ends whose shard was removed (the
  trainer's --damage-shard drill) before that same step.
- `fail`: the same damage fails the run with class `data`, naming the shard.
"""

import os
import random
import shutil
import signal
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from runwright_tests_tiny import tiny_gpt

from runwright.control.controller import Controller
from runwright.data import write_pretokenized
from runwright.events import EventType
from runwright.govern.report import render_report
from runwright.observe.rank_steps import per_rank
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = pytest.mark.integration

VOCAB = 300
STEPS = 12
BAD = "notes-train-00000"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """`notes` in 2 shards, `records` in 3: about half of every step's documents are notes, so
    a damaged notes shard is read again within a step or two."""
    folder = tmp_path_factory.mktemp("corrupt") / "ds"
    rng = np.random.default_rng(1)
    docs = {
        name: [rng.integers(1, VOCAB, size=int(rng.integers(10, 60))) for _ in range(count)]
        for name, count in (("notes", 24), ("records", 36))
    }
    write_pretokenized(folder, docs, vocab_size=VOCAB, eod_token_id=0, max_tokens_per_shard=450)
    assert (folder / f"{BAD}.bin").exists() and (folder / "notes-train-00001.bin").exists()
    return folder


def spec_for(folder: Path, name: str, policy: str, args: list[str]):
    dataset = SimpleNamespace(
        folder=folder, manifest=SimpleNamespace(tokenizer=SimpleNamespace(vocab_size=VOCAB))
    )
    data = tiny_gpt(dataset, steps=STEPS, name=name, every_steps=3)
    data["data"]["on_corrupt_shard"] = policy
    data["code"]["args"] = ["--step-sleep", "0.2", *args]
    data["recovery"]["policies"] = {"data": {"max_retries": 0}}
    return spec_from_mapping(data)


def overwrite(folder: Path, shard: str) -> None:
    with open(folder / f"{shard}.bin", "r+b") as fh:
        fh.write(b"\xff" * 16)  # token 65535: out of any vocabulary, were it ever read
        fh.flush()
        os.fsync(fh.fileno())


def drive(store: Store, root: Path, spec, on_event=None):
    controller = Controller(store, root, poll_seconds=0.1, on_event=on_event)
    run, _ = controller.submit(spec, root)
    return controller.drive(run.run_id)


def of_type(store, run_id, type_):
    """Events of `type_`, a step row unfolded into its ranks' reports (observe/rank_steps.py)."""
    return list(per_rank(store.events(run_id, types=[type_])))


def worker_pid(store, run_id, rank, generation):
    for e in of_type(store, run_id, EventType.WORKER_STARTED):
        if e.generation == generation and e.attributes["rank"] == rank:
            return int(e.attributes["pid"])
    raise AssertionError(f"no WORKER_STARTED for rank {rank} of generation {generation}")


def digests(store, run_id):
    (done,) = of_type(store, run_id, EventType.TRAINING_COMPLETE)
    return done.attributes["parameter_digests"]


def final_lineage(store, run_id) -> dict[int, dict[int, dict]]:
    """step -> rank -> STEP_HEALTHY attributes, each step from the last generation that ran it."""
    steps: dict[int, dict[int, tuple[int, dict]]] = {}
    for e in of_type(store, run_id, EventType.STEP_HEALTHY):
        ranks = steps.setdefault(e.step, {})
        rank = e.attributes["rank"]
        if rank not in ranks or ranks[rank][0] <= e.generation:
            ranks[rank] = (e.generation, e.attributes)
    return {s: {r: a for r, (_, a) in ranks.items()} for s, ranks in sorted(steps.items())}


def test_a_shard_damaged_mid_run_is_skipped_by_every_rank_and_after_a_restart(pristine, tmp_path):
    seed = random.randrange(1 << 30)
    damage_after = random.Random(seed).randint(2, 4)
    folder = Path(shutil.copytree(pristine, tmp_path / "ds"))
    root = tmp_path / "interrupted"
    store = Store.open(root)
    seen: dict[str, object] = {}

    def on_event(event):
        if event.generation != 1:
            return
        if event.type == EventType.STEP_HEALTHY and event.step >= damage_after and not seen:
            overwrite(folder, BAD)
            seen["damaged_after"] = event.step
        elif event.type == EventType.DATA_SHARD_QUARANTINED:
            seen["quarantined"] = event
        elif (
            event.type == EventType.CHECKPOINT_COMMITTED
            and "quarantined" in seen
            and seen["quarantined"].step <= event.step < STEPS
            and "killed" not in seen
        ):
            # The checkpoint's cursor holds the quarantine: kill a rank, restore the shard.
            os.kill(worker_pid(store, event.run_id, 1, 1), signal.SIGKILL)
            seen["killed"] = event.step
            for suffix in (".bin", ".idx"):
                shutil.copyfile(pristine / f"{BAD}{suffix}", folder / f"{BAD}{suffix}")

    run = drive(store, root, spec_for(folder, "skip-restart", "skip", []), on_event)
    why = f"seed {seed}, damage after step {damage_after}, seen {seen}"
    assert run.state == "SUCCEEDED", (why, run.state_detail)
    assert "killed" in seen and seen["killed"] < STEPS, why

    (decided,) = of_type(store, run.run_id, EventType.DATA_SHARD_QUARANTINED)
    a = decided.attributes
    assert (a["shard"], a["reason"], decided.generation) == (BAD, "corrupt", 1)
    assert a["problems"] == [f"{BAD}.bin: sha256 differs from the manifest"]
    assert seen["damaged_after"] < decided.step <= STEPS, why
    (failure,) = of_type(store, run.run_id, EventType.FAILURE_CLASSIFIED)
    assert failure.generation == 1 and failure.attributes["failure_class"] != "data"

    lineage = final_lineage(store, run.run_id)
    assert sorted(lineage) == list(range(1, STEPS + 1))
    for step, ranks in lineage.items():
        zero, one = ranks[0], ranks[1]
        assert zero["samples"] == one["samples"] == [4 * (step - 1), 4 * step], step
        assert zero.get("data_lost") == one.get("data_lost"), step
        assert (step >= decided.step) == ("data_lost" in zero), step
        assert zero["padded_tokens"] == 0 and zero["loss_tokens"] > 0  # rows stay full
    lost = lineage[STEPS][0]["data_lost"][BAD]
    assert lost["documents"] > 0 and lost["tokens"] > 0

    report, html = render_report(store, run.run_id)
    (row,) = report.data_quarantine
    assert (row.shard, row.step, row.documents_lost, row.tokens_lost) == (
        BAD,
        decided.step,
        lost["documents"],
        lost["tokens"],
    )
    assert row.in_final_lineage and "Data quarantine" in html and BAD in html

    # The same run uninterrupted, its shard removed right before the step the first one
    # quarantined it at: the same skip, bitwise the same parameters.
    clean = Path(shutil.copytree(pristine, tmp_path / "ds-clean"))
    drill = [f"--damage-shard={BAD}:remove@{decided.step}"]
    other = Store.open(tmp_path / "straight")
    straight = drive(other, tmp_path / "straight", spec_for(clean, "skip-straight", "skip", drill))
    assert straight.state == "SUCCEEDED", straight.state_detail
    (removed,) = of_type(other, straight.run_id, EventType.DATA_SHARD_QUARANTINED)
    assert (removed.step, removed.attributes["reason"]) == (decided.step, "missing")
    assert not of_type(other, straight.run_id, EventType.FAILURE_CLASSIFIED)
    assert final_lineage(other, straight.run_id)[STEPS][0]["data_lost"] == {BAD: lost}
    assert digests(store, run.run_id) == digests(other, straight.run_id), why


def test_under_fail_a_shard_damaged_mid_run_fails_the_run_as_data(pristine, tmp_path):
    damage_after = random.randint(2, 4)
    folder = Path(shutil.copytree(pristine, tmp_path / "ds"))
    done = []

    def on_event(event):
        if event.type == EventType.STEP_HEALTHY and event.step >= damage_after and not done:
            overwrite(folder, BAD)
            done.append(event.step)

    store = Store.open(tmp_path / "root")
    run = drive(store, tmp_path / "root", spec_for(folder, "fail", "fail", []), on_event)
    assert (run.state, run.terminal_reason) == ("FAILED", "FAILED_PERMANENT"), run.state_detail
    (failure,) = of_type(store, run.run_id, EventType.FAILURE_CLASSIFIED)
    assert failure.attributes["failure_class"] == "data"
    said = failure.attributes["message"] + " ".join(failure.attributes.get("error_lines") or [])
    assert f"shard {BAD} of dataset" in said and "changed while the run read it" in said, said
    assert not of_type(store, run.run_id, EventType.DATA_SHARD_QUARANTINED)
