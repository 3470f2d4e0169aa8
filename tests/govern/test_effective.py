"""The effective configuration (issue 17): recorded by the controller's preflight, and a spec
compared with an earlier run before launch, reproducibility-breaking fields first; a run stored
before preflight is compared from its spec, plan and its ranks' reported versions."""

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.control.controller import Controller
from runwright.events import EventType
from runwright.govern.effective import differences, flatten, recorded_config
from runwright.spec import load_spec
from runwright.store import NewEvent, Store

REPO = Path(__file__).parents[2]
runner = CliRunner()


def spec_file(folder: Path, name: str = "spec.yaml", **changes) -> Path:
    data = yaml.safe_load((REPO / "examples" / "tiny_gpt.yaml").read_text())
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        data.setdefault(section, {})[key] = value
    path = folder / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_flatten_and_what_breaks_reproducibility():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": None}) == {"a.b": 1, "a.c": [1, 2], "d": None}
    found = differences(
        {"training.seed": 1, "name": "x", "budget.tokens": 5, "plan.micro_batch_size": 4},
        {"training.seed": 2, "name": "y", "budget.tokens": 5, "plan.micro_batch_size": 2},
    )
    assert [(d.field, d.breaks_reproducibility) for d in found] == [
        ("plan.micro_batch_size", True), ("training.seed", True), ("name", False),
    ]  # fmt: skip


def test_a_spec_is_compared_with_a_run_before_launch(tmp_path):
    root = tmp_path / "root"
    store = Store.open(root)
    controller = Controller(store, root)
    earlier, _ = controller.submit(load_spec(spec_file(tmp_path)), tmp_path)
    controller.reconcile(earlier.run_id)  # preflight records the effective configuration
    (checked,) = store.events(earlier.run_id, types=[EventType.PREFLIGHT_CHECKED])
    recorded = checked.attributes["effective"]
    assert recorded["training.seed"] == load_spec(spec_file(tmp_path)).training.seed
    assert {"environment.python", "environment.torch", "plan.micro_batch_size"} <= set(recorded)
    changed = spec_file(tmp_path, "changed.yaml", training__seed=99, governance__owner="someone")
    args = ["preflight", str(changed), "--against", earlier.run_id[:14], "--root", str(root)]
    out = runner.invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.output
    diff = json.loads(out.output)["against"]
    assert diff["run_id"] == earlier.run_id
    assert [(d["field"], d["breaks_reproducibility"]) for d in diff["differences"]] == [
        ("training.seed", True), ("governance.owner", False),
    ]  # fmt: skip
    shown = runner.invoke(app, args)
    assert "1 of 2 field(s) can change what is computed" in " ".join(shown.output.split())
    same = runner.invoke(
        app,
        ["preflight", str(spec_file(tmp_path)), "--against", earlier.run_id, "--root", str(root)],
    )
    assert f"same effective configuration as run {earlier.run_id}" in same.output
    store.close()


def test_a_run_from_before_preflight_is_rebuilt_from_its_records(tmp_path):
    store = Store.open(tmp_path)
    spec = load_spec(spec_file(tmp_path))
    store.create_run(
        run_id="old", name="old", spec=spec.model_dump(mode="json"), spec_hash=spec.spec_hash,
        plan=spec.plan.model_dump(mode="json"), workdir=str(tmp_path), root=str(tmp_path),
        state="SUCCEEDED",
    )  # fmt: skip
    store.append_event(
        NewEvent(
            event_id="old:ws",
            run_id="old",
            generation=0,
            type=EventType.WORKER_STARTED,
            time_unix_s=1.0,
            attributes={"rank": 0, "python_version": "3.11.0", "torch_version": "2.13.0"},
        ),
        fenced=False,
    )
    rebuilt = recorded_config(store.get_run("old"), store.events("old"))
    assert rebuilt["environment.torch"] == "2.13.0"
    assert rebuilt["plan.micro_batch_size"] == spec.plan.micro_batch_size.value
    assert rebuilt["training.seed"] == spec.training.seed
    store.close()
