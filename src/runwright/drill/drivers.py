"""How a drill's run is driven: by a controller in the drill's own process, or by `runwright
controller` processes that a fault may kill and start again.

Either way every event the run records reaches one hook (the progress display and the fault's
injector) in the order the store holds them, and a run that has not ended after `limit_seconds`
is cancelled, so a fault the platform fails to handle ends the drill's run instead of hanging
the drill.
"""

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from runwright.control.cancel import request_cancel
from runwright.control.controller import Controller
from runwright.control.states import TERMINAL, RunState
from runwright.errors import DrillError
from runwright.spec import JobSpec
from runwright.store import EventRecord, RunRecord, Store

POLL_SECONDS = 0.05
"""The controller's pass interval in a drill: a fault lands within a step or two of the report
it was aimed at (the demo's figure)."""

Hook = Callable[[EventRecord], None]


class _Deadline:
    """Cancels the run once `limit_seconds` have passed (from a timer thread)."""

    def __init__(self, store: Store, run_id: str, limit_seconds: float) -> None:
        why = f"the drill's limit of {limit_seconds:.0f} s for one run passed"
        self.timer = threading.Timer(limit_seconds, lambda: request_cancel(store, run_id, why))
        self.timer.daemon = True

    def __enter__(self) -> "_Deadline":
        self.timer.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.timer.cancel()


def interrupted(run_id: str) -> DrillError:
    return DrillError(f"interrupted (Ctrl-C): run {run_id} was cancelled and the drill stopped")


class InProcessDriver:
    """The run's controller runs in the drill's process (as `runwright submit` runs it)."""

    def __init__(self, store: Store, root: Path) -> None:
        self.store, self.root = store, root
        self.controller = Controller(store, root, poll_seconds=POLL_SECONDS)
        self.restart_controller: Callable[[], str] | None = None

    def submit(self, spec: JobSpec, workdir: Path) -> RunRecord:
        run, _ = self.controller.submit(spec, workdir)
        return run

    def drive(self, run_id: str, hook: Hook, limit_seconds: float) -> RunRecord:
        """The controller's drive cancels the run on Ctrl-C and returns it ended; noted here
        so the drill stops rather than go on to the next fault."""
        self.controller.on_event = hook
        pressed: list[bool] = []

        def on_interrupt(signum: int, frame: object) -> None:
            pressed.append(True)
            raise KeyboardInterrupt

        main = threading.current_thread() is threading.main_thread()  # signals reach it only
        previous = signal.signal(signal.SIGINT, on_interrupt) if main else None
        try:
            with _Deadline(self.store, run_id, limit_seconds):
                ended = self.controller.drive(run_id)
        finally:
            if main:
                signal.signal(signal.SIGINT, previous)
        if pressed:
            raise interrupted(run_id)
        return ended


class ProcessDriver:
    """The run's controller is a `runwright controller RUN` process; this one follows the run's
    events in the store and can SIGKILL the controller and start another on the same store
    (`restart_controller`), which must adopt the live group."""

    def __init__(self, store: Store, root: Path, logs: Path) -> None:
        self.store, self.root, self.logs = store, root, logs
        self.process: subprocess.Popen[bytes] | None = None
        self.lives = 0
        self.run_id = ""

    def submit(self, spec: JobSpec, workdir: Path) -> RunRecord:
        run, _ = Controller(self.store, self.root).submit(spec, workdir)
        self.run_id = run.run_id
        return run

    def _start(self) -> subprocess.Popen[bytes]:
        self.lives += 1
        self.logs.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "runwright.cli.main", "controller", self.run_id]
        argv += ["--root", str(self.root), "--store", self.store.url]
        with (self.logs / f"controller-{self.lives}.log").open("wb") as log:
            # Its own session: a Ctrl-C at the drill's terminal is the drill's to handle.
            return subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def restart_controller(self) -> str:
        assert self.process is not None
        killed = self.process.pid
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.process = self._start()
        return f"SIGKILL to controller pid {killed}; controller pid {self.process.pid} started"

    def drive(self, run_id: str, hook: Hook, limit_seconds: float) -> RunRecord:
        """Follow the run until its controller has ended it. On Ctrl-C the run is cancelled and
        followed until the controller has wound it down, then the drill stops."""
        self.process = self._start()
        try:
            with _Deadline(self.store, run_id, limit_seconds):
                try:
                    return self._follow(run_id, hook)
                except KeyboardInterrupt:
                    request_cancel(self.store, run_id, "the drill was interrupted (Ctrl-C)")
                    self._follow(run_id, lambda _event: None)
                    raise interrupted(run_id) from None
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()

    def _follow(self, run_id: str, hook: Hook) -> RunRecord:
        seen = 0
        while True:
            assert self.process is not None
            code = self.process.poll()  # before reading: what it wrote before exiting is read
            for event in self.store.events(run_id, after_seq=seen):
                seen = event.seq
                hook(event)
            if code is not None:
                run = self.store.get_run(run_id)
                if RunState(run.state) in TERMINAL:
                    return run
                log = self.logs / f"controller-{self.lives}.log"
                raise DrillError(
                    f"the controller of run {run_id} exited {code} with the run {run.state}; "
                    f"its output is in {log}"
                )
            time.sleep(POLL_SECONDS)
