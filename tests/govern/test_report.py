"""report.json of the fixture run (tests/govern/conftest.py), every figure computed by hand, and
report.html's data and self-containment (its drawing: tests/govern/test_screenshot.py)."""

import json
import re

import pytest

from runwright.govern import build_report
from runwright.plan import model_flops_per_token
from runwright.spec import ModelSpec

from .conftest import RUN_ID


@pytest.fixture
def report(store, tmp_path):
    paths = build_report(store, RUN_ID, tmp_path / "out")
    assert paths.json_path.is_file() and paths.html_path.is_file()
    return json.loads(paths.json_path.read_text())


def test_cost_split_by_hand(report):
    split = report["cost_split"]
    # productive: gen 1 steps 1,3,4 (2 s each) + step 2 less its 0.5 s stall = 7.5 s;
    #             gen 2 steps 5,6 = 4 s                                       -> 11.5 s
    # checkpoint: 0.5 s inside step 2; replay: gen 2 steps 3,4 = 4 s
    # recovery:   detection 1013 -> first healthy step after restore starts 1016 = 3 s
    #             (1 s of it is the 1014-1015 gap between attempts, which holds no devices)
    # idle:       1000-1002 launch, 1010-1013 crash to detection, 1024-1025 tail = 6 s
    assert split["wall_seconds"] == pytest.approx(
        {"productive": 11.5, "checkpoint": 0.5, "replay": 4.0, "recovery": 3.0, "idle": 6.0}
    )
    # x 2 devices, except the 1 s gap: recovery 2 s x 2 = 4 device-s
    assert split["device_seconds"] == pytest.approx(
        {"productive": 23.0, "checkpoint": 1.0, "replay": 8.0, "recovery": 4.0, "idle": 12.0}
    )
    # allocation: 2 x (1014 - 1000) + 2 x (1025 - 1015) = 48 device-s, all accounted
    assert sum(split["device_seconds"].values()) == pytest.approx(48.0)
    # 3.6 per device-hour = 0.001 per device-second
    assert split["cost"]["productive"] == pytest.approx(0.023)
    assert report["final_metrics"]["total_cost"] == pytest.approx(0.048)


def test_final_metrics_by_hand(report):
    fm = report["final_metrics"]
    assert fm["ettr"] == pytest.approx(11.5 / 25.0)  # productive / (1025 - 1000)
    assert fm["steps"] == 6 and fm["step_executions"] == 8 and fm["last_step"] == 6
    # six accepted steps x 2 ranks x (256 device, 200 loss, 16 padded) tokens
    assert (fm["device_tokens"], fm["loss_tokens"], fm["padded_tokens"]) == (3072, 2400, 192)
    assert fm["replayed_tokens"] == 2 * 2 * 256
    assert fm["loss_tokens_per_second"] == pytest.approx(2400 / 25.0)
    assert fm["device_tokens_per_second"] == pytest.approx(3072 / 25.0)
    # every step: (0.2 + 0.1) s waiting in (2.0 + 1.5) rank-seconds
    assert fm["input_wait_share"] == pytest.approx(0.3 / 3.5)
    assert fm["checkpoint_exposure"] == pytest.approx(0.5 / 11.5)
    assert fm["last_loss"] == pytest.approx(5.0 - 0.5 * 6)
    # median of (2.0, 1.5) is 1.75: rank 0 at 2.0 / 1.75, rank 1 at 1.5 / 1.75
    assert fm["straggler_scores"] == pytest.approx({"0": 2.0 / 1.75, "1": 1.5 / 1.75})
    flops = model_flops_per_token(ModelSpec(n_layers=2, d_model=64, n_heads=4), 64)
    assert fm["flops_per_token"] == flops
    assert fm["mfu"] == pytest.approx(3072 * flops / (23.0 * 1e9))


