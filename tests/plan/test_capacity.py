"""The capacity plan (runwright.plan.capacity): the figures worked by hand for one example,
the edge cases, and the command with a spec, a step time and a measured run's throughput."""

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.plan import PlanError
from runwright.plan.capacity import CapacityInputs, plan_capacity

REPO = Path(__file__).parents[2]
runner = CliRunner()

EXAMPLE = CapacityInputs(
    tokens=1e9,
    tokens_per_step=1e6,
    tokens_per_second=1e5,
    devices=8,
    checkpoint_every_steps=100,
    checkpoint_seconds=20,
    checkpoint_bytes=2**30,
    keep_last=3,
    mtbf_seconds=50_000,
    restart_seconds=60,
    detect_seconds=40,
    device_hour_price=2.0,
)


def test_the_example_worked_by_hand():
    plan = plan_capacity(EXAMPLE)
    # 1,000 steps of 10 s; 10 checkpoints of 20 s every 1,000 s.
    assert (plan.steps, plan.step_seconds, plan.compute_seconds) == (1000, 10.0, 10_000.0)
    assert (plan.checkpoints, plan.checkpoint_pause_seconds) == (10, 200.0)
    assert plan.checkpoint_written_bytes == 10 * 2**30 and plan.checkpoint_kept_bytes == 4 * 2**30
    # A failure loses half an interval (500 s), half a save (10 s), restart and detection.
    assert plan.lost_seconds_per_failure == 610.0
    wall = 10_200 / (1 - 610 / 50_000)
    assert plan.wall_seconds == pytest.approx(wall)
    assert plan.expected_failures == pytest.approx(wall / 50_000)
    failures = wall / 50_000
    assert plan.margin_failures == pytest.approx(failures + 2 * math.sqrt(failures))
    assert plan.wall_seconds == pytest.approx(10_200 + plan.expected_failures * 610)
    assert plan.device_hours == pytest.approx(8 * wall / 3600)
    assert plan.cost == pytest.approx(2.0 * 8 * wall / 3600)
    assert plan.margin_cost > plan.cost
    assert plan.useful_share == pytest.approx(10_000 / wall)


def test_without_failures_or_checkpoints_and_a_refusal_when_failures_dominate():
    calm = plan_capacity(EXAMPLE.model_copy(update={"mtbf_seconds": None}))
    assert calm.wall_seconds == 10_200 and calm.expected_failures == 0 and calm.margin_failures == 0
    bare = plan_capacity(EXAMPLE.model_copy(update={"checkpoint_every_steps": None}))
    assert bare.checkpoints == 0 and bare.checkpoint_kept_bytes == 0
    assert bare.lost_seconds_per_failure == 5_000 + 10 + 100  # half the run, with no checkpoint
    with pytest.raises(PlanError, match="checkpoint more often"):
        plan_capacity(EXAMPLE.model_copy(update={"mtbf_seconds": 1_000}))


def test_the_command_reads_the_spec_and_a_step_time():
    spec = REPO / "examples" / "tiny_gpt.yaml"
    out = runner.invoke(
        app,
        ["plan", "capacity", "--spec", str(spec), "--step-seconds", "0.5", "--checkpoint-seconds",
         "2", "--device-mtbf-hours", "0.2", "--device-hour-price", "2.5", "--json"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    plan = json.loads(out.output)
    assert plan["steps"] == 60 and plan["inputs"]["devices"] == 2
    assert plan["inputs"]["mtbf_seconds"] == pytest.approx(0.2 * 3600 / 2)  # per device / devices
    assert plan["checkpoints"] == 60 // plan["inputs"]["checkpoint_every_steps"]
    assert plan["inputs"]["checkpoint_bytes"] > 0  # the spec's model states
    shown = runner.invoke(app, ["plan", "capacity", "--spec", str(spec), "--step-seconds", "0.5"])
    assert shown.exit_code == 0 and "device-hours" in shown.output
    both = runner.invoke(
        app, ["plan", "capacity", "--spec", str(spec), "--step-seconds", "1",
              "--tokens-per-second", "9"],
    )  # fmt: skip
    assert both.exit_code == 2 and "give the throughput one way" in both.output


def test_plan_memory_takes_a_bare_parameter_count():
    """ZeRO's 7.5B example (Rajbhandari et al. 2020, figure 1): 16 bytes per parameter of
    model states, split over 8 data-parallel ranks by stage 3: 15 GB per device."""
    out = runner.invoke(
        app, ["plan", "memory", "--params", "7.5e9", "--dp", "8", "--zero-stage", "3", "--json"]
    )
    assert out.exit_code == 0, out.output
    ledger = json.loads(out.output)["ledger"]
    assert ledger["total_bytes"] == pytest.approx(15e9)
    assert ledger["activations_bytes"] == 0  # no shape given: activations are not counted
    bad = runner.invoke(app, ["plan", "memory", "--params", "0"])
    assert bad.exit_code == 2 and "positive parameter count" in bad.output
