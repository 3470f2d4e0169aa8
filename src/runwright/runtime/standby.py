"""A warm standby's rank waiting to become a generation's rank (control/executors/local.py).

The executor starts the next generation's group ahead of a failure, with RUNWRIGHT_STANDBY set on
its ranks. Each rank runs the training script as usual: the interpreter
starts, torch and the script's own imports load, and `runtime.init` comes here before it writes
anything (no channel, no heartbeat, no checkpoint). The rank marks itself ready and waits. When
the controller launches that generation it writes the activation instead of starting processes:
each rank applies the activation's environment (what the launch decided: steps to skip, a resume
source, a rollback bound, devices) and carries on into `init` as a freshly launched rank would.
What a failure then costs is detection, the backoff, the activation and the restore, not an
interpreter and its imports.

A standby that is never activated is killed by the executor (its run ended, paused, was
requeued, or a cold launch replaced it); until then it sleeps, polling one small file.
"""

import os
import time
from pathlib import Path

from runwright.layout import RunPaths
from runwright.protocol import ENV_GENERATION, ENV_RUN_DIR, ENV_STANDBY, read_activation

POLL_SECONDS = 0.02
"""How often a waiting rank looks for its activation: 50 stats a second, ~20 ms of latency."""


def await_activation(rank: int) -> None:
    """Block a standby's rank until its generation is activated, then apply the activation's
    environment; return at once for a rank that is not a standby's."""
    if not os.environ.get(ENV_STANDBY):
        return
    expected = int(os.environ[ENV_GENERATION])
    attempt = RunPaths(Path(os.environ[ENV_RUN_DIR])).attempt(expected)
    path = attempt.activation_file
    ready = attempt.standby_ready_file(rank)
    tmp = ready.with_suffix(".tmp")
    tmp.write_text(f"{os.getpid()} {time.time()}\n")
    os.replace(tmp, ready)
    while (activation := read_activation(path)) is None:
        time.sleep(POLL_SECONDS)
    if activation.generation != expected:
        raise RuntimeError(
            f"standby of generation {expected} activated as generation {activation.generation}"
        )
    os.environ.update(activation.env)
    del os.environ[ENV_STANDBY]
