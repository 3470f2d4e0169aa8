"""What `runwright submit` prints while it drives a run: one progress line, and the events a
person needs to read.

Every rank reports every step (STEP_HEALTHY), so printing events as they come buries the few that
matter (state changes, checkpoints, failures, recoveries) under thousands of step lines. Step
events only move the progress line: the newest step, the loss rank 0 reported for it, and an ETA
from the step rate since the first step this generation reported. On a terminal the line is a
live rich progress bar; elsewhere (a CI log, a pipe) it is a plain line printed at most every
`PLAIN_EVERY_SECONDS` and at each tenth of the run.
"""

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from runwright.control.summary import event_line
from runwright.events import EventType
from runwright.observe.rank_steps import RANKS, rank_view
from runwright.store import EventRecord

PROGRESS_ONLY = frozenset({EventType.STEP_HEALTHY})
"""Event types that move the progress line instead of printing a line each."""
QUIET = frozenset({EventType.SYSTEM_SAMPLE})
"""Telemetry not printed while a run is driven (a node's sample every few seconds): the
dashboard, /metrics and `runwright events` show it."""
PLAIN_EVERY_SECONDS = 10.0
"""Longest gap between two plain progress lines (not on a terminal)."""


class SubmitProgress:
    """Renders a driven run's events: `on_event` is the controller's event callback."""

    def __init__(self, console: Console, total_steps: int | None) -> None:
        self.console = console
        self.total_steps = total_steps
        self.step = 0
        self.loss: float | None = None
        self._started: tuple[float, int] | None = None
        """(the worker's time, step) of the first step seen since the last (re)start: the ETA's
        origin, reset when a new generation starts from a restored step. The workers' own times,
        not the moment the controller ingested the event, which come in batches."""
        self._latest_s = 0.0
        self._printed_at = 0.0
        self._printed_tenth = -1
        self._bar: Progress | None = None
        self._task: Any = None
        if console.is_terminal:
            self._bar = Progress(
                TextColumn("step"),
                MofNCompleteColumn(),
                BarColumn(),
                TextColumn("{task.fields[loss]}"),
                TextColumn("{task.fields[eta]}"),
                console=console,
                transient=True,
            )
            self._task = self._bar.add_task("steps", total=total_steps, loss="", eta="")

    def __enter__(self) -> "SubmitProgress":
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def on_event(self, event: EventRecord) -> None:
        if event.type in PROGRESS_ONLY and event.step is not None:
            self._advance(event)
            return
        if event.type in QUIET:
            return
        if event.type == EventType.RESTORED:
            self._started = None  # a new generation: the rate restarts from its restored step
        self.console.print(event_line(event), highlight=False, soft_wrap=True)

    def _advance(self, event: EventRecord) -> None:
        step = event.step or 0
        # Rank 0's loss (a rank-less report's): a folded step row holds it among its ranks'.
        own = rank_view(event, 0) if RANKS in event.attributes else event
        if (
            own is not None
            and own.attributes.get("rank", 0) == 0
            and isinstance(own.attributes.get("loss"), float)
        ):
            self.loss = own.attributes["loss"]
        if step <= self.step:
            return
        self.step = step
        self._latest_s = event.time_unix_s
        if self._started is None:
            self._started = (event.time_unix_s, step)
        now = time.monotonic()
        if self._bar is not None:
            loss = f"loss {self.loss:.4g}" if self.loss is not None else ""
            eta = self.eta_seconds()
            eta_text = f"ETA {_duration(eta)}" if eta is not None else ""
            self._bar.update(self._task, completed=step, loss=loss, eta=eta_text)
            return
        tenth = int(10 * step / self.total_steps) if self.total_steps else -1
        if now - self._printed_at >= PLAIN_EVERY_SECONDS or tenth > self._printed_tenth:
            self._printed_at, self._printed_tenth = now, tenth
            self.console.print(self.line(), highlight=False)

    def eta_seconds(self) -> float | None:
        """Seconds to the last step at the rate since the first step of this generation."""
        if self._started is None or not self.total_steps:
            return None
        since, first = self._started
        done = self.step - first
        if done <= 0 or self._latest_s <= since:
            return None
        return (self.total_steps - self.step) * (self._latest_s - since) / done

    def line(self) -> str:
        total = f"/{self.total_steps}" if self.total_steps else ""
        parts = [f"step {self.step}{total}"]
        if self.total_steps:
            parts.append(f"{100 * self.step / self.total_steps:.0f}%")
        if self.loss is not None:
            parts.append(f"loss {self.loss:.4g}")
        eta = self.eta_seconds()
        if eta is not None:
            parts.append(f"ETA {_duration(eta)}")
        return "  ".join(parts)


def _duration(seconds_float: float) -> str:
    seconds = round(seconds_float)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
