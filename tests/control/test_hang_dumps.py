"""Collecting the dumps waits only for ranks that can answer: a rank that is stopped (SIGSTOP)
while the controller waits is dropped at the next look, instead of costing the whole wait
(control/hang_dumps.py). A real process that ignores the dump signal stands for a rank whose
dumper cannot run."""

import os
import signal
import subprocess
import sys
import threading
import time

from runwright.control.hang_dumps import request_dumps
from runwright.layout import run_paths

IGNORES_THE_SIGNAL = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGUSR1, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)


def test_a_rank_stopped_during_the_wait_is_no_longer_awaited(tmp_path):
    rank = subprocess.Popen([sys.executable, "-c", IGNORES_THE_SIGNAL], stdout=subprocess.PIPE)
    try:
        assert rank.stdout is not None and rank.stdout.readline().strip() == b"ready"
        stopper = threading.Timer(1.0, os.kill, (rank.pid, signal.SIGSTOP))
        stopper.start()
        wait = 120.0  # far beyond what dropping it takes, even on a busy machine
        started = time.monotonic()
        dumps = request_dumps(run_paths(tmp_path, "run-a"), 1, {0: rank.pid}, 1, wait)
        took = time.monotonic() - started
        stopper.join()
        assert dumps == {}
        assert 1.0 <= took < wait / 2, took  # dropped at a look after the stop, not at the end
    finally:
        rank.kill()
        rank.wait()
