"""`runwright plan fleet` and `plan interval --simulate` through typer's CliRunner: tables, JSON,
presets and flags, and bad input named by its flag."""

import json

import pytest
from typer.testing import CliRunner

from runwright.cli.main import app

runner = CliRunner()


def run(*args):
    result = runner.invoke(app, ["plan", *args])
    assert "Traceback" not in result.output
    return result


def test_preset_table_names_its_source_and_assumptions():
    result = run("fleet", "--preset", "llama3-16k", "--seeds", "2", "--checkpoint-gib", "100")
    assert result.exit_code == 0, result.output
    for text in ("ETTR %", "interruptions", "where the wall time went", "host-maintenance",
                 "arXiv 2407.21783", "assumed", "first-order model", "TiB"):  # fmt: skip
        assert text in result.output, text


def test_json_from_flags_with_compare():
    result = run(
        "fleet", "--devices", "4096", "--days", "20", "--class", "gpu:2e-5:60:300:node",
        "--class", "sw:1e-5", "--restart-seconds", "90", "--stall-seconds", "5",
        "--persist-seconds", "60", "--async", "--spare-nodes", "2", "--step-seconds", "4",
        "--seeds", "3", "--compare", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    classes = {c["name"]: c for c in data["inputs"]["classes"]}
    assert classes["gpu"]["needs_spare"] and classes["gpu"]["detect_seconds"] == 60
    assert classes["sw"]["restart_seconds"] == 90  # the flag fills what --class left out
    assert data["inputs"]["save"]["mode"] == "async"
    assert data["seeds"] == [0, 1, 2]
    assert data["lost_steps"]["mean"] == pytest.approx(data["lost_seconds"]["mean"] / 4)
    assert sum(data["wall_breakdown_seconds"].values()) == pytest.approx(20 * 86_400)
    assert {r["label"] for r in data["compare"]["rows"]} == {"young", "daly", "adaptive"}


def test_preset_values_yield_to_flags():
    result = run("fleet", "--preset", "kokolis-rsc1", "--devices", "131072", "--days", "3",
                 "--restart-seconds", "60", "--seeds", "1", "--json")  # fmt: skip
    data = json.loads(result.output)
    assert data["inputs"]["devices"] == 131_072
    assert data["inputs"]["classes"][0]["restart_seconds"] == 60
    # 16,384 nodes x 6.5e-3 failures per node-day: 0.225 h between failures.
    assert data["analytic"]["job_mtbf_seconds"] / 3600 == pytest.approx(0.225, rel=0.01)


def test_interval_simulate_reports_the_best_next_to_young_and_daly():
    args = ["interval", "--checkpoint-seconds", "30", "--mtbf-seconds", "21600", "--seeds", "2"]
    table = run(*args, "--simulate")
    assert table.exit_code == 0, table.output
    assert "simulated waste" in table.output and "highest simulated ETTR" in table.output
    data = json.loads(run(*args, "--simulate", "--json").output)
    assert data["young_seconds"] == pytest.approx(1138.42, abs=0.01)
    assert data["simulation"]["best"]["label"]
    assert "simulation" not in json.loads(run(*args, "--json").output)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--stall-seconds", "10", "--device-mtbf-hours", "5e4"], "--devices"),
        (["--devices", "8", "--device-mtbf-hours", "5e4"], "--stall-seconds"),
        (["--devices", "8", "--stall-seconds", "10"], "--class"),
        (["--devices", "0", "--stall-seconds", "10", "--device-mtbf-hours", "5e4"],
         "--devices: Input should be greater than 0"),
        (["--devices", "8", "--stall-seconds", "10", "--class", "gpu:fast"], "--class 'gpu:fast'"),
        (["--devices", "8", "--stall-seconds", "1", "--class", "gpu:1e-5:1:1:x"], "node|planned"),
        (["--devices", "8", "--stall-seconds", "-1", "--device-mtbf-hours", "5e4"],
         "--stall-seconds"),
        (["--preset", "llama3-16k", "--policy", "fixed"], "needs --interval-seconds"),
        (["--preset", "llama3-16k", "--stall-seconds", "0"], "positive stall"),
        (["--preset", "llama3-16k", "--days", "0"], "--days"),
        (["--preset", "llama3-16k", "--spare-nodes", "-2"], "--spare-nodes"),
        (["--preset", "gpt"], "llama3-16k"),
        (["--preset", "llama3-16k", "--devices", "10000000", "--days", "30000"], "shorter window"),
        (["--devices", "8", "--stall-seconds", "1", "--device-mtbf-hours", "0"],
         "--device-mtbf-hours"),
    ],
)  # fmt: skip
def test_bad_inputs_exit_2_naming_the_flag(args, message):
    result = run("fleet", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_bad_input_under_json_is_json():
    result = run("fleet", "--preset", "llama3-16k", "--days", "-1", "--json")
    assert result.exit_code == 2
    assert "--days" in json.loads(result.output)["error"]
