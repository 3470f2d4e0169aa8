"""A Slurm node's torchrun leaves a preemption's SIGTERM to its ranks (slurm_node.py, "Signals").

Slurm signals every process of a step. Had torchrun handled the SIGTERM it got, it would tear its
ranks down at once and exit non-zero, and a preempted run would lose the steps since its last
checkpoint (torchrun overwrites TORCHELASTIC_SIGNALS_TO_HANDLE with its `--signals-to-handle`
option, so only the option keeps SIGTERM out). Real torchrun, started the way the node agent starts
it, one rank; no Slurm needed. The whole path under Slurm is tests/control/slurm's preemption test.
"""

import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from runwright.control.executors.slurm_node import TORCHRUN_SIGNALS, start_torchrun
from runwright.control.executors.torchrun import torchrun_argv
from runwright.spec import spec_from_mapping

pytestmark = pytest.mark.integration

SKELETON = Path(__file__).parents[2] / "src" / "runwright" / "demo" / "skeleton.yaml"
START_SECONDS = 120.0
"""How long torchrun and its rank may take to start on a loaded 2-core machine."""

RANK = textwrap.dedent(
    """
    import os, signal, sys, threading
    from pathlib import Path

    here = Path(sys.argv[1])
    got = []
    termed = threading.Event()

    def on_term(signum, frame):
        got.append(signum)
        termed.set()

    signal.signal(signal.SIGTERM, on_term)
    (here / "ready.tmp").write_text(str(os.getpid()))
    os.replace(here / "ready.tmp", here / "ready")
    termed.wait(600)
    (here / "signals").write_text(str(len(got)))
    """
)


def test_the_node_agents_torchrun_leaves_sigterm_to_its_ranks(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    data = yaml.safe_load(SKELETON.read_text())
    data["code"] = {"entrypoint": str(script), "args": [str(tmp_path)]}
    data["resources"]["devices_per_node"] = 1
    data["training"]["global_batch_samples"] = 8
    argv = torchrun_argv(
        spec_from_mapping(data),
        tmp_path,
        log_dir=tmp_path / "logs",
        python=sys.executable,
        signals_to_handle=TORCHRUN_SIGNALS,
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(tmp_path / "torchrun.log", "ab") as log:
        torchrun = start_torchrun(argv, tmp_path, env, log)
    try:
        deadline = time.monotonic() + START_SECONDS
        while not (tmp_path / "ready").exists():
            assert torchrun.poll() is None, (tmp_path / "torchrun.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"no rank within {START_SECONDS:g} s"
            time.sleep(0.1)
        rank = int((tmp_path / "ready").read_text())
        # Slurm's order: torchrun and its rank each get one. A torchrun that handled it would
        # send its rank a second and end non-zero (SignalException).
        torchrun.send_signal(signal.SIGTERM)
        os.kill(rank, signal.SIGTERM)
        code = torchrun.wait(timeout=START_SECONDS)
    finally:
        if torchrun.poll() is None:
            torchrun.kill()
            torchrun.wait()
    assert code == 0, (tmp_path / "torchrun.log").read_text()[-3000:]
    assert (tmp_path / "signals").read_text() == "1"
