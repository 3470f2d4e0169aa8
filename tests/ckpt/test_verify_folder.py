"""`runwright ckpt verify|inspect FOLDER` on one checkpoint's own folder, as their help says:
the checkpoint is checked in its root (it used to be read as an empty root: "0/0 bytes", and
before that exit 0 even with a corrupt shard)."""

import torch
from typer.testing import CliRunner

from runwright.ckpt import Checkpointer, MemorySink, TrainState
from runwright.cli.main import app
from runwright.spec.policies import CheckpointSpec


def _saved(tmp_path):
    ckpt = Checkpointer(str(tmp_path / "root"), policy=CheckpointSpec(), events=MemorySink())
    torch.manual_seed(0)
    result = ckpt.save(3, TrainState(model=torch.nn.Linear(32, 32)))
    ckpt.close()
    return tmp_path / "root" / result.folder


def test_one_folder_verifies_and_a_flipped_byte_fails_it(tmp_path):
    folder = _saved(tmp_path)
    runner = CliRunner()
    ok = runner.invoke(app, ["ckpt", "verify", str(folder), "--json"])
    assert ok.exit_code == 0, ok.output
    assert '"ok": true' in ok.output and "__0_0.distcp" not in ok.output.split('"problems"')[0]
    inspected = runner.invoke(app, ["ckpt", "inspect", str(folder)])
    assert inspected.exit_code == 0 and "step 3" in inspected.output

    shard = next(folder.glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 1
    shard.write_bytes(bytes(data))
    bad = runner.invoke(app, ["ckpt", "verify", str(folder)])
    assert bad.exit_code == 1, bad.output
    assert shard.name in bad.output and "checksum mismatch" in bad.output