def test_evidence_chain(report, store):
    assert report["code"] == {
        "ref": "0123abcd",
        "source": "spec.code.ref",
        "reason": None,
        "entrypoint": "train.py",
    }
    assert report["spec_hash_verified"] is True
    assert report["spec_hash"] == store.get_run(RUN_ID).spec_hash
    assert report["plan"]["world_size"]["value"] == 2 and report["plan"]["world_size"]["reason"]
    assert report["dataset"]["dataset_id"] == "ds-abc"
    assert report["dataset"]["tokenizer_hash"] == "tok-1"
    assert report["environment"]["packages"]["torch"]
    mixture = {m["source"]: m for m in report["mixture"]}
    assert mixture["code"]["actual_share"] == pytest.approx(0.6)
    assert mixture["code"]["deviation"] == pytest.approx(0.1)
    (ckpt,) = report["checkpoint_lineage"]
    assert (ckpt["checkpoint_id"], ckpt["step"], ckpt["status"]) == ("ck-2", 2, "COMMITTED")
    assert ckpt["parent"] is None and ckpt["stall_seconds"] == 0.5 and ckpt["bytes"] == 1000


def test_incident_and_interventions(report):
    (incident,) = report["incidents"]
    assert incident["failure_class"] == "node_lost" and incident["rank"] == 1
    assert incident["last_healthy_step"] == 4
    assert incident["detection_seconds"] == pytest.approx(3.0)  # step 4 ended 1010, seen 1013
    assert incident["restored_step"] == 2 and incident["restored_checkpoint_id"] == "ck-2"
    assert incident["lost_steps"] == 2 and incident["replayed_tokens"] == 1024
    assert incident["recovered"] is True and incident["recovery_seconds"] == 5.0
    assert incident["time_to_healthy_seconds"] == pytest.approx(3.0)
    (stale,) = report["interventions"]
    assert stale["kind"] == "stale_write_rejected" and "generation 1" in stale["detail"]


def test_html_carries_the_run_pages_chart_data_and_fetches_nothing(store, tmp_path):
    """report.html draws the dashboard's charts from the dashboard's own data (the same
    `chart_data` as the run page), with plotly.js and the charts' script inside the file."""
    from runwright.govern.dashboard import run_view
    from runwright.govern.report import collect_report

    html = build_report(store, RUN_ID, tmp_path).html_path.read_text()
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, flags=re.DOTALL)
    json_block = ' type="application/json" id="run-charts-data"'
    assert [attrs for attrs, _ in scripts] == [json_block, "", ""]
    data, plotly, charts = (body for _, body in scripts)
    assert "plotly.js v" in plotly[:200] and "window.RunCharts" in charts
    # Outside the scripts nothing names another file: no src, href, stylesheet or font.
    outside = re.sub(r"<script[^>]*>.*?</script>", "", html, flags=re.DOTALL)
    assert not re.search(r"\b(src|href)=|@import|url\(", outside)
    shown = json.loads(data)
    report, timeline = collect_report(store, RUN_ID)
    events = [e.model_dump(mode="json") for e in store.events(RUN_ID)]
    page = run_view(report.model_dump(mode="json"), timeline, events, now_unix_s=2000.0)
    for key in ("steps", "markers", "evaluations", "checkpoints", "mixture", "drift", "states"):
        assert shown[key] == page[key], key
    assert shown["cost_split"]["wall_seconds"] == page["cost_split"]["wall_seconds"]
    assert [m["label"] for m in shown["markers"]] == [
        "ckpt @2", "node_lost (rank 1)", "restored @2", "stale write rejected"
    ]  # fmt: skip


def test_chart_data_cannot_end_its_script_element():
    from runwright.govern.charts import json_script

    markup = "</script><script>alert(1)</script><!-- & \u2028"
    element = json_script("x", {"label": markup, "nan": float("nan")})
    body = element.removeprefix('<script type="application/json" id="x">').removesuffix("</script>")
    assert "<" not in body and ">" not in body and "&" not in body
    assert json.loads(body) == {"label": markup, "nan": None}


def test_inlined_scripts_cannot_end_their_element(tmp_path):
    from runwright.govern.charts import inline_script

    script = tmp_path / "s.js"
    script.write_text('const a = "</SCRIPT>", b = /<!--/;')
    assert inline_script(script) == 'const a = "\\x3C/SCRIPT>", b = /\\x3C!--/;'


def test_code_version_without_ref_says_why(store, tmp_path):
    from runwright.govern.evidence import code_version

    run = store.get_run(RUN_ID)
    version = code_version(run, {"code": {"entrypoint": "x.py"}})
    assert version.ref is None and "not on this machine" in (version.reason or "")
