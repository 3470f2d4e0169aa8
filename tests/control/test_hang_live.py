"""Hang attribution through the controller (issue 24): a real run (two ranks under torchrun,
gloo) whose rank 1 sits in a data read that never returns while rank 0 waits in the gradient
all-reduce. The watchdog suspects the stall, the ranks' CPU confirms it, the controller asks the
ranks for their collective dumps before stopping the group, and FAILURE_CLASSIFIED, `status`,
`logs`, the report and the diagnostics bundle name rank 1, the all-reduce and the data wait.
No retry: a restart would double the test's time (recovery after a hang is
tests/control/test_recovery.py's subject)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.control.controller import Controller
from runwright.control.summary import describe_run, run_summary
from runwright.govern.report import collect_report
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = pytest.mark.integration
SCRIPT = Path(__file__).parent / "scripts" / "stalled_data.py"


def test_a_rank_stuck_in_a_data_read_is_named_not_its_waiting_peer(tmp_path):
    spec = spec_from_mapping(
        {
            "name": "stalled-data",
            "code": {
                "entrypoint": str(SCRIPT),
                "args": ["--stall-at-step", "5"],
            },
            "training": {"global_batch_samples": 8, "steps": 6, "optimizer": {"lr": 0.01}},
            "resources": {"devices_per_node": 2},
            "checkpoint": {"interval": {"policy": "steps", "every_steps": 100}},
            "recovery": {
                "heartbeat_interval_seconds": 0.5,
                "heartbeat_timeout_seconds": 3,
                "progress_timeout_seconds": 90,
                "policies": {"no_progress": {"max_retries": 0}},
            },
        }
    )
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1)
    run, _ = controller.submit(spec, tmp_path)
    final = controller.drive(run.run_id)
    (failure,) = store.events(run.run_id, types=["FAILURE_CLASSIFIED"])
    said = failure.attributes
    assert said["failure_class"] == "no_progress" and said["rank"] == 1, said
    assert said["message"].startswith("rank 0 wait in all_reduce #"), said["message"]
    assert "(bucket 0, 36 B)" in said["message"]  # Linear(8, 1): 9 float32 gradients
    assert "rank 1 never entered it: data wait" in said["message"]
    assert "on shard 00017" in said["message"]
    attribution = said["attribution"]
    assert attribution["kind"] == "hang" and attribution["culprits"] == [1]
    assert attribution["ranks_dumped"] == [0, 1]
    bundle_event = store.events(run.run_id, types=["DIAGNOSTICS_WRITTEN"])[0]
    bundle = json.loads(Path(bundle_event.attributes["path"]).read_text())
    dumps = bundle["hang_attribution"]["dumps"]
    assert dumps["1"]["phase"]["name"] == "data_wait" and dumps["0"]["records"]
    assert final.state == "FAILED", final.state_detail
    status = describe_run(run_summary(store, run.run_id))  # what `runwright status` prints
    assert "no_progress on rank 1 at step 4: rank 0 wait in all_reduce #" in status, status
    report, _ = collect_report(store, run.run_id)  # the run report's incidents
    assert "rank 1 never entered it" in (report.incidents[0].message or "")
    shown = CliRunner().invoke(app, ["logs", run.run_id, "--root", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    assert "hang attribution: rank 0 wait in all_reduce #" in shown.output  # above the output
    # From the stall's start (the rank's own mark) to the named cause: the watchdog's
    # steady-state limit (heartbeat timeout 3 s here), its 2 s CPU confirmation, the dumps.
    started = dumps["1"]["phase"]["since_wall"]
    assert 0 < failure.time_unix_s - started < 60, failure.time_unix_s - started
    store.close()
