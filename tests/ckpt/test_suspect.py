"""Suspect checkpoints (ckpt/suspect.py): retention keeps the newest checkpoint at or before the
last passing corruption check although keep_last would drop it; a failed check marks the ones
after it SUSPECT (durably, once); the catalog lists the reason and restore skips them."""

import json

from ckpt_helpers import make_state, params, same_params
from typer.testing import CliRunner

from runwright.ckpt import Checkpointer, HealthVerdict, MemorySink, restore_candidates, scan
from runwright.ckpt.storage import CheckpointStorage
from runwright.cli.main import app
from runwright.spec.policies import CheckpointSpec


def test_a_failed_check_suspects_the_newer_checkpoints_and_restore_goes_back(tmp_path):
    saver = Checkpointer(str(tmp_path), policy=CheckpointSpec(keep_last=1), events=MemorySink())
    state = make_state(seed=1)
    saver.save(2, state, health=HealthVerdict.HEALTHY)
    saver.known_good_step = 4  # the corruption check passed at step 4 (runtime/integrity.py)
    saver.save(4, state, health=HealthVerdict.HEALTHY)
    good = params(state)
    state.model[0].weight.data.add_(1.0)  # what a corrupted replica would go on to save
    saver.save(6, state, health=HealthVerdict.HEALTHY)
    saver.save(8, state, health=HealthVerdict.HEALTHY)
    storage = CheckpointStorage(str(tmp_path))
    assert sorted(c.record.step for c in scan(storage)[0]) == [4, 8]  # 4: the known-good one

    marked = saver.mark_suspect(4, "silent data corruption (replica_digest) at step 10: ...")
    assert [int(f.split("-", 1)[0]) for f in marked] == [8]
    assert saver.mark_suspect(4, "again") == []  # once suspect, left as it is
    by_step = {c.record.step: c for c in scan(storage)[0]}
    assert by_step[8].suspect.startswith("silent data corruption (replica_digest)")
    assert by_step[4].suspect is None
    assert [c.record.step for c in restore_candidates(storage, saver.fence)] == [4]
    listed = CliRunner().invoke(app, ["ckpt", "list", str(tmp_path), "--json"])
    rows = {row["step"]: row for row in json.loads(listed.output)["committed"]}
    assert rows[8]["suspect"].startswith("silent data corruption") and rows[4]["suspect"] is None
    table = CliRunner().invoke(app, ["ckpt", "list", str(tmp_path)])
    assert "suspect" in table.output

    fresh = make_state(seed=2)
    restored = Checkpointer(str(tmp_path), policy=CheckpointSpec(), events=MemorySink())
    assert restored.restore(fresh).step == 4
    assert same_params(fresh, good)
