"""The README's first hour, run as a new user runs it: the block under "The first hour, as one
script" on a fresh root, top to bottom, with the installed `runwright` and `python` on PATH.
Every command of the README's command list is either in that block or named below with the
test that covers it, so a command cannot be listed without being run somewhere."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from runwright.store import Store

REPO = Path(__file__).resolve().parents[1]

# Commands of the list that the script leaves to a test of their own, and why.
COVERED_ELSEWHERE = {
    "demo": "tests/demo/test_demo.py (the README's first command)",
    "spec schema": "tests/cli/test_cli.py",
    "server": "tests/server (a real uvicorn server)",
    "token": "tests/server/test_local_cli.py",
    "project": "tests/server/test_local_cli.py",
    "audit": "tests/server/test_local_cli.py",
    "--server": "tests/server (every command through the API)",
    "plan": "tests/plan (each planner command)",
    "preflight": "tests/govern/test_preflight_checks.py",
    "lineage": "tests/govern/test_lineage.py",
    "postmortem": "tests/govern/test_postmortem.py",
    "release": "tests/govern/test_release.py, tests/server/test_releases.py",
    "pause": "tests/control/test_pause.py (pause, resume and an alert's pause on a live run)",
    "resume": "tests/control/test_pause.py",
    "rollback": "tests/control/test_operator_actions.py (each operator action on a live run)",
    "skip-shard": "tests/control/test_operator_actions.py",
    "move": "tests/control/test_operator_actions.py",
    "stop": "tests/control/test_operator_actions.py",
    "drill": "tests/drill/test_drill_runs.py (two faults; the whole matrix with -m slow)",
    "ladder": "tests/ladder/test_ladder.py (1 rank -> 2 ranks -> 2 local nodes)",
    "gc": "tests/control/test_cleaner.py",
    "baseline": "tests/govern/test_baseline_runs.py (record, check, a slower data path fails)",
    "experiment": "tests/govern/test_experiments.py (create, add, show, contaminate)",
}


def _readme() -> str:
    return (REPO / "README.md").read_text()


def _script() -> str:
    block = re.search(r"The first hour, as one script.*?```bash\n(.*?)```", _readme(), re.S)
    assert block, "the README's first-hour script is gone"
    return block.group(1)


GROUPS = ("spec", "ckpt", "data", "plan", "token", "project")


def _listed_commands() -> set[str]:
    """Each command of the README's list: `status`, or `ckpt verify` for a command group;
    `a|b` and `x | y` are alternatives."""
    block = re.search(r"## Using it\n.*?```\n(.*?)```", _readme(), re.S)
    assert block, "the README's command list is gone"
    found = set()
    for line in block.group(1).splitlines():
        code = line.split("#")[0].strip()
        if not code.startswith("runwright "):
            continue
        for segment in code.removeprefix("runwright ").split(" | "):
            words = segment.split()
            if not words or not re.fullmatch(r"--server|[a-z][a-z|-]*", words[0]):
                continue  # an option's alternatives, e.g. `[--tls-cert C | --behind-tls-proxy]`
            if words[0] in GROUPS and len(words) > 1:
                found.update(f"{words[0]} {sub}" for sub in words[1].split("|"))
            else:
                found.update(words[0].split("|"))
    return found


def test_every_listed_command_is_run_by_the_script_or_a_named_test():
    script = _script()
    ran = set()
    for line in script.splitlines():
        for match in re.finditer(r"runwright ((?:--)?[a-z-]+)(?: ([a-z-]+))?", line):
            ran.add(match.group(1))
            if match.group(2):
                ran.add(f"{match.group(1)} {match.group(2)}")
    left = {
        c
        for c in _listed_commands()
        if c not in ran and c.split()[0] not in COVERED_ELSEWHERE and c not in COVERED_ELSEWHERE
    }
    assert not left, f"README commands neither in the first-hour script nor covered: {left}"


@pytest.mark.integration
@pytest.mark.timeout(900)  # three short trainings and ~30 CLI starts; ~2 min on a quiet 2-core box
def test_the_first_hour_script_runs_top_to_bottom_on_a_fresh_root(tmp_path):
    root = tmp_path / ".runwright"
    env = {
        **os.environ,
        "RUNWRIGHT_ROOT": str(root),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("RUNWRIGHT_STORE", None)
    done = subprocess.run(
        ["bash", "-eu", "-c", _script()],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    shown = f"stdout:\n{done.stdout[-6000:]}\nstderr:\n{done.stderr[-4000:]}"
    assert done.returncode == 0, shown
    assert "Traceback" not in done.stdout + done.stderr, shown
    assert "bitwise-equal" in done.stdout, shown
    runs = Store.open(root).list_runs()
    states = sorted(run.state for run in runs)
    assert states == ["CANCELLED", "SUCCEEDED", "SUCCEEDED"], shown
    cancelled = next(run for run in runs if run.state == "CANCELLED")
    assert (cancelled.last_step or 0) >= 1, "the long run was cancelled before it trained"
    reports = list(root.glob("runs/*/report/report.html"))
    assert reports, shown
    assert list((root / "exports").glob("*/config.json")), shown
