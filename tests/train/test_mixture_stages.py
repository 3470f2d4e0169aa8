"""A staged mixture (issue 26, `staged-quota-v1`) under the controller with the reference trainer
on two gloo ranks: 12 steps, an `anneal` stage from step 6 on (`start_step: 5`) that drops
`notes` for `curated`, a checkpoint every 4 steps.

Two runs are killed from outside (SIGKILL to rank 1), each once: one after step 6, whose newest
checkpoint is step 4's in the first stage (the restart replays steps 5-6 across the boundary),
one after step 10, whose newest is step 8's inside `anneal` (the restart resumes inside the
stage). So that the newest checkpoint does not depend on how late the controller sees the step
on a busy machine, rank 1 of the first generation blocks at the step after (the trainer's
`--block-at-step` drill) and cannot reach the next checkpoint. Each ends bitwise where an
uninterrupted run ends, the checkpoints' cursors carry the stage, and MIXTURE_STAGE_STARTED
marks step 6 in each generation that trained it.
"""

import json
import os
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
STAGES = [
    {
        "name": "anneal",
        "start_step": 5,
        "sources": [{"name": "curated", "weight": 3}, {"name": "records", "weight": 1}],
    }
]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("stages") / "ds"
    rng = np.random.default_rng(7)
    docs = {
        name: [rng.integers(1, VOCAB, size=int(rng.integers(10, 60))) for _ in range(count)]
        for name, count in (("notes", 30), ("records", 30), ("curated", 20))
    }
    write_pretokenized(folder, docs, vocab_size=VOCAB, eod_token_id=0, max_tokens_per_shard=600)
    return folder


def spec_for(folder: Path, name: str, block_at_step: int | None = None):
    ds = SimpleNamespace(
        folder=folder, manifest=SimpleNamespace(tokenizer=SimpleNamespace(vocab_size=VOCAB))
    )
    data = tiny_gpt(ds, steps=STEPS, name=name, every_steps=4)
    data["data"]["mixture"] = {
        "algorithm": "staged-quota-v1",
        "sources": [{"name": "notes", "weight": 1}, {"name": "records", "weight": 1}],
        "stages": STAGES,
    }
    if block_at_step is not None:
        data["code"]["args"] = ["--block-at-step", str(block_at_step)]
    return spec_from_mapping(data)


def of_type(store, run_id, type_):
    return list(per_rank(store.events(run_id, types=[type_])))


def worker_pid(store, run_id, rank, generation):
    for e in of_type(store, run_id, EventType.WORKER_STARTED):
        if e.generation == generation and e.attributes["rank"] == rank:
            return int(e.attributes["pid"])
    raise AssertionError(f"no WORKER_STARTED for rank {rank} of generation {generation}")


def digests(store, run_id):
    (done,) = of_type(store, run_id, EventType.TRAINING_COMPLETE)
    return done.attributes["parameter_digests"]


def drive(root: Path, spec, on_event=None):
    store = Store.open(root)
    controller = Controller(store, root, poll_seconds=0.1, on_event=on_event)
    run, _ = controller.submit(spec, root)
    return store, controller.drive(run.run_id)


@pytest.fixture(scope="module")
def straight(dataset, tmp_path_factory):
    store, run = drive(tmp_path_factory.mktemp("straight"), spec_for(dataset, "staged-straight"))
    assert run.state == "SUCCEEDED", run.state_detail
    yield digests(store, run.run_id)
    store.close()


# Two generations of torchrun ranks (and the straight run once per module): ~20 s a case on an
# idle machine, minutes at a load of 16 on two cores; the default 300 s would fail a busy
# machine, not the product.
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("kill_after", "restored_step", "stage"),
    [(6, 4, 0), (10, 8, 1)],
    ids=["killed-across-the-boundary", "killed-inside-the-stage"],
)
def test_a_staged_run_killed_from_outside_ends_bitwise_as_an_uninterrupted_one(
    dataset, straight, tmp_path, kill_after, restored_step, stage
):
    killed: list[int] = []
    holder: dict[str, Store] = {}

    def on_event(event):
        if (
            not killed
            and event.generation == 1
            and event.type == EventType.STEP_HEALTHY
            and event.step >= kill_after
        ):
            killed.append(event.step)
            os.kill(worker_pid(holder["store"], event.run_id, 1, 1), signal.SIGKILL)

    root = tmp_path / "interrupted"
    holder["store"] = store = Store.open(root)
    controller = Controller(store, root, poll_seconds=0.1, on_event=on_event)
    spec = spec_for(dataset, "staged-interrupted", block_at_step=kill_after + 1)
    run, _ = controller.submit(spec, root)
    run = controller.drive(run.run_id)
    assert run.state == "SUCCEEDED", run.state_detail
    assert killed == [kill_after]
    restored = {(e.generation, e.step) for e in of_type(store, run.run_id, EventType.RESTORED)}
    assert restored - {(1, 0)} == {(2, restored_step)}

    cursors = {}
    for ckpt in store.checkpoints.list(run.run_id, status="COMMITTED"):
        manifest = json.loads((Path(ckpt.path) / "manifest.json").read_text())
        cursors[ckpt.step] = manifest["data_cursor"]
    assert cursors[restored_step]["stage"] == stage and cursors[12]["stage"] == 1
    # `notes` is not drawn in `anneal`: its count stays where the stage found it.
    assert cursors[12]["stage_units"]["notes"] == cursors[12]["source_draws"]["notes"] > 0

    started = of_type(store, run.run_id, EventType.MIXTURE_STAGE_STARTED)
    replayed = {1, 2} if restored_step < 6 else {1}
    assert {e.generation for e in started} == replayed and {e.step for e in started} == {6}
    assert all(e.attributes["stage"] == "anneal" for e in started)

    assert digests(store, run.run_id) == straight

    report, html = render_report(store, run.run_id)
    assert "stage anneal @6" in html
    # The report's mixture rows are the last stage's own counts against its weights.
    assert {m.source for m in report.mixture} == {"curated", "records"}
    store.close()
