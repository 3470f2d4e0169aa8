"""report.json of the fixture run (tests/govern/conftest.py), every figure computed by hand."""

import json

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


def test_html_is_self_contained(store, tmp_path):
    html = build_report(store, RUN_ID, tmp_path).html_path.read_text()
    assert html.count("<svg") == 7  # loss x2, throughput, system x2, data x2
    for layer in ("Loss layer", "Throughput layer", "System layer", "Data layer"):
        assert layer in html
    assert "<script" not in html and "http://" not in html.replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )
    # the checkpoint and the incident are drawn on every chart
    assert html.count("<title>ckpt @2</title>") == 7
    assert html.count("<title>node_lost (rank 1)</title>") == 7


def test_code_version_without_ref_says_why(store, tmp_path):
    from runwright.govern.evidence import code_version

    run = store.get_run(RUN_ID)
    version = code_version(run, {"code": {"entrypoint": "x.py"}})
    assert version.ref is None and "not on this machine" in (version.reason or "")


def test_an_empty_chart_says_what_to_report(tmp_path):
    """A run whose script reported only a loss (the two-line integration) gets charts that say
    what would fill them, not empty axes."""
    from runwright.govern.layers import charts
    from runwright.govern.svg import render_chart
    from runwright.observe.timeline import build_timeline
    from runwright.store import EventRecord

    events = [
        EventRecord(seq=i + 1, event_id=f"e{i}", run_id="r", generation=1, type="STEP_HEALTHY",
                    step=i + 1, time_unix_s=float(i), attributes={"rank": 0, "loss": 1.0 / (i + 1)})
        for i in range(5)
    ]  # fmt: skip
    layers = dict(charts(build_timeline(events), 0.0))
    loss, grad = layers["Loss layer"]
    assert not loss.empty and grad.empty
    assert "no data" not in render_chart(loss, (0.0, 5.0))
    assert "no data: report it with ctx.step_healthy(step, grad_norm=...)" in render_chart(
        grad, (0.0, 5.0)
    )
    for name, group in layers.items():
        for chart in group:
            assert not chart.empty or chart.empty_hint, (name, chart.title)


def test_evaluations_are_charted_beside_the_training_loss():
    from runwright.govern.layers import charts
    from runwright.observe.timeline import build_timeline
    from runwright.store import EventRecord

    def evaluated(step: int, loss: float) -> EventRecord:
        return EventRecord(
            seq=step, event_id=f"e{step}", run_id="r", generation=1, type="EVALUATED",
            step=step, checkpoint_id=f"ck-{step}", time_unix_s=100.0 + step,
            attributes={"eval_loss": loss, "rank": 0},
        )  # fmt: skip

    timeline = build_timeline([evaluated(2, 3.5), evaluated(4, 3.1)])
    assert [(e.step, e.eval_loss, e.checkpoint_id) for e in timeline.evaluations] == [
        (2, 3.5, "ck-2"), (4, 3.1, "ck-4"),
    ]  # fmt: skip
    (loss_chart, _) = charts(timeline, 100.0)[0][1]
    assert loss_chart.title == "Training loss and eval loss"
    assert [s.name for s in loss_chart.series] == ["loss", "eval loss"]
    assert list(loss_chart.series[1].points) == [(2.0, 3.5), (4.0, 3.1)]
