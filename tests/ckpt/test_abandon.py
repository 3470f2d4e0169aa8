"""Rolling a run's checkpoints back (ckpt/abandon.py): the newer ones are kept and marked
ABANDONED once, the latest pointer names the chosen one again through the fence, restore goes
back to it and retention neither counts nor deletes an abandoned checkpoint; a checkpoint that
is not there, ambiguous or not restorable is refused in words."""

import pytest
from ckpt_helpers import make_state, params, same_params

from runwright.ckpt import Checkpointer, HealthVerdict, MemorySink, restore_candidates, scan
from runwright.ckpt.abandon import find_committed, roll_back_to
from runwright.ckpt.errors import CheckpointError
from runwright.ckpt.fence import PublishOutcome
from runwright.ckpt.gc import find_residue
from runwright.ckpt.storage import CheckpointStorage
from runwright.spec.policies import CheckpointSpec


def test_a_rollback_abandons_the_newer_checkpoints_and_restore_goes_back(tmp_path):
    saver = Checkpointer(str(tmp_path), policy=CheckpointSpec(keep_last=2), events=MemorySink())
    state = make_state(seed=1)
    saver.save(2, state, health=HealthVerdict.HEALTHY)
    saver.save(4, state, health=HealthVerdict.HEALTHY)
    chosen = params(state)
    state.model[0].weight.data.add_(1.0)
    saver.save(6, state, health=HealthVerdict.HEALTHY)  # keep_last 2: step 2 goes
    storage = CheckpointStorage(str(tmp_path))
    with pytest.raises(CheckpointError, match=r"no committed checkpoint '3'.*step 6"):
        find_committed(storage, "3")
    with pytest.raises(CheckpointError, match="no committed checkpoint 'abc'"):
        find_committed(storage, "abc")  # too short for an id prefix

    rewound = roll_back_to(storage, saver.fence, "4", "abandoned by a rollback: bad batch")
    assert rewound.step == 4 and rewound.publish is PublishOutcome.APPLIED
    assert [f.split("-", 1)[0] for f in rewound.abandoned] == ["0000000006"]
    assert saver.fence.latest().step == 4
    by_step = {c.record.step: c for c in scan(storage)[0]}
    assert by_step[6].abandoned == "abandoned by a rollback: bad batch"
    assert [c.record.step for c in restore_candidates(storage, saver.fence)] == [4]
    with pytest.raises(CheckpointError, match="cannot be restored: abandoned by a rollback"):
        find_committed(storage, by_step[6].record.checkpoint_id)
    # GC takes a fenced generation's committed folder beyond the pointer for a publish that
    # never happened; an abandoned one was published, and stays.
    residue, _ = find_residue(
        storage, current_generation=saver.generation + 1, min_age_seconds=0, latest_step=4
    )
    assert not [r for r in residue if r.path.startswith(by_step[6].folder)], residue
    again = roll_back_to(storage, saver.fence, by_step[4].record.checkpoint_id, "again")
    assert again.abandoned == () and again.publish is PublishOutcome.ALREADY_APPLIED

    # Training goes on from step 4: retention keeps the abandoned checkpoint (evidence) out of
    # its count, and restore never returns to it.
    fresh = make_state(seed=2)
    assert saver.restore(fresh).step == 4 and same_params(fresh, chosen)
    for step in (5, 6, 7):
        saver.save(step, fresh, health=HealthVerdict.HEALTHY)
    steps = sorted((c.record.step, c.abandoned is not None) for c in scan(storage)[0])
    assert steps == [(6, False), (6, True), (7, False)], steps
    assert [c.record.step for c in restore_candidates(storage, saver.fence)] == [7, 6]
