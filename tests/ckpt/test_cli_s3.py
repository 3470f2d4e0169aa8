"""`runwright ckpt` on an `s3://` checkpoint root: without s3fs, one actionable line (issue 19:
not a traceback); with it, `ckpt list` reads the root on a real S3 server (moto)."""

import json
import os
import subprocess
import sys

import pytest
from ckpt_helpers import make_state

from runwright.ckpt import Checkpointer, MemorySink
from runwright.spec.policies import CheckpointSpec

# The CLI as a user runs it, with s3fs made unimportable (sys.modules[name] = None is how
# Python marks a module that must not be imported).
WITHOUT_S3FS = (
    "import sys; sys.modules['s3fs'] = None; "
    "from runwright.cli.main import main; sys.argv[0] = 'runwright'; main()"
)


def runwright(*args: str, hide_s3fs: bool = False) -> subprocess.CompletedProcess:
    command = (
        [sys.executable, "-c", WITHOUT_S3FS, *args]
        if hide_s3fs
        else [sys.executable, "-m", "runwright.cli.main", *args]
    )
    return subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"}
    )


def test_a_missing_s3fs_is_one_actionable_line():
    done = runwright("ckpt", "list", "s3://my-bucket/checkpoints/run-1", hide_s3fs=True)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "needs s3fs" in lines[0] and "pip install 'runwright[s3]'" in lines[0]


@pytest.mark.integration
def test_ckpt_list_reads_an_s3_root(s3_bucket):
    root = f"{s3_bucket}/run-cli"
    saver = Checkpointer(root, policy=CheckpointSpec(), events=MemorySink())
    saver.save(1, make_state(seed=1))
    saver.save(2, make_state(seed=2, steps=2))
    listed = runwright("ckpt", "list", root, "--json")
    assert listed.returncode == 0, listed.stderr
    found = json.loads(listed.stdout)
    assert [row["step"] for row in found["committed"]] == [2, 1]
    assert found["committed"][0]["latest"] and found["generation"] == 0
