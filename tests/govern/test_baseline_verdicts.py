"""The baseline's verdicts (govern/baseline.py `judge`), on made-up figures: each figure against
its tolerance in its worse direction, the loss curve bitwise or within its bound, a speed gain
with a changed loss curve flagged, a millisecond phase's noise passed by the floor."""

from runwright.govern.baseline import Tolerances, judge, loss_verdict
from runwright.govern.baseline_figures import EnvironmentLabels, WorkloadFigures
from runwright.govern.performance import PerformanceFigures, Window, percentile


def figures(rate=1000.0, p50=0.1, wait=0.001, losses=(2.0, 1.5, 1.2), peak=1000, nan=0):
    perf = PerformanceFigures(
        window=Window(first_step=3, last_step=10, steps=8, seconds=1.0),
        loss_tokens_per_second=rate, device_tokens_per_second=rate, step_seconds_p50=p50,
        step_seconds_p90=p50 * 1.5, step_seconds_p99=p50 * 2, data_wait_seconds_mean=wait,
        comm_seconds_mean=0.01, mfu=None,
    )  # fmt: skip
    return WorkloadFigures(
        run_id="r", performance=perf, peak_host_bytes=peak, peak_device_bytes=None,
        loss_curve=[(i + 1, v) for i, v in enumerate(losses)],
        anomalies={"NAN_DETECTED": nan}, checkpoint_save_seconds=0.2,
        checkpoint_stall_seconds=0.1, restore_seconds=0.3, recovery_seconds=4.0,
        detection_seconds=1.0, fault="sigkill_rank", labels=EnvironmentLabels(node_type="cpu"),
    )  # fmt: skip


def verdicts(before, now, bitwise=True, **tolerances):
    return {v.figure: v for v in judge(before, now, Tolerances(**tolerances), bitwise)}


def test_the_same_figures_pass_every_check():
    found = verdicts(figures(), figures())
    assert {v.verdict for v in found.values()} == {"pass"}
    assert found["loss_curve"].reason == "3 steps identical at every step"


def test_a_slower_data_path_fails_by_name():
    found = verdicts(figures(), figures(rate=300.0, p50=0.6, wait=0.5))
    failed = {name for name, v in found.items() if v.verdict == "fail"}
    assert failed == {"loss_tokens_per_second", "step_seconds_p50", "step_seconds_p90",
                      "data_wait_seconds_mean"}  # fmt: skip
    assert "beyond the 30 % allowed" in found["loss_tokens_per_second"].reason


def test_a_small_time_change_passes_by_the_floor_and_memory_growth_fails():
    found = verdicts(figures(), figures(wait=0.004, peak=1300))
    assert found["data_wait_seconds_mean"].verdict == "pass"  # 4x, but 3 ms
    assert found["peak_host_bytes"].verdict == "fail"


def test_bitwise_loss_differs_at_the_first_step_and_a_speed_gain_is_flagged():
    found = verdicts(figures(), figures(rate=2000.0, losses=(2.0, 1.5000001, 1.2)))
    assert found["loss_curve"].verdict == "fail" and "step 2" in found["loss_curve"].reason
    assert found["loss_tokens_per_second"].verdict == "flagged"
    assert "numerical change" in found["loss_tokens_per_second"].reason


def test_statistical_bound_and_different_steps():
    near = loss_verdict([(1, 2.0), (2, 1.0)], [(1, 2.01), (2, 1.0)], False, 0.02)
    assert near.verdict == "pass" and "at most 0.5 %" in near.reason
    far = loss_verdict([(1, 2.0)], [(1, 2.1)], False, 0.02)
    assert far.verdict == "fail" and "step 1 differs by 5 %" in far.reason
    short = loss_verdict([(1, 2.0), (2, 1.0)], [(1, 2.0)], True, 0.0)
    assert short.verdict == "fail" and "step 2" in short.reason


def test_more_anomalies_fail():
    assert verdicts(figures(), figures(nan=1))["anomalies.NAN_DETECTED"].verdict == "fail"


def test_nearest_rank_percentile():
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.0
    assert percentile([3.0, 1.0, 2.0, 4.0], 90) == 4.0
    assert percentile([], 50) is None


def test_bad_input_names_the_fix(tmp_path):
    from pathlib import Path

    from typer.testing import CliRunner

    from runwright.cli.main import app

    runner = CliRunner()
    skeleton = str(Path(__file__).parents[2] / "examples" / "skeleton.yaml")
    where = ["--root", str(tmp_path)]
    missing = runner.invoke(app, ["baseline", "check", "nope", *where])
    assert missing.exit_code != 0 and "record one with `runwright baseline record" in missing.output
    name = runner.invoke(app, ["baseline", "record", skeleton, "--name", "a/b", *where])
    assert name.exit_code != 0 and "give a plain name" in name.output
    bad = ["baseline", "record", skeleton, "--name", "x", "--tolerance", "speed=2", *where]
    tolerance = runner.invoke(app, bad)
    assert tolerance.exit_code != 0 and "FIGURE one of loss_tokens_per_second" in tolerance.output
    negative = runner.invoke(app, [*bad[:5], "--tolerance", "peak_memory=-1", *where])
    assert negative.exit_code != 0 and "peak_memory" in negative.output


def test_a_check_pins_to_the_node_labels_only():
    labels = EnvironmentLabels(
        python="3.11.7", torch="2.13.0", cuda="12.4", driver="550.54", nccl="2.21.5",
        node_type="cuda/x86_64/64",
    )  # fmt: skip
    assert labels.node_pins() == {"cuda": "12.4", "driver": "550.54", "nccl": "2.21.5"}
    assert EnvironmentLabels(python="3.11.7", node_type="cpu/x86_64/2").node_pins() == {}
