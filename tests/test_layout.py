"""The run layout: one root resolution, the documented tree, and docs/control.md agreeing."""

import ast
import re
from pathlib import Path

import pytest

from runwright import layout

DOCS = Path(__file__).resolve().parents[1] / "docs" / "control.md"


def _tree(text: str) -> str:
    """The first fenced block whose first line is the store file's."""
    match = re.search(r"```\n(<root>/state\.db.*?)```", text, re.S)
    assert match, "no layout tree found"
    return match.group(1)


def test_docs_show_the_layout_the_module_documents():
    assert layout.__doc__ is not None
    assert _tree(DOCS.read_text()) == _tree(layout.__doc__)


def test_root_is_the_option_else_the_environment_else_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(layout.ROOT_ENV, raising=False)
    assert layout.resolve_root() == tmp_path / ".runwright"
    monkeypatch.setenv(layout.ROOT_ENV, str(tmp_path / "env"))
    assert layout.resolve_root() == tmp_path / "env"
    assert layout.resolve_root(tmp_path / "opt") == tmp_path / "opt"
    assert layout.resolve_root("rel") == tmp_path / "rel"  # always absolute


def test_every_path_lies_where_the_tree_says(tmp_path):
    tree = _tree(layout.__doc__ or "")
    run = layout.run_paths(tmp_path, "r1")
    attempt = run.attempt(3)
    documented = {
        layout.store_file(tmp_path): "<root>/state.db",
        layout.dataset_dir(tmp_path, "abc"): "<root>/datasets/<dataset_id>/",
        layout.recipes_dir(tmp_path): "<root>/datasets/recipes/",
        layout.dataset_work_dir(tmp_path, "k"): "<root>/datasets/.work/<recipe_key>/",
        layout.drills_dir(tmp_path) / "d1": "<root>/drills/<drill_id>/",
        layout.local_run_paths(tmp_path, "r1").folder: "<root>/local/<run_id>/",
        run.folder: "<root>/runs/<run_id>/",
        run.spec_file: "spec.json",
        run.controller_log: "controller.log",
        run.checkpoints: "checkpoints/",
        run.channel_file(3, 1): "channel/gen<G>-rank<R>.jsonl",
        run.stop_file(3): "control/stop-gen<G>.json",
        run.timeline_file(3, 1): "timeline/gen<G>-rank<R>.jsonl",
        run.final_parameters: "final_parameters.json",
        attempt.folder: "attempts/gen<G>/",
        attempt.pid_file: "pid",
        attempt.agents_file: "agents.json",
        attempt.supervisor_log: "supervisor.log",
        attempt.exit_status_file: "exit_status",
        attempt.node_exits_file: "node_exits.json",
        attempt.rank_manifest_file: "rank_manifest.json",
        attempt.node(1).folder: "nodes/node<N>/",
        attempt.node(1).torchrun_log: "torchrun.log",
        attempt.node(1).rank_logs: "ranks/",
        attempt.node(1).record: "node.json",
        attempt.launch_file: "launch.json",
        attempt.launcher_log: "srun.log",
        run.allocation(2).folder: "allocations/req<N>/",
        run.allocation(2).job_file: "job.json",
        run.allocation(2).claim_file: "claim",
        run.allocation(2).token_file: "token",
        run.allocation(2).agent_file: "agent.json",
        run.allocation(2).agent_log: "agent.log",
        run.allocation(2).probe_answer("n7"): "probe/<host>.json",
        run.allocation(2).release_file: "release",
        run.diagnostics_bundle(3): "diagnostics/gen<G>/bundle.json",
        run.guard_capture(3, 7, 1): "diagnostics/gen<G>/guard-step<S>-rank<R>.json",
        run.collective_dump(3, 1): "diagnostics/gen<G>/rank<R>-collectives.json",
        run.stack_dump(3, 1): "diagnostics/gen<G>/rank<R>-stacks.txt",
        run.nccl_trace(3, 1): "diagnostics/gen<G>/rank<R>-nccl-trace.pkl",
        run.report: "report/",
    }
    for path, entry in documented.items():
        assert re.search(rf"^\s*{re.escape(entry)}\s", tree, re.M), entry
        spelled = entry.replace("<root>", str(tmp_path)).replace("<run_id>", "r1")
        spelled = spelled.replace("<dataset_id>", "abc").replace("<recipe_key>", "k")
        spelled = spelled.replace("<drill_id>", "d1")
        spelled = spelled.replace("<G>", "00003").replace("<R>", "00001").rstrip("/")
        spelled = spelled.replace("node<N>", "node00001").replace("<N>", "00002")
        spelled = spelled.replace("<host>", "n7").replace("<S>", "000000007")
        assert str(path).endswith(spelled), (path, entry)
    assert attempt.folder.parent == run.attempts and attempt.generation == 3
    assert attempt.node(1).folder.parent == attempt.nodes and attempt.node(1).node == 1


def test_node_folders_are_found_and_an_older_attempt_reads_as_node_0(tmp_path):
    attempt = layout.run_paths(tmp_path, "r1").attempt(2)
    assert attempt.node_paths() == []
    attempt.folder.mkdir(parents=True)
    (attempt.folder / "torchrun.log").write_text("")  # the layout before per-node folders
    assert attempt.node_paths() == [layout.NodePaths(attempt.folder, 0)]
    for node in (1, 0):
        attempt.node(node).rank_logs.mkdir(parents=True)
    (attempt.nodes / "stray").mkdir()
    assert attempt.node_paths() == [attempt.node(0), attempt.node(1)]
    assert [layout.parse_node(n) for n in ("node00012", "node", "nodes")] == [12, None, None]


@pytest.mark.parametrize(
    ("name", "generation"),
    [("gen00003", 3), ("gen123456", 123456), ("gen", None), ("genx", None), ("ranks", None)],
)
def test_generation_names_parse_back(name, generation):
    assert layout.parse_generation(name) == generation
    if generation is not None and generation < 10**5:
        assert layout.generation_name(generation) == name


SRC = Path(__file__).resolve().parents[1] / "src" / "runwright"
LAYOUT_NAMES = {
    "runs", "local", "datasets", "recipes", ".work", "state.db", "spec.json", "controller.log",
    "checkpoints", "channel", "control", "timeline", "attempts", "diagnostics", "report",
    "pid", "exit_status", "rank_manifest.json", "torchrun.log", "ranks", "bundle.json",
    "agents.json", "supervisor.log", "node_exits.json", "nodes",
    "launch.json", "srun.log", "node.json", "allocations", "job.json", "agent.json", "agent.log",
}  # fmt: skip


def _joins_a_layout_name(node: ast.AST) -> bool:
    """`x / "channel"` or `x / f"gen{g:05d}..."`: a path of the layout spelled by hand."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)):
        return False
    right = node.right
    if isinstance(right, ast.Constant):
        return right.value in LAYOUT_NAMES
    if isinstance(right, ast.JoinedStr) and right.values:
        first = right.values[0]
        return isinstance(first, ast.Constant) and str(first.value).startswith(("gen", "stop-gen"))
    return False


def test_no_module_but_layout_spells_the_layout():
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = str(path.relative_to(SRC))
        if rel == "layout.py":
            continue
        lines = [n.lineno for n in ast.walk(ast.parse(path.read_text())) if _joins_a_layout_name(n)]
        if lines:
            found[rel] = lines
    assert found == {}, "build these paths with runwright.layout instead"
