"""The CLI: every bad input ends in a clear message and exit status 2, never a traceback."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from runwright.cli.main import app

SKELETON = Path(__file__).parents[2] / "src" / "runwright" / "demo" / "skeleton.yaml"
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def write(tmp_path, text, name="spec.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def skeleton_with(tmp_path, mutate):
    data = yaml.safe_load(SKELETON.read_text())
    mutate(data)
    return write(tmp_path, yaml.safe_dump(data))


BAD_SPECS = {
    "missing file": (None, "no such file"),
    "bad suffix": ("x.txt", "unknown spec format"),
    "bad yaml": ("name: [oops", "not valid YAML at line 1"),
    "not a mapping": ("- 1\n- 2\n", "mapping of sections"),
    "unknown top key": (
        lambda d: d.update(trainng={}),
        "trainng: unknown key; did you mean 'training'?",
    ),
    "unknown nested key": (lambda d: d["training"].update(stepz=3), "training.stepz"),
    "wrong type": (lambda d: d["training"].update(steps="ten"), "training.steps"),
    "negative": (lambda d: d["training"].update(steps=-1), "greater than 0"),
    "batch vs dp": (
        lambda d: d["training"].update(global_batch_samples=15),
        "nearest valid values",
    ),
    "dp contradiction": (lambda d: d["parallelism"].update(dp=3), "contradicts the world size"),
    "bad name": (lambda d: d.update(name="has space"), "name: String should match pattern"),
    "timeouts": (
        lambda d: d["recovery"].update(heartbeat_timeout_seconds=0.5),
        "heartbeat_interval_seconds < heartbeat_timeout_seconds",
    ),
    "bad algorithm": (lambda d: d["data"].update(shuffle="random"), "data.shuffle"),
    "elastic without range": (
        lambda d: d["parallelism"]["membership"].update(mode="elastic"),
        "min_nodes and max_nodes",
    ),
    # At 3 nodes x 2 ranks, 16 samples do not split over dp 6: refused naming the size.
    "elastic range losing the global batch": (
        lambda d: (
            d["resources"].update(nodes=2),
            d["parallelism"]["membership"].update(mode="elastic", min_nodes=1, max_nodes=3),
        ),
        "cannot keep the global batch at every size: 3 node(s): "
        "training.global_batch_samples=16 is not divisible by dp=6",
    ),
    "elastic range without the spec's size": (
        lambda d: d["parallelism"]["membership"].update(mode="elastic", min_nodes=2, max_nodes=3),
        "resources.nodes=1 lies outside",
    ),
    "local repair": (
        lambda d: d["parallelism"]["membership"].update(mode="local_repair"),
        "mode: local_repair is not offered",
    ),
}


@pytest.mark.parametrize("case", list(BAD_SPECS), ids=list(BAD_SPECS))
def test_bad_specs_get_clear_errors(tmp_path, case):
    source, expected = BAD_SPECS[case]
    if source is None:
        path = tmp_path / "missing.yaml"
    elif callable(source):
        path = skeleton_with(tmp_path, source)
    elif case == "bad suffix":
        path = write(tmp_path, "name: x", "x.txt")
    else:
        path = write(tmp_path, source)
    for command in ("validate", "hash", "explain"):
        result = invoke("spec", command, path)
        assert result.exit_code == 2, result.output
        assert expected in result.output
        assert "Traceback" not in result.output


def test_submit_bad_spec_and_unknown_run(tmp_path):
    bad = write(tmp_path, "name: x\n")
    result = invoke("submit", bad, "--root", tmp_path)
    assert result.exit_code == 2 and "code: required field is missing" in result.output
    for command in ("status", "events"):
        result = invoke(command, "no-such-run", "--root", tmp_path)
        assert result.exit_code == 2 and "runwright list" in result.output
    result = invoke("list", "--root", tmp_path, "--store", "mysql://nope")
    assert result.exit_code == 2 and "store URL" in result.output


def test_hash_is_alone_on_last_line():
    result = invoke("spec", "hash", SKELETON)
    last = result.output.strip().splitlines()[-1]
    assert len(last) == 64 and all(c in "0123456789abcdef" for c in last)


def test_explain_and_schema(tmp_path):
    result = invoke("spec", "explain", SKELETON, "--json")
    plan = json.loads(result.output)["plan"]
    assert plan["dp"]["value"] == 2 and "world size 2" in plan["dp"]["reason"]
    out = tmp_path / "schema.json"
    assert invoke("spec", "schema", out).exit_code == 0
    assert json.loads(out.read_text())["title"] == "JobSpec"


def test_explain_shows_an_elastic_ranges_layouts(tmp_path):
    def elastic(d):
        d["resources"].update(nodes=2)
        d["parallelism"]["membership"].update(mode="elastic", min_nodes=1, max_nodes=2)

    path = skeleton_with(tmp_path, elastic)
    layouts = json.loads(invoke("spec", "explain", path, "--json").output)["elastic_layouts"]
    # 16 samples at 1 node (dp 2) and 2 nodes (dp 4): micro x accumulation x dp = 16 at both.
    assert [(x["nodes"], x["dp"], x["global_batch_samples"]) for x in layouts] == [
        (1, 2, 16),
        (2, 4, 16),
    ]
    assert "Elastic layouts" in invoke("spec", "explain", path).output


def test_no_traceback_from_a_real_process(tmp_path):
    """The installed entry point, not just the in-process runner, keeps tracebacks away."""
    bad = write(tmp_path, "name: x\ncode: {entrypoint: t.py}\ntraining: {steps: 1}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "runwright.cli.main", "spec", "validate", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "global_batch_samples or global_batch_tokens" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.integration
def test_submit_status_events_list_round_trip(tmp_path):
    spec = skeleton_with(tmp_path, lambda d: d["training"].update(steps=3))
    result = invoke("submit", spec, "--root", tmp_path, "--json", "--idempotency-key", "once")
    summary = json.loads(result.output)
    assert result.exit_code == 0 and summary["state"] == "SUCCEEDED"
    run_id = summary["run_id"]
    assert summary["state_history"] == [
        "CREATED",
        "QUEUED",
        "ALLOCATING",
        "STARTING",
        "RUNNING",
        "SUCCEEDED",
    ]
    again = json.loads(
        invoke("submit", spec, "--root", tmp_path, "--json", "--idempotency-key", "once").output
    )
    assert again == {"run_id": run_id, "created": False, "state": "SUCCEEDED"}
    status = invoke("status", run_id[:20], "--root", tmp_path)
    assert "SUCCEEDED" in status.output and "nothing more will happen" in status.output
    events = json.loads(invoke("events", run_id, "--root", tmp_path, "--json").output)
    assert events[-1]["type"] == "RUN_FINISHED"
    listed = json.loads(invoke("list", "--root", tmp_path, "--json").output)
    assert [r["run_id"] for r in listed] == [run_id]


@pytest.mark.integration
@pytest.mark.slow  # tests/test_newcomer.py runs the same path (submit --detach, events --follow)
def test_detached_submit_and_follow_until_the_run_ends(tmp_path):
    spec = skeleton_with(tmp_path, lambda d: d["training"].update(steps=3))
    base = [sys.executable, "-m", "runwright.cli.main"]
    out = subprocess.run(
        [*base, "submit", str(spec), "--detach", "--json", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    submitted = json.loads(out.stdout)
    assert submitted["detached"] is True
    follow = subprocess.run(
        [*base, "events", submitted["run_id"], "--follow", "--json", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    lines = [json.loads(line) for line in follow.stdout.splitlines()]
    assert follow.returncode == 0 and lines[-1]["type"] == "RUN_FINISHED"
    assert [e["seq"] for e in lines] == sorted(e["seq"] for e in lines)
    status = json.loads(
        subprocess.run(
            [*base, "status", submitted["run_id"], "--json", "--root", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    )
    assert status["state"] == "SUCCEEDED"
