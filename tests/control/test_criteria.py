"""Stop criteria (issue 17): the pure evaluator on loss histories worked by hand, and a real run
under torchrun stopped by one at a step boundary with a committed checkpoint and the reason."""

from pathlib import Path

import pytest

from runwright.control.budget import BudgetUsage
from runwright.control.controller import Controller
from runwright.control.criteria import first_met
from runwright.errors import SpecError
from runwright.govern.page import render_page
from runwright.govern.report import collect_report
from runwright.spec import spec_from_mapping
from runwright.store import Store

SCRIPT = Path(__file__).parent / "scripts" / "small_train.py"


def spec_with(*criteria, budget=None, steps=4, entrypoint="train.py", args=()):
    return spec_from_mapping(
        {
            "name": "criteria",
            "code": {"entrypoint": entrypoint, "args": list(args)},
            "training": {"global_batch_samples": 8, "steps": steps, "optimizer": {"lr": 0.01}},
            "resources": {"devices_per_node": 2},
            "checkpoint": {"interval": {"policy": "steps", "every_steps": 2}},
            "recovery": {"heartbeat_interval_seconds": 0.5, "progress_timeout_seconds": 60},
            "budget": budget or {},
            "governance": {"stop_criteria": list(criteria)},
        }
    )


def usage(tokens=0, device_hours=0.0, wall_seconds=0.0):
    return BudgetUsage(tokens=tokens, device_hours=device_hours, wall_seconds=wall_seconds)


def test_loss_above_waits_for_its_tokens_and_a_full_window():
    spec = spec_with("words are for people", {"kind": "loss_above", "loss": 2.0,
                     "after_tokens": 1000, "window_steps": 3})  # fmt: skip
    losses = {1: 3.0, 2: 2.5}
    assert first_met(spec, losses, usage(tokens=5000)) is None  # two steps: no full window
    losses[3] = 2.2  # mean of 3.0, 2.5, 2.2 = 2.567 > 2.0
    assert first_met(spec, losses, usage(tokens=999)) is None  # not trained enough yet
    met = first_met(spec, losses, usage(tokens=1000))
    assert met is not None and (met.index, met.kind) == (1, "loss_above")
    assert "averaged 2.567 over steps 1-3" in met.evidence
    losses.update({4: 1.0, 5: 1.0, 6: 1.0})
    assert first_met(spec, losses, usage(tokens=9000)) is None  # learning after all


def test_no_improvement_compares_the_last_windows_with_the_best_before():
    spec = spec_with({"kind": "no_improvement", "window_steps": 2, "windows": 2,
                      "min_delta": 0.1})  # fmt: skip
    # windows of 2 steps: means 4.0, 3.0, 2.95, 2.96: the last two are not 0.1 below 3.0.
    losses = dict(enumerate([4.0, 4.0, 3.0, 3.0, 2.95, 2.95, 2.96, 2.96], start=1))
    met = first_met(spec, losses, usage())
    assert met is not None and "earlier best 3" in met.evidence
    losses.update({9: 2.5, 10: 2.5})  # windows now 4.0, 3.0, 2.95, 2.96, 2.5: improving
    assert first_met(spec, losses, usage()) is None
    assert first_met(spec, {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 1.0}, usage()) is None  # too few


def test_no_improvement_on_the_eval_loss_takes_each_evaluation_as_a_window():
    with pytest.raises(SpecError, match="reads eval_loss, but the run never evaluates"):
        spec_with({"kind": "no_improvement", "metric": "eval_loss"})
    spec = spec_from_mapping(
        {
            **spec_with().model_dump(mode="json"),
            "training": {"global_batch_samples": 8, "steps": 4, "eval_every_steps": 10},
            "governance": {"stop_criteria": [
                {"kind": "no_improvement", "metric": "eval_loss", "windows": 2}]},
        }
    )  # fmt: skip
    training = {s: 5.0 - s / 100 for s in range(1, 41)}  # the training loss keeps falling
    evals = {10: 3.0, 20: 2.5, 30: 2.6, 40: 2.55}  # the eval loss stopped at 2.5
    met = first_met(spec, training, usage(), evals)
    assert met is not None and "eval_loss of the last 2 evaluations" in met.evidence
    assert first_met(spec, training, usage(), {**evals, 50: 2.0}) is None
    assert first_met(spec, training, usage(), None) is None  # no evaluation yet


def test_budget_share_needs_its_limit_and_fires_only_short_of_the_target():
    with pytest.raises(SpecError, match=r"budget\.tokens, which is not set"):
        spec_with({"kind": "budget_share", "share": 0.5, "of": "tokens", "unless_loss_below": 1})
    spec = spec_with(
        {"kind": "budget_share", "share": 0.5, "of": "tokens", "unless_loss_below": 1.0,
         "window_steps": 2},
        budget={"tokens": 10_000},
    )  # fmt: skip
    losses = {1: 1.5, 2: 1.5}
    assert first_met(spec, losses, usage(tokens=4_999)) is None
    met = first_met(spec, losses, usage(tokens=5_000))
    assert met is not None and "5,000 of budget.tokens=1e+04 spent (50 %" in met.evidence
    assert first_met(spec, {1: 0.5, 2: 0.5}, usage(tokens=9_000)) is None  # target reached


@pytest.mark.integration
def test_a_met_criterion_stops_a_real_run_at_a_step_boundary_with_a_save(tmp_path):
    """Any positive loss is above 0: the criterion is met once three steps are in, and the run
    stops at its next boundary with a committed checkpoint, CANCELLED with STOP_CRITERION."""
    spec = spec_with(
        {"kind": "loss_above", "loss": 0.0, "window_steps": 3},
        steps=400, entrypoint=str(SCRIPT), args=("--step-sleep", "0.05"),
    )  # fmt: skip
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1)
    run, _ = controller.submit(spec, tmp_path)
    ended = controller.drive(run.run_id)
    assert (ended.state, ended.terminal_reason) == ("CANCELLED", "STOP_CRITERION")
    assert "a stop criterion was met (the loss averaged" in ended.state_detail
    (met,) = store.events(run.run_id, types=["STOP_CRITERION_MET"])
    assert (met.attributes["criterion"], met.attributes["kind"]) == (0, "loss_above")
    (acked,) = {
        e.attributes["reason"] for e in store.events(run.run_id, types=["STOP_ACKNOWLEDGED"])
    }
    assert acked == "criterion"
    stopped_at = ended.last_step
    assert 3 <= stopped_at < 400
    saved = store.checkpoints.list(run.run_id, status="COMMITTED")
    assert saved and saved[-1].step == stopped_at  # the stop step was saved
    # The report shows the criterion's outcome and the run's preflight.
    report, _ = collect_report(store, run.run_id)
    (outcome,) = report.governance.stop_criteria
    assert outcome.evaluated and outcome.met and outcome.evidence == met.attributes["evidence"]
    assert report.governance.preflight_ok is True
    assert "Governance" in render_page(report, collect_report(store, run.run_id)[1])
    store.close()
