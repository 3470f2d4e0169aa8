"""The crash harness's fork server: `python forkserver.py`, driven over stdin/stdout.

It imports torch and runwright once, then forks one *life* of a workload per request, so a sweep
of a thousand kills pays a fork (milliseconds) per life instead of an interpreter start and a
torch import (seconds). Each life runs in a session of its own (`setsid`), so the harness can
find every process the life started, and with its output appended to the request's log file.

Protocol, one JSON object per line:
  request  {"workload": NAME, "args": {...}, "log": PATH}
  reply    {"pid": PID}              once the life is forked
  reply    {"exit": CODE}            once it ended (negative: killed by that signal)
The server itself never runs a torch operation, so no thread pool exists at fork time.
"""

import json
import os
import sys
import traceback

import workloads


def run_life(request: dict) -> None:
    """Body of a forked life; never returns."""
    code = 1
    try:
        os.setsid()
        fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        getattr(workloads, request["workload"])(**request["args"])
        code = 0
    except BaseException:  # a life reports every failure by its exit code
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            run_life(request)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"exit": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
