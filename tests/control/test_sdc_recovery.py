"""Recovery from silent data corruption (issue 24) under the controller: the reference trainer on
2 gloo ranks, rank 1 flips one bit of a parameter after step 5 (--flip-bit, first generation
only); the replica check at step 8 finds it (training.integrity.every_steps 4), the run is
classified `sdc`, the suspects' host is quarantined (the next allocation excludes it; the local
executor has only this machine and grants it anyway), the restart restores the known-good step-4
checkpoint (the step-6 one is suspect), trains to the end and SUCCEEDED, with final parameters
bit for bit those of the same run without the fault; the report lists the incident. The worker
side's detection alone is tests/train/test_integrity.py (default suite)."""

import pytest
from runwright_tests_tiny import TINY_DATA, tiny_gpt

from runwright.control.controller import Controller
from runwright.data import build_dataset
from runwright.events import EventType
from runwright.govern.report import collect_report
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = pytest.mark.integration


# Three generations of 2 ranks (one the clean reference): 41 s on a quiet machine. In the default
# suite: it is the end-to-end case (a flipped bit detected, rolled back, SUCCEEDED).
def test_a_flipped_bit_rolls_back_to_the_known_good_checkpoint_and_the_run_succeeds(tmp_path):
    dataset = build_dataset(TINY_DATA, tmp_path / "data")
    data = tiny_gpt(dataset, steps=8, name="sdc", devices=2, every_steps=2)
    data["checkpoint"]["keep_last"] = 1
    data["training"]["integrity"] = {"every_steps": 4}
    data["code"]["args"] = ["--flip-bit", "blocks.0.fc.weight:1@5"]
    store = Store.open(tmp_path)
    try:
        controller = Controller(store, tmp_path, poll_seconds=0.1)
        run, _ = controller.submit(spec_from_mapping(data), tmp_path)
        run = controller.drive(run.run_id)
        assert run.state == "SUCCEEDED", run.state_detail
        clean_data = {**data, "name": "sdc-clean", "code": {**data["code"], "args": []}}
        clean, _ = controller.submit(spec_from_mapping(clean_data), tmp_path)
        clean = controller.drive(clean.run_id)
        assert clean.state == "SUCCEEDED", clean.state_detail
        (done,) = store.events(run.run_id, types=[EventType.TRAINING_COMPLETE])
        (reference,) = store.events(clean.run_id, types=[EventType.TRAINING_COMPLETE])
        assert done.attributes["parameter_digests"] == reference.attributes["parameter_digests"]

        (found,) = store.events(run.run_id, types=[EventType.SDC_DETECTED])
        assert found.step == 8 and found.attributes["known_good_step"] == 4
        (failure,) = store.events(run.run_id, types=[EventType.FAILURE_CLASSIFIED])
        assert failure.attributes["failure_class"] == "sdc"
        hosts = failure.attributes["quarantined_hosts"]
        assert hosts == found.attributes["hosts"] and hosts
        (started,) = store.events(run.run_id, types=[EventType.RECOVERY_STARTED])
        assert started.attributes["restore_at_most_step"] == 4
        assert not started.attributes.get("skip_steps")  # the batches were good, the state not
        requests = store.events(run.run_id, types=[EventType.ALLOCATION_REQUESTED])
        assert requests[-1].attributes["exclude_hosts"] == hosts  # quarantined
        restored = store.events(run.run_id, types=[EventType.RESTORED])
        assert [e.step for e in restored] == [0, 4]

        report, _ = collect_report(store, run.run_id)
        (incident,) = report.incidents
        assert incident.failure_class == "sdc" and incident.recovered
        assert "silent data corruption at step 8" in (incident.message or "")
        assert incident.restored_step == 4 and incident.replay_check == "unverified"
    finally:
        store.close()
