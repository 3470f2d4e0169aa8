"""The controller beside the API: `runwright controller --daemon` on the same store and root, as
a child process the server starts, restarts if it dies, and stops when the server stops.

A process, not a thread: the controller's passes (ingest, supervision) and the API's requests
then never take turns on one interpreter lock, so neither slows the other. Stopping it leaves
the workers running; the next controller adopts them (docs/control.md). `start_controller` is
the one place the server starts it, so a lease-holding controller plugs in here.
"""

import functools
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from runwright.lifetime import die_with_pid

log = logging.getLogger("runwright.server")
RESTART_BACKOFF_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Waits before restarting a controller that died, growing with each quick death."""
STABLE_SECONDS = 60.0
"""A controller that ran this long before it died starts the backoff over."""


class ControllerProcess:
    """A supervised `runwright controller --daemon` child."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self._stop = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._supervise, name="controller", daemon=True)

    def start(self) -> "ControllerProcess":
        self._thread.start()
        return self

    @property
    def pid(self) -> int | None:
        with self._lock:
            return self._proc.pid if self._proc is not None else None

    def _supervise(self) -> None:
        failures = 0
        while not self._stop.is_set():
            started = time.monotonic()
            with self._lock:
                if self._stop.is_set():
                    return
                # SIGKILLed if the server dies without stopping it (no second controller
                # lingers); its workers live on and the next controller adopts them.
                self._proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    preexec_fn=functools.partial(die_with_pid, os.getpid()),
                )
            code = self._proc.wait()
            if self._stop.is_set():
                return
            failures = 0 if time.monotonic() - started > STABLE_SECONDS else failures + 1
            wait = RESTART_BACKOFF_SECONDS[min(failures, len(RESTART_BACKOFF_SECONDS) - 1)]
            log.warning("the controller exited with %s; restarting it in %.0f s", code, wait)
            self._stop.wait(wait)

    def stop(self, timeout_seconds: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `timeout_seconds`; the workers are left running."""
        self._stop.set()
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout_seconds)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._thread.join(timeout_seconds)


def start_controller(store_url: str, root: Path) -> ControllerProcess:
    """Start the controller that drives every run of the store (what the server runs beside
    the API)."""
    argv = [
        sys.executable,
        "-m",
        "runwright.cli.main",
        "controller",
        "--daemon",
        "--root",
        str(root),
        "--store",
        store_url,
    ]
    return ControllerProcess(argv).start()
