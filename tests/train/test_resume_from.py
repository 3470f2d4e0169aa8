"""`checkpoint.resume_from` (issue 17: a checkpoint to resume, checked before the run): a run
that starts from another run's checkpoint, under the controller with the reference trainer on
two gloo ranks. Run A trains 4 steps; run B names A and trains on to 6; run C trains 6 steps
straight. B's preflight found A's checkpoint fit (exact), B restored it and trained steps 5-6
only, saving into its own root (A's is untouched), and ended bitwise where C did. A checkpoint
that does not fit (another dataset), one with nothing left to train, and a run that does not
exist each fail preflight with the reason, before anything runs."""

import pytest
import yaml
from runwright_tests_tiny import TINY_DATA, tiny_gpt

from runwright.control.controller import Controller
from runwright.data import build_dataset
from runwright.events import EventType
from runwright.govern.preflight_checks import run_preflight
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = pytest.mark.integration


def spec_for(dataset, steps: int, resume_from: str | None = None, name: str = "resume"):
    # The same learning rate at every step whatever training.steps says, so A then B is C.
    schedule = {"warmup_steps": 2, "decay": "constant"}
    data = tiny_gpt(dataset, steps=steps, name=name, every_steps=2, schedule=schedule)
    data["checkpoint"]["keep_every_steps"] = 2
    if resume_from is not None:
        data["checkpoint"]["resume_from"] = resume_from
    return spec_from_mapping(data)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    dataset = build_dataset(TINY_DATA, root / "data")
    store = Store.open(root)
    yield root, store, dataset
    store.close()


@pytest.fixture(scope="module")
def first_four(world):
    """Run A: 4 steps, checkpoints at 2 and 4."""
    root, store, dataset = world
    a = drive(root, store, spec_for(dataset, 4, name="first-four"))
    assert a.state == "SUCCEEDED", a.state_detail
    return a


def drive(root, store, spec):
    controller = Controller(store, root, poll_seconds=0.1)
    run, _ = controller.submit(spec, root)
    return controller.drive(run.run_id)


def test_a_run_resumes_another_runs_checkpoint_and_ends_where_a_straight_run_does(
    world, first_four
):
    root, store, dataset = world
    a = first_four
    a_checkpoints = [c.checkpoint_id for c in store.checkpoints.list(a.run_id)]
    a_latest = store.checkpoints.list(a.run_id, status="COMMITTED")[-1]
    assert a_latest.step == 4

    b = drive(root, store, spec_for(dataset, 6, resume_from=a.run_id, name="on-to-six"))
    assert b.state == "SUCCEEDED", b.state_detail
    (checked,) = store.events(b.run_id, types=[EventType.PREFLIGHT_CHECKED])
    (resume,) = [c for c in checked.attributes["checks"] if c["name"] == "checkpoint.resume"]
    assert resume["verdict"] == "pass", resume
    assert "exact (same world size and layout); trains steps 5-6" in resume["evidence"]
    restored = store.events(b.run_id, types=[EventType.RESTORED])
    assert {(e.step, e.checkpoint_id) for e in restored} == {(4, a_latest.checkpoint_id)}
    assert all(e.attributes["resumed_from"].endswith("checkpoints") for e in restored)
    steps = {e.step for e in store.events(b.run_id, types=[EventType.STEP_HEALTHY])}
    assert steps == {5, 6}  # nothing before A's step 4 was trained again
    b_saved = store.checkpoints.list(b.run_id, status="COMMITTED")
    assert [c.step for c in b_saved] == [6] and "first-four" not in b_saved[0].path
    assert [c.checkpoint_id for c in store.checkpoints.list(a.run_id)] == a_checkpoints

    c = drive(root, store, spec_for(dataset, 6, name="straight-six"))
    assert c.state == "SUCCEEDED", c.state_detail

    def digests(run_id):
        (done,) = store.events(run_id, types=[EventType.TRAINING_COMPLETE])
        return done.attributes["parameter_digests"]

    assert digests(b.run_id) == digests(c.run_id)  # A then B is C, bit for bit


def test_a_checkpoint_that_does_not_fit_fails_preflight_with_the_reason(
    world, first_four, tmp_path
):
    root, store, dataset = world
    a = first_four
    checkpoints = root / "probe-checkpoints"

    def check(spec):
        report = run_preflight(spec, root, checkpoints, root)
        (found,) = [c for c in report.checks if c.name == "checkpoint.resume"]
        return found

    # Another dataset: the same documents with another eval split are another content address.
    recipe = yaml.safe_load(TINY_DATA.read_text())
    recipe["eval"]["fraction"] = 0.3
    for source in recipe["sources"]:
        source["paths"] = [str(TINY_DATA.parent / p) for p in source["paths"]]
    other_recipe = tmp_path / "other.yaml"
    other_recipe.write_text(yaml.safe_dump(recipe))
    other = build_dataset(other_recipe, tmp_path / "data")
    assert other.manifest.dataset_id != dataset.manifest.dataset_id
    refused = check(spec_for(other, 6, resume_from=a.run_id))
    assert refused.verdict == "fail" and "data manifest" in refused.evidence
    assert "cannot be restored into this run" in refused.evidence

    done = check(spec_for(dataset, 4, resume_from=a.run_id))
    assert done.verdict == "fail" and "nothing would be trained" in done.evidence
    assert done.fix == "raise training.steps above 4"

    missing = check(spec_for(dataset, 6, resume_from="no-such-run"))
    assert missing.verdict == "fail" and "no-such-run" in missing.evidence

    # Submitted, such a run never starts: the controller's preflight ends it with the reason.
    kept = drive(root, store, spec_for(other, 6, resume_from=a.run_id, name="misfit"))
    assert (kept.state, kept.terminal_reason) == ("FAILED", "FAILED_PERMANENT")
    assert kept.state_detail.startswith("preflight check checkpoint.resume failed: checkpoint")
    assert not store.events(kept.run_id, types=[EventType.WORKER_STARTED])


def test_a_resume_on_another_world_size_is_resharded(world, first_four):
    """A's two ranks' checkpoint into one rank: preflight says resharded, the restore reshards
    model and optimizer with DCP and the loader's cursor with the data plane, and training goes
    on from step 5."""
    root, store, dataset = world
    data = spec_for(dataset, 6, resume_from=first_four.run_id, name="one-rank").model_dump(
        mode="json", exclude={"plan", "spec_hash"}
    )
    data["resources"]["devices_per_node"] = 1
    b = drive(root, store, spec_from_mapping(data))
    assert b.state == "SUCCEEDED", b.state_detail
    (checked,) = store.events(b.run_id, types=[EventType.PREFLIGHT_CHECKED])
    (resume,) = [c for c in checked.attributes["checks"] if c["name"] == "checkpoint.resume"]
    assert "resharded: world size 2 -> 1" in resume["evidence"]
    (restored,) = store.events(b.run_id, types=[EventType.RESTORED])
    assert (restored.step, restored.attributes["mode"]) == (4, "reshard")
    steps = {e.step for e in store.events(b.run_id, types=[EventType.STEP_HEALTHY])}
    assert steps == {5, 6}
