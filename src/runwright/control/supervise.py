"""The worker-group supervisor: `python -m runwright.control.supervise EXIT_FILE -- ARGV...`.

It runs torchrun as its child, forwards SIGTERM/SIGINT to it, and writes torchrun's exit status to
EXIT_FILE atomically before exiting with the same status. The controller starts it in a session
of its own, so the group outlives a controller crash; a restarted controller, which is not the
parent and cannot wait() for it, reads the exit file instead.

torchrun dies with the supervisor: its parent-death signal (runwright/lifetime.py, set between
fork and exec; this process is single-threaded, so its main thread is the forking thread) SIGKILLs
it when the supervisor exits, and the ranks' own parent-death signals then take them. A killed
supervisor therefore leaves no group training without anyone to report its exit; the executor
sees the missing exit file and treats the group as lost (executors/local.py,
WorkerGroup.repair_lost).
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

from runwright.lifetime import die_with_pid


def write_exit(path: Path, code: int) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(f"{code}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m runwright.control.supervise EXIT_FILE -- ARGV...", file=sys.stderr)
        return 2
    exit_file = Path(argv[0])
    me = os.getpid()
    child = subprocess.Popen(argv[2:], preexec_fn=lambda: die_with_pid(me))

    def forward(signum: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = child.wait()
    write_exit(exit_file, code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
