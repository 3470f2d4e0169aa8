"""The scale-up ladder (issue 27's done-when): `runwright ladder` climbs one rank -> one node of
two ranks -> two local nodes of one rank (two torchrun agents meeting through c10d) with the
reference trainer at its smallest, through the CLI, on real runs. Every rung passes its gates:
the run succeeded with its last checkpoint committed, its loss curve agrees with the previous
rung's on a coverage-equivalent ledger, E(N) is above the (lenient, for a shared 2-core host)
minimum, and a run at its shape restored the previous rung's checkpoint, resharded from one rank
to two. ladder.json and ladder.html are written; the page is checked in headless Chromium.

The gates themselves are pure (ladder/gates.py): the same measurements judged under a strict
E(N) or with a perturbed loss stop at the named rung and gate, with the figure that failed."""

import json
from pathlib import Path

import pytest
import yaml
from runwright_tests_browser import FLAGS, assert_not_blank, playwright_chromium
from runwright_tests_leftovers import assert_nothing_left
from runwright_tests_tiny import TINY_DATA, tiny_gpt
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.data import build_dataset
from runwright.ladder.gates import LadderSettings, judge
from runwright.ladder.rungs import ladder_rungs
from runwright.ladder.runner import LadderReport
from runwright.spec import spec_from_mapping
from runwright.store import Store

STEPS = 4
LOAD_SECONDS = 60


# Session scope: xdist may interleave another file's tests with this one's on the same worker,
# which tears a module fixture down and would climb the five runs twice.
@pytest.fixture(scope="session")
def climbed(tmp_path_factory) -> LadderReport:
    root = tmp_path_factory.mktemp("ladder")
    dataset = build_dataset(TINY_DATA, root / "data")
    data = tiny_gpt(dataset, steps=STEPS, devices=1, every_steps=2, name="climb")
    data["checkpoint"]["keep_every_steps"] = None
    data["resources"]["nodes"] = 2
    data["recovery"].update(heartbeat_timeout_seconds=30, progress_timeout_seconds=120)
    spec_file = root / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(data))
    argv = ["ladder", str(spec_file), "--root", str(root), "--json", "--min-efficiency", "0.01"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output[-3000:]
    return LadderReport.model_validate(json.loads(result.stdout))


@pytest.mark.integration
@pytest.mark.timeout(900)  # five small runs, the last on two nodes: room for a busy machine
def test_the_ladder_climbs_one_rank_to_two_ranks_to_two_nodes(climbed):
    report = climbed
    assert report.ok and report.stopped is None, report.stopped
    shapes = [(r.rung.name, r.rung.nodes, r.rung.devices_per_node) for r in report.results]
    assert shapes == [("one rank", 1, 1), ("one node", 1, 2), ("two nodes", 2, 1)]
    first, one_node, two_nodes = report.results
    assert [g.name for g in first.gates] == ["ran"] and first.efficiency == 1.0
    for r in (one_node, two_nodes):
        assert [g.name for g in r.gates] == ["ran", "loss", "efficiency", "reshard"]
        assert r.measure.equivalence in ("coverage-equivalent", "bitwise-equal")
        assert r.max_loss_difference is not None and r.max_loss_difference <= 0.02
        assert r.efficiency is not None and r.efficiency > 0
        assert sorted(r.measure.losses) == list(range(1, STEPS + 1))
        assert r.measure.restored_step == STEPS and r.measure.carry_state == "SUCCEEDED"
        assert r.measure.carry_last_step == STEPS + 1
    # One rank's checkpoint went to two ranks through DCP's resharding; two ranks on one node to
    # one rank on each of two nodes keeps the world size and the layout, so loads exactly.
    assert one_node.measure.restore_mode == "reshard"
    assert two_nodes.measure.restore_mode == "exact"
    saved = json.loads(Path(report.json_path).read_text())
    assert saved["ok"] and len(saved["results"]) == 3
    # Every run the ladder made ended and left nothing behind (tests/leftovers.py).
    root = Path(report.json_path).parents[2]  # <root>/ladders/<ladder id>/ladder.json
    runs = [m.run_id for m in (first.measure, one_node.measure, two_nodes.measure)]
    runs += [one_node.measure.carry_run_id, two_nodes.measure.carry_run_id]
    store = Store.open(root)
    try:
        assert_nothing_left(store, root, *runs)
    finally:
        store.close()


@pytest.mark.integration
def test_a_strict_efficiency_or_a_drifting_loss_stops_at_the_named_gate(climbed):
    first, one_node, _ = (r.measure for r in climbed.results)
    strict = LadderSettings(min_efficiency=1000.0)
    result = judge(first, first, one_node, strict)
    assert not result.passed
    assert [(g.name, g.passed) for g in result.gates] == [
        ("ran", True),
        ("loss", True),
        ("efficiency", False),
    ]
    assert f"E(2) = ({one_node.tokens_per_second:.0f} / 2)" in result.gates[-1].evidence
    assert "(minimum 1000)" in result.gates[-1].evidence
    drifted = {s: v * (1.1 if s == 3 else 1.0) for s, v in one_node.losses.items()}
    bad = one_node.model_copy(update={"losses": drifted})
    result = judge(first, first, bad, LadderSettings())
    assert [(g.name, g.passed) for g in result.gates] == [("ran", True), ("loss", False)]
    assert "at step 3 (limit 0.02)" in result.gates[-1].evidence


def test_rungs_follow_the_target_shape_and_drop_repeats(tmp_path):
    def shapes(nodes: int, per_node: int, node_devices: int | None = None) -> list[tuple]:
        spec = spec_from_mapping(
            {
                "name": "shape",
                "code": {"entrypoint": "train.py"},
                "training": {"global_batch_samples": 8, "steps": 4},
                "resources": {"nodes": nodes, "devices_per_node": per_node},
            }
        )
        return [(r.name, r.world_size) for r in ladder_rungs(spec, node_devices)]

    assert shapes(1, 1) == [("one rank", 1)]
    assert shapes(1, 4) == [("one rank", 1), ("one node", 4)]
    assert shapes(2, 1) == [("one rank", 1), ("one node", 2), ("two nodes", 2)]
    assert shapes(4, 2, node_devices=2) == [
        ("one rank", 1),
        ("one node", 2),
        ("two nodes", 4),
        ("target", 8),
    ]


def test_bad_tolerances_are_refused_naming_the_option(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: x\n")
    result = CliRunner().invoke(app, ["ladder", str(spec), "--loss-tolerance", "0"])
    assert result.exit_code == 2
    assert "--loss-tolerance 0.0: give a number above 0" in result.output


@pytest.mark.integration
def test_the_ladder_page_reads_in_headless_chromium(climbed, tmp_path):
    chromium, sync_playwright = playwright_chromium()
    png = tmp_path / "ladder.png"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=FLAGS)
        context = browser.new_context(viewport={"width": 1280, "height": 1400}, offline=True)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"file://{climbed.html_path}", timeout=LOAD_SECONDS * 1000)
        assert not errors, errors
        text = page.inner_text("body")
        assert "every rung passed" in text
        assert page.locator("svg.curves polyline").count() == 3
        for r in climbed.results:
            assert r.measure.run_id in text
            assert r.measure.carry_run_id is None or r.measure.carry_run_id in text
        page.screenshot(path=str(png))
        browser.close()
    assert_not_blank(png)
