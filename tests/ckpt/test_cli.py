"""`runwright ckpt list|inspect|verify|gc|export --json` against a real checkpoint folder."""

import json

from ckpt_helpers import make_state
from safetensors.torch import load_file
from typer.testing import CliRunner

from runwright.ckpt import Checkpointer, MemorySink
from runwright.cli.main import app
from runwright.control.controller import Controller
from runwright.layout import run_paths
from runwright.spec import spec_from_mapping
from runwright.spec.policies import CheckpointSpec
from runwright.store import Store

runner = CliRunner()


def _run(*args: str) -> tuple[int, object]:
    done = runner.invoke(app, ["ckpt", *args, "--json"])
    return done.exit_code, json.loads(done.stdout) if done.stdout.strip() else done.output


def test_ckpt_commands(tmp_path):
    root = run_paths(tmp_path, "r1").checkpoints
    state = make_state(seed=3)
    saver = Checkpointer(str(root), policy=CheckpointSpec(), events=MemorySink())
    saver.save(1, state)
    saver.save(2, state)
    (root / "staging" / "g000000-0123456789ab").mkdir(parents=True)
    code, listed = _run("list", "r1", "--root", str(tmp_path))
    assert code == 0 and [c["step"] for c in listed["committed"]] == [2, 1]
    assert listed["committed"][0]["latest"]
    code, shown = _run("inspect", str(root), "1")
    assert code == 0 and shown["manifest"]["step"] == 1
    code, report = _run("verify", str(root))
    assert (
        code == 0
        and report["ok"]
        and [r["checkpoint_id"] for r in report["checkpoints"]]
        == [c["checkpoint_id"] for c in listed["committed"]]
    )
    assert [r["path"] for r in report["residue"]] == ["staging/g000000-0123456789ab"]
    (root / "staging" / "g000000-0123456789ab" / "part").write_bytes(b"x" * 4096)
    code, report = _run("gc", str(root), "--min-age-seconds", "0", "--dry-run")
    assert code == 0 and report["dry_run"] and report["bytes_freed"] == 4096
    assert "staging/g000000-0123456789ab" in report["removed"]
    assert (root / "staging" / "g000000-0123456789ab" / "part").is_file()  # nothing removed
    code, report = _run("gc", str(root), "--min-age-seconds", "0")
    assert code == 0 and "staging/g000000-0123456789ab" in report["removed"]
    assert not report["dry_run"] and report["bytes_freed"] == 4096
    assert not (root / "staging" / "g000000-0123456789ab").exists()
    config = tmp_path / "config.json"
    config.write_text('{"d_model": 64}')
    out = tmp_path / "export"
    code, release = _run("export", str(root), "--out", str(out), "--model-config", str(config))
    assert code == 0 and release["source_step"] == 2
    weights = load_file(out / "model.safetensors")
    assert weights["0.weight"].equal(state.model.state_dict()["0.weight"])
    assert {f["name"] for f in release["files"]} == {"config.json", "model.safetensors"}
    shard = next(root.glob("0000000002-*")) / "__0_0.distcp"
    shard.write_bytes(b"x" + shard.read_bytes()[1:])
    code, report = _run("verify", str(root), "2")
    assert code == 1 and report["checkpoints"][0]["problems"][0]["file"] == "__0_0.distcp"
    code, _ = _run("export", str(root), "--out", str(root / "x"))
    assert code == 2


def test_checkpoint_commands_take_a_run_id_prefix(tmp_path):
    """`ckpt list|inspect` accept a unique prefix of a run id, as `status` does."""
    store = Store.open(tmp_path)
    spec = spec_from_mapping(
        {
            "name": "prefix",
            "code": {"entrypoint": "train.py"},
            "training": {"global_batch_samples": 8, "steps": 2, "optimizer": {"lr": 0.01}},
        }
    )
    run, _ = Controller(store, tmp_path).submit(spec, tmp_path)
    root = run_paths(tmp_path, run.run_id).checkpoints
    Checkpointer(str(root), policy=CheckpointSpec(), events=MemorySink()).save(1, make_state(1))
    prefix = run.run_id[:8]
    code, listed = _run("list", prefix, "--root", str(tmp_path))
    assert code == 0 and [c["step"] for c in listed["committed"]] == [1], listed
    code, shown = _run("inspect", prefix, "--root", str(tmp_path))
    assert code == 0 and shown["manifest"]["step"] == 1
    done = runner.invoke(app, ["ckpt", "inspect", prefix, "--root", str(tmp_path)])
    # readable: fields by name, counters as words, not a Python dict
    assert done.exit_code == 0 and "tokens_seen 512" in done.output, done.output
    assert "{" not in done.output and "stored keys" in done.output
