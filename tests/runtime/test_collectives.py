"""The collective preflight (issue 17) on real torchrun (gloo): a healthy group proves every
rank reaches every other and reports the times; a rank that never reaches the barrier is named
by rank 0 within the timeout (not after a whole collective timeout), the failure is reported on
the channel, and the controller's classifier calls it infrastructure."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runwright.control.channel import ChannelReader
from runwright.control.error_kinds import PATTERNS
from runwright.layout import RunPaths
from runwright.spec import FailureClass

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).parent / "scripts" / "collective_check.py"


def launch(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list]:
    run_dir = tmp_path / "run"
    env = {**os.environ, "RUNWRIGHT_RUN_DIR": str(run_dir), "OMP_NUM_THREADS": "1"}
    for name in ("RUNWRIGHT_RUN_ID", "RUNWRIGHT_SPEC_FILE", "RUNWRIGHT_RANK_MANIFEST"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
         str(SCRIPT), *args],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    checked = [
        m for m in ChannelReader(RunPaths(run_dir).channel).poll() if m.type == "COLLECTIVE_CHECKED"
    ]
    return done, checked


def test_a_healthy_group_passes_and_rank_0_reports_the_times(tmp_path):
    done, checked = launch(tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (report,) = checked
    assert report.rank == 0
    attrs = report.attributes
    assert (attrs["ok"], attrs["backend"], attrs["world_size"]) == (True, "gloo", 3)
    assert attrs["barrier_seconds"] >= 0 and attrs["all_reduce_seconds"] >= 0


def test_a_rank_that_never_arrives_is_named_within_the_timeout(tmp_path):
    done, checked = launch(tmp_path, "--stall-rank", "2", "--timeout", "3")
    assert done.returncode != 0
    failed = [m for m in checked if m.attributes["ok"] is False]
    by_rank0 = [m for m in failed if m.rank == 0]
    assert by_rank0, done.stdout[-2000:] + done.stderr[-2000:]
    error = by_rank0[0].attributes["error"]
    assert "not every rank reached the preflight barrier in 3 s" in error
    assert by_rank0[0].attributes["missing_ranks"] == [2]  # the rank that did not arrive
    assert "CollectiveCheckError" in done.stdout
    infrastructure = dict(PATTERNS)[FailureClass.INFRASTRUCTURE]
    assert infrastructure.search(f"CollectiveCheckError: {error}")
