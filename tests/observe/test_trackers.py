"""Metrics to the trackers users already use (spec `observability.trackers`): a real run of the
reference trainer under plain torchrun writes TensorBoard event files and an MLflow run on a
real local tracking server, read back with TensorBoard's and MLflow's own readers and compared
with what the run reported on its channel; a tracker that fails is counted, never fatal."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch.utils.tensorboard  # noqa: F401 - imported before the writer threads, as in a worker
import yaml
from mlflow.tracking import MlflowClient
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from runwright.data import build_dataset
from runwright.errors import RunwrightError
from runwright.events import EventType
from runwright.observe.tracker_backends import (
    MLflowTracker,
    TensorBoardTracker,
    flatten,
    mlflow_key,
)
from runwright.observe.trackers import TRACKERS_FILE, TrackerSink, attach_report, run_facts
from runwright.spec import MLflowSpec, spec_from_mapping

from .mlflow_server import mlflow_server

REPO = Path(__file__).parents[2]
TINY_GPT = REPO / "src" / "runwright" / "demo" / "tiny_gpt.yaml"
TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2")
SERIES = ("loss", "lr", "grad_norm", "step_seconds", "data_wait_seconds", "tokens_per_second")


@pytest.fixture(scope="module")
def server():
    with mlflow_server() as running:
        yield running


def _spec_data(dataset=None, steps: int = 5) -> dict:
    data = yaml.safe_load(TINY_GPT.read_text())
    data["data"]["sequence_length"] = 32
    if dataset is not None:
        data["model"]["vocab_size"] = dataset.manifest.tokenizer.vocab_size
        data["data"].update(
            dataset=str(dataset.folder),
            mixture={"sources": [{"name": "notes", "weight": 1}, {"name": "records", "weight": 1}]},
        )
    data["training"].update(global_batch_samples=4, micro_batch_size=2, steps=steps)
    data["checkpoint"]["interval"]["every_steps"] = 3
    return data


def _expected(channel: Path) -> dict[str, dict[int, float]]:
    """The series rank 0 reported, as the trackers should hold them."""
    series: dict[str, dict[int, float]] = {name: {} for name in SERIES}
    for line in channel.read_text().splitlines():
        message = json.loads(line)
        if message["type"] != EventType.STEP_HEALTHY:
            continue
        step, attributes = message["step"], message["attributes"]
        for name in SERIES[:-1]:
            series[name][step] = float(attributes[name])
        series["tokens_per_second"][step] = (
            attributes["device_tokens"] * 2 / attributes["step_seconds"]
        )
    return series


@pytest.mark.integration
def test_a_run_reports_to_tensorboard_and_a_real_mlflow_server(tmp_path, server):
    dataset = build_dataset(REPO / "examples" / "data" / "tiny.yaml", tmp_path / "data")
    data = _spec_data(dataset)
    data["governance"]["tags"] = {"team:ml": "runtime"}  # a key MLflow would refuse as it is
    data["observability"] = {
        "trackers": {
            "tensorboard": {"log_dir": str(tmp_path / "tb")},
            "mlflow": {"tracking_uri": server.url, "experiment": "runwright-tests"},
            "flush_steps": 2,
        }
    }
    spec = spec_from_mapping(data)
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(data))
    run_dir = tmp_path / "run"  # RUNWRIGHT_RUN_DIR: the run id is local-run
    env = {**os.environ, "RUNWRIGHT_RUN_DIR": str(run_dir)}
    env.pop("RUNWRIGHT_RUN_ID", None)
    done = subprocess.run(
        [*TORCHRUN, "-m", "runwright.train", "--spec", str(spec_file)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    expected = _expected(run_dir / "channel" / "gen00000-rank00000.jsonl")
    assert sorted(expected["loss"]) == [1, 2, 3, 4, 5]

    # TensorBoard, read with its own reader: one event file (rank 0's), every series, per step.
    tb = tmp_path / "tb" / "local-run"
    assert len(list(tb.glob("events.out.tfevents.*"))) == 1
    events = EventAccumulator(str(tb))
    events.Reload()
    assert set(SERIES) <= set(events.Tags()["scalars"])
    for name in SERIES:
        got = {e.step: e.value for e in events.Scalars(name)}
        assert got == pytest.approx(expected[name], rel=1e-6), name  # float32 in event files
    texts = {"spec.json", "plan.json", "identity", "final_parameters.json"}
    assert set(events.Tags()["tensors"]) == {f"runwright/{t}/text_summary" for t in texts}

    # MLflow, read with its own client: one run for the whole run, found by its runwright tag.
    client = MlflowClient(tracking_uri=server.url)
    experiment = client.get_experiment_by_name("runwright-tests")
    (run,) = client.search_runs(
        [experiment.experiment_id], filter_string="tags.`runwright.run_id` = 'local-run'"
    )
    assert run.info.status == "FINISHED" and run.info.run_name == "local-run"
    for name in SERIES:
        history = client.get_metric_history(run.info.run_id, name)
        assert {m.step: m.value for m in history} == pytest.approx(expected[name]), name
    params = run.data.params
    assert params["training.steps"] == "5" and params["model.d_model"] == "64"
    assert params["plan.dp"] == "2" and params["data.dataset"] == str(dataset.folder)
    assert run.data.tags["runwright.spec_hash"] == spec.spec_hash
    assert run.data.tags["runwright.owner"] == "runwright"
    assert run.data.tags["runwright.tag.team_ml"] == params["governance.tags.team_ml"] == "runtime"
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "runwright")}
    names = {"spec.json", "plan.json", "final_parameters.json"}
    assert artifacts == {f"runwright/{n}" for n in names}
    local = client.download_artifacts(run.info.run_id, "runwright/spec.json", str(tmp_path))
    assert json.loads(Path(local).read_text()) == spec.model_dump(mode="json")

    status = json.loads((run_dir / TRACKERS_FILE).read_text())
    assert status["mlflow"]["run_id"] == run.info.run_id
    for tracker in ("mlflow", "tensorboard"):
        assert status[tracker]["failures"] == 0 and status[tracker]["points_dropped"] == 0
        assert status[tracker]["finished"]
        assert status[tracker]["points_written"] == 5 * len(SERIES)

    # `runwright report` attaches the report it writes to the same MLflow run.
    report = run_dir / "report" / "report.json"
    report.parent.mkdir()
    report.write_text('{"run_id": "local-run"}')
    attached = attach_report(run_dir, [report])
    assert attached == [f"attached to MLflow run {run.info.run_id} at {server.url}"]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "runwright")}
    assert "runwright/report.json" in artifacts


def test_failing_trackers_are_counted_and_training_goes_on(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    spec = spec_from_mapping(_spec_data())
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the event folder should go")
    with socket_closed() as url:
        sink = TrackerSink(
            [TensorBoardTracker(blocked / "run"), MLflowTracker(MLflowSpec(tracking_uri=url), "x")],
            run_facts(spec, "r-dead", 0),
            tmp_path,
            dp_size=2,
            flush_steps=10,
            flush_seconds=0.05,
            finish_seconds=60.0,
        )
        with caplog.at_level(logging.WARNING, logger="runwright.observe.trackers"):
            for step in range(1, 101):
                sink.observe(EventType.STEP_HEALTHY, step, {"loss": 1.0 / step, "lr": 0.1})
            status = sink.close(completed=True)
        # A report written later cannot reach the dead server either: said, not raised.
        (tmp_path / "later").mkdir()
        (tmp_path / "later" / TRACKERS_FILE).write_text(
            json.dumps({"mlflow": {"run_id": "r", "tracking_uri": url}})
        )
        (line,) = attach_report(tmp_path / "later", [tmp_path / TRACKERS_FILE])
    assert line.startswith(f"not attached to MLflow at {url}: MlflowException"), line
    for tracker in ("tensorboard", "mlflow"):
        assert not status[tracker]["started"] and status[tracker]["failures"] >= 1
        assert status[tracker]["points_written"] == 0
        # loss and lr of 100 steps, the step time derived from step 2 on
        assert status[tracker]["points_dropped"] == 100 * 2 + 99
    assert "Errno" in status["tensorboard"]["first_error"]
    assert status["mlflow"]["first_error"].startswith("start: MlflowException")
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2 and all("training goes on" in w for w in warned)  # once each
    assert json.loads((tmp_path / TRACKERS_FILE).read_text()) == status


class socket_closed:
    """A loopback URL where nothing listens (the port is bound, never listened on)."""

    def __enter__(self) -> str:
        import socket

        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def __exit__(self, *exc: object) -> None:
        self._sock.close()


def test_a_two_line_script_gets_step_time_and_throughput_from_its_steps(tmp_path):
    """A script that reports only its loss (the loader adds tokens and input wait): the step
    time is the time between steps, and odd values are left out, never an error."""
    spec = spec_from_mapping(_spec_data())
    sink = TrackerSink(
        [TensorBoardTracker(tmp_path / "tb")],
        run_facts(spec, "r-two", 0),
        tmp_path,
        dp_size=2,
        flush_steps=2,
        flush_seconds=60.0,
        finish_seconds=60.0,
    )
    for step in range(1, 6):
        sink.observe(EventType.WORKER_STARTED, None, {"pid": 1})
        sink.observe(
            EventType.STEP_HEALTHY,
            step,
            {
                "loss": 2.0 - step / 10,
                "device_tokens": 128,
                "data_wait_seconds": 0.01,
                "grad_norm": "n/a",
                "lr": True,
            },
        )
    status = sink.close(completed=False)
    assert status["tensorboard"]["points_written"] == 5 * 2 + 4 * 2  # step time from step 2
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert set(events.Tags()["scalars"]) == {
        "loss",
        "data_wait_seconds",
        "step_seconds",
        "tokens_per_second",
    }
    seconds = {e.step: e.value for e in events.Scalars("step_seconds")}
    throughput = {e.step: e.value for e in events.Scalars("tokens_per_second")}
    assert sorted(seconds) == sorted(throughput) == [2, 3, 4, 5]
    for step, value in seconds.items():
        assert value > 0 and throughput[step] == pytest.approx(128 * 2 / value, rel=1e-6)


def test_spec_section_refuses_what_no_tracker_can_use():
    data = _spec_data()
    data["observability"] = {"trackers": {"mlflow": {"tracking_uri": "http://"}}}
    with pytest.raises(RunwrightError, match=r"observability\.trackers\.mlflow\.tracking_uri"):
        spec_from_mapping(data)
    data["observability"] = {"trackers": {"tensorboard": {"log_dir": " "}}}
    with pytest.raises(RunwrightError, match=r"observability\.trackers\.tensorboard\.log_dir"):
        spec_from_mapping(data)
    data["observability"] = {"trackers": {"wandb": {}}}
    with pytest.raises(RunwrightError, match=r"observability\.trackers\.wandb: unknown key"):
        spec_from_mapping(data)
    data["observability"] = {"trackers": {"tensorboard": {}, "finish_seconds": 30}}
    with pytest.raises(RunwrightError, match=r"finish_seconds=30 must be below .*=30"):
        spec_from_mapping(data)
    assert not spec_from_mapping(_spec_data()).observability.trackers.switched_on


def test_the_spec_flattens_into_mlflow_params():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": "x", "e": None, "f": {}}) == {
        "a.b": "1",
        "a.c": "[1, 2]",
        "d": "x",
        "e": "null",
        "f": "{}",
    }
    assert mlflow_key("governance.tags.team:ml/../é") == "governance.tags.team_ml_.._é"


def test_a_tracker_not_installed_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow.entities", None)  # how Python marks "not there"
    with pytest.raises(RunwrightError, match=r"pip install 'runwright\[trackers\]'"):
        MLflowTracker(MLflowSpec(), "x").start(run_facts(spec_from_mapping(_spec_data()), "r", 0))
