"""Lineage queries (issue 17) on a real store fed through the controller's real ingest: the
workers' DATA_STAGE_READY reports (channel files) record each run's dataset once, and
`runwright lineage dataset` finds every run that used a dataset with every checkpoint it wrote,
by id, prefix, folder or name; `runwright lineage checkpoint` traces a checkpoint to its run,
datasets, tokenizer and parents across a restore."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.control.ingest import Ingestor
from runwright.data import build_dataset, load_recipe
from runwright.govern.lineage import LineageError, checkpoint_trace, dataset_lineage
from runwright.layout import run_paths
from runwright.runtime import ChannelWriter
from runwright.store import Store

REPO = Path(__file__).parents[2]
runner = CliRunner()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("lineage-data")
    return build_dataset(load_recipe(REPO / "examples" / "data" / "tiny.yaml"), root)


def run_with(store: Store, root: Path, run_id: str, dataset_id: str, generations=(1,)) -> None:
    """A run whose ranks report `dataset_id` in each generation, ingested by the controller's
    Ingestor (the real path: channel files -> store)."""
    store.create_run(
        run_id=run_id, name=run_id, spec={"name": run_id, "code": {"ref": "abc123"}},
        spec_hash="h" * 64, plan={}, workdir=str(root), root=str(root), state="RUNNING",
    )  # fmt: skip
    for generation in generations:
        store.transition(run_id, "RUNNING", allowed_from=["RUNNING"], bump_generation=True)
        for rank in (0, 1):
            writer = ChannelWriter(run_paths(root, run_id).channel, generation, rank, False)
            writer.send(
                "DATA_STAGE_READY",
                attributes={"dataset_id": dataset_id, "tokenizer_hash": "t" * 64},
            )
            writer.close()
        Ingestor(store, store.get_run(run_id)).poll()


def test_every_run_that_used_a_dataset_is_found_with_its_checkpoints(tiny, tmp_path):
    store = Store.open(tmp_path)
    used = tiny.manifest.dataset_id
    store.datasets.register(
        dataset_id=used, name="tiny", path=str(tiny.folder), manifest={"tokenizer": {}}
    )
    run_with(store, tmp_path, "run-a", used, generations=(1, 2))
    run_with(store, tmp_path, "run-b", used)
    run_with(store, tmp_path, "run-c", "f" * 64)
    for step in (2, 4):
        store.checkpoints.record_committed(
            run_id="run-a", checkpoint_id=f"ckpt-a{step}", step=step, generation=1,
            path=f"/c/{step}", manifest_sha256="m", attributes={},
        )  # fmt: skip
    store.checkpoints.mark_deleted("run-a", "/c/2")
    for given in (used, used[:10], str(tiny.folder), "tiny"):
        found = dataset_lineage(store, given)
        assert found.dataset_id == used and found.name == "tiny"
        assert [r.run_id for r in found.runs] == ["run-a", "run-b"]
    (a, b) = dataset_lineage(store, used).runs
    assert [(c.checkpoint_id, c.status) for c in a.checkpoints] == [
        ("ckpt-a2", "DELETED"), ("ckpt-a4", "COMMITTED"),
    ]  # fmt: skip
    assert a.first_generation == 1 and a.tokenizer_hash == "t" * 64 and b.checkpoints == []
    with pytest.raises(LineageError, match="no dataset 'zzz'"):
        dataset_lineage(store, "zzz")
    out = runner.invoke(app, ["lineage", "dataset", used[:10], "--root", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    assert [r["run_id"] for r in json.loads(out.output)["runs"]] == ["run-a", "run-b"]
    table = runner.invoke(app, ["lineage", "dataset", "tiny", "--root", str(tmp_path)])
    assert table.exit_code == 0 and "run-a" in table.output and "1 kept" in table.output
    store.close()


def test_a_checkpoint_is_traced_to_its_run_data_and_parents_across_a_restore(tmp_path):
    store = Store.open(tmp_path)
    run_with(store, tmp_path, "run-r", "d" * 64, generations=(1, 2))
    for step, generation in ((2, 1), (4, 1), (6, 2)):
        store.checkpoints.record_committed(
            run_id="run-r", checkpoint_id=f"ckpt-{step}", step=step, generation=generation,
            path=f"/c/{step}", manifest_sha256="m", attributes={},
        )  # fmt: skip
    trace = checkpoint_trace(store, "ckpt-6")
    assert (trace.run_id, trace.step, trace.generation) == ("run-r", 6, 2)
    assert trace.parents == ["ckpt-4", "ckpt-2"]
    assert [d.dataset_id for d in trace.datasets] == ["d" * 64]
    assert trace.code.ref == "abc123" and trace.code.source == "spec.code.ref"
    with pytest.raises(LineageError, match="names several checkpoints"):
        checkpoint_trace(store, "ckpt-")
    shown = runner.invoke(app, ["lineage", "checkpoint", "ckpt-6", "--root", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    assert "parents: ckpt-4 <- ckpt-2" in shown.output and "d" * 16 in shown.output
    missing = runner.invoke(app, ["lineage", "checkpoint", "nope", "--root", str(tmp_path)])
    assert missing.exit_code == 2 and "no checkpoint 'nope'" in missing.output
    store.close()
