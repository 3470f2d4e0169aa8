"""A sick run end to end (issue 24), under the controller, with the reference trainer on one gloo
rank: one run, two generations, several mechanisms.

Generation 1's loss is NaN at step 5 (--nan-at-step, first generation only). The NaN guard trips
and the rank captures the step (no sample text); `recovery.policies.nan_inf.max_retries: 0` and
`recovery.on_exhausted: pause` make the failure past its retry limit, so the run PAUSES with its
checkpoints held from retention, an alert and a diagnostics bundle instead of failing. Then the
newest checkpoint (step 4) is damaged from outside so that its checksums pass but its state does
not reproduce the probe reading recorded at its save (drill/probe_damage.py); `resume` queues the
run, generation 2's restore rejects step 4 on its probe check before the first step, falls back
to step 2, and the run ends SUCCEEDED.
"""

import json

import pytest
from runwright_tests_tiny import REPO, TINY_DATA, tiny_gpt

from runwright.ckpt import scan
from runwright.ckpt.hold import read_hold
from runwright.ckpt.storage import CheckpointStorage
from runwright.control.controller import Controller
from runwright.control.pause import request_resume
from runwright.data import build_dataset
from runwright.drill.probe_damage import falsify_probe_record
from runwright.events import EventType
from runwright.govern.report import collect_report
from runwright.layout import checkpoint_root, run_paths
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = pytest.mark.integration


def sample_texts() -> list[str]:
    """Lines of the tiny dataset's text sources: none may appear in a capture."""
    lines = []
    for path in sorted((REPO / "examples" / "data" / "tiny").glob("*.txt")):
        lines += [ln.strip() for ln in path.read_text(errors="ignore").splitlines()]
    return [ln for ln in lines if len(ln) >= 12]


# Two generations of the trainer under the controller: 16 s on a quiet machine, ~90 s on 2 busy
# cores. In the default suite: it is the issue's end-to-end case (retries exhausted -> paused with
# its scene; a restore whose probe fails -> the previous checkpoint). Each mechanism also has a
# test without processes: test_escalation.py, tests/ckpt/test_restore_probe.py,
# tests/runtime/test_guard_capture.py.
def test_an_exhausted_nan_pauses_with_its_scene_and_a_bad_restore_falls_back(tmp_path):
    root = tmp_path
    dataset = build_dataset(TINY_DATA, root / "data")
    store = Store.open(root)
    try:
        data = tiny_gpt(dataset, steps=6, name="sick", devices=1, every_steps=2)
        data["checkpoint"]["keep_last"] = 2  # steps 2 and 4 (the hold's effect: test_restore_probe)
        data["recovery"] = {
            **data.get("recovery", {}),
            "on_exhausted": "pause",
            "policies": {"nan_inf": {"max_retries": 0}},
        }
        data["code"]["args"] = ["--nan-at-step", "5"]
        controller = Controller(store, root, poll_seconds=0.1)
        run, _ = controller.submit(spec_from_mapping(data), root)
        run = controller.drive(run.run_id)

        # -- escalated: PAUSED, not FAILED ----------------------------------------------------
        assert run.state == "PAUSED", run.state_detail
        assert "escalated" in (run.state_detail or "") and "runwright resume" in run.state_detail
        (escalated,) = store.events(run.run_id, types=[EventType.ESCALATED])
        assert escalated.attributes["failure_class"] == "nan_inf"
        assert "retries exhausted" in escalated.attributes["reason"]
        alerts = store.events(run.run_id, types=[EventType.ALERT_FIRED])
        (alert,) = [a for a in alerts if a.attributes["rule"] == "escalation"]
        assert alert.attributes["severity"] == "critical" and alert.attributes["owner"]

        # -- the scene: held checkpoints, the bundle, the guard's capture ---------------------
        paths = run_paths(root, run.run_id)
        storage = CheckpointStorage(checkpoint_root(paths, None))
        committed = {c.record.step: c for c in scan(storage)[0]}
        assert sorted(committed) == [2, 4]
        hold = read_hold(storage)
        assert hold is not None and len(hold.checkpoint_ids) == 2
        bundle = json.loads(paths.diagnostics_bundle(1).read_text())
        assert bundle["escalation"]["held_checkpoints"] == hold.checkpoint_ids
        assert bundle["topology"]["world_size"] == 1 and bundle["last_healthy_step"] == 4
        assert bundle["spec"] and bundle["classification"]["failure_class"] == "nan_inf"
        (capture,) = [f for f in bundle["rank_files"] if f["name"].startswith("guard-step")]
        content = capture["content"]
        assert content["guard"] == "nan_inf" and content["step"] == 5 and content["rank"] == 0
        assert content["figures"]["loss"] == "nan" and content["precision"]
        assert content["versions"]["torch"] and content["learning_rate"] is not None
        rows = content["inputs"]["rows"]
        assert rows and all(set(r) == {"sha256", "length", "loss_tokens"} for r in rows)
        assert content["inputs"]["sources"]["samples"] == [16, 20]  # 4 samples a step
        layer = next(iter(content["parameters"].values()))
        assert layer["weight"]["norm"] > 0 and layer["grad"] is not None
        raw = paths.guard_capture(1, 5, 0).read_text()
        assert len(raw) < 1 << 20 and not [t for t in sample_texts() if t in raw]

        # -- damage step 4 so only the probe sees it; resume ------------------------------------
        falsify_probe_record(root / "runs" / run.run_id / "checkpoints", committed[4].folder)
        assert request_resume(store, run.run_id).outcome == "APPLIED"
        assert read_hold(storage) is None  # resuming is the person's word
        run = controller.drive(run.run_id)
        assert run.state == "SUCCEEDED", run.state_detail
        (fallback,) = store.events(run.run_id, types=[EventType.RESTORE_FALLBACK])
        assert fallback.generation == 2 and fallback.step == 4
        assert fallback.attributes["reason"].startswith("probe check: probe loss")
        (validated,) = store.events(run.run_id, types=[EventType.RESTORE_VALIDATED])
        assert validated.generation == 2 and validated.step == 2
        assert validated.attributes["relative_difference"] < 1e-6
        restored = store.events(run.run_id, types=[EventType.RESTORED])
        assert [(e.generation, e.step) for e in restored] == [(1, 0), (2, 2)]
        (incident,) = collect_report(store, run.run_id)[0].incidents
        assert incident.escalated and "retries exhausted" in incident.escalated
        assert incident.guard_captures == (str(paths.guard_capture(1, 5, 0)),)
        assert incident.restore_fallbacks and "probe check" in incident.restore_fallbacks[0]
    finally:
        store.close()
