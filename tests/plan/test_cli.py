"""`runwright plan ...` through typer's CliRunner: JSON, tables, and clean user errors."""

import json

import pytest
from typer.testing import CliRunner

from runwright.cli.main import app

runner = CliRunner()
MODEL = ["--layers", "4", "--d-model", "64", "--heads", "4", "--vocab", "512"]

SPEC = """
name: tiny
code: {entrypoint: train.py}
model: {n_layers: 4, d_model: 64, n_heads: 4, vocab_size: 512}
data: {sequence_length: 128}
training: {global_batch_samples: 8, steps: 10}
resources: {nodes: 1, devices_per_node: 2, device_memory_bytes: 1073741824,
            peak_flops_per_device: 1.0e12}
checkpoint: {interval: {policy: auto, mtbf_seconds: 36000}}
"""


def run(*args):
    result = runner.invoke(app, ["plan", *args])
    assert "Traceback" not in result.output
    return result


def test_memory_json_matches_the_formula():
    result = run("memory", *MODEL, "--seq-len", "128", "--dp", "2", "--zero-stage", "3", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    p = data["model"]["parameter_count"]
    ledger = data["ledger"]
    # ZeRO-3 over 2 ranks: 16P / 2 = 8P bytes of model state.
    assert ledger["parameters_bytes"] + ledger["gradients_bytes"] + ledger[
        "optimizer_bytes"
    ] == pytest.approx(8 * p)


def test_memory_table_has_units_and_verdict():
    result = run("memory", *MODEL, "--device-memory-gib", "1")
    assert result.exit_code == 0, result.output
    assert "GiB" in result.output and "fits" in result.output
    assert "not the allocator peak" in result.output


def test_spec_supplies_the_inputs(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    memory = run("memory", "--spec", str(spec), "--json")
    assert memory.exit_code == 0, memory.output
    assert json.loads(memory.output)["ledger"]["device_memory_bytes"] == 2**30
    interval = run("interval", "--spec", str(spec), "--checkpoint-seconds", "30", "--json")
    assert json.loads(interval.output)["mtbf_seconds"] == 36000
    parallel = run("parallel", "--spec", str(spec), "--json")
    assert parallel.exit_code == 0, parallel.output
    assert json.loads(parallel.output)["accepted"]


def test_comm_table_and_json():
    table = run("comm", "--bytes", "1e9", "--ranks", "8")
    assert table.exit_code == 0, table.output
    assert "all-to-all" in table.output and "ms" in table.output
    data = json.loads(run("comm", "--bytes", "1e9", "--ranks", "1", "--json").output)
    assert all(row["bytes_sent_per_rank"] == 0 for row in data["collectives"])


def test_interval_table():
    result = run("interval", "--checkpoint-seconds", "30", "--mtbf-seconds", "21600")
    assert result.exit_code == 0, result.output
    assert "young" in result.output and "W(T)" in result.output


def test_parallel_table_lists_rejections():
    result = run(
        "parallel",
        *MODEL,
        "--world-size",
        "16",
        "--devices-per-node",
        "4",
        "--device-memory-gib",
        "8",
        "--peak-tflops",
        "100",
        "--global-batch-samples",
        "32",
    )
    assert result.exit_code == 0, result.output
    assert "rejected layouts" in result.output


def test_scaling_points_and_file(tmp_path):
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([{"world_size": 8, "tokens_per_second": 7200}]))
    result = run("scaling", "--point", "1:1000", "--measurements", str(path), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["points"][1]["efficiency"] == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["interval", "--checkpoint-seconds", "600", "--mtbf-seconds", "3600"], "C << T << M"),
        (["interval", "--checkpoint-seconds", "30"], "--mtbf-seconds"),
        (["memory", "--layers", "4"], "--d-model"),
        (["memory", *MODEL, "--tp", "3"], "n_heads"),
        (["memory", "--layers", "4", "--d-model", "64", "--heads", "5"], "n_heads"),
        (["memory", *MODEL, "--zero-stage", "2", "--offload", "all"], "stage 3"),
        (["memory", *MODEL, "--headroom", "1.5"], "headroom"),
        (["memory", "--spec", "missing.yaml"], "no such file"),
        (["comm", "--bytes", "1e6"], "--ranks"),
        (["parallel", *MODEL, "--world-size", "8"], "--device-memory-gib"),
        (
            [
                "parallel",
                *MODEL,
                "--world-size",
                "8",
                "--device-memory-gib",
                "8",
                "--peak-tflops",
                "100",
                "--global-batch-samples",
                "8",
                "--mfu",
                "2",
            ],
            "mfu",
        ),
        (["scaling", "--point", "eight:100"], "WORLD_SIZE:TOKENS_PER_SECOND"),
        (["scaling"], "no measurements"),
    ],
)
def test_bad_inputs_exit_2_with_a_message(args, message):
    result = run(*args)
    assert result.exit_code == 2
    assert message in result.output


def test_bad_measurements_file(tmp_path):
    path = tmp_path / "runs.json"
    path.write_text('{"world_size": 1}')
    result = run("scaling", "--measurements", str(path))
    assert result.exit_code == 2
    assert "JSON list" in result.output
