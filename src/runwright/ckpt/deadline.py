"""A save that storage leaves hanging must not hang the run: `checkpoint.save_timeout_seconds`.

The bound is on one persist (shard writes through the publish), measured from when it starts
writing: a sync save's persist runs on a helper thread the step waits for, an async one on the
backlog's worker (backlog.py), and whoever waits for either stops waiting at the deadline. A write
blocked in the kernel or in a store's client cannot be interrupted from Python, and it goes on
holding the checkpointer's persist group (its collectives are half done on some ranks) and the
snapshot's buffers; so a save that overran is not skippable like a refused one: the checkpointer
raises `CheckpointStorageError` with errno ETIMEDOUT whatever `on_save_failure` says, refuses
every later save in this process, and the restart the `storage` failure class gets starts clean
(its generation restores the latest checkpoint, which the overdue save never moved). The stuck
thread is a daemon thread, so the process can exit past it.
"""

import errno
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from runwright.ckpt.errors import CheckpointStorageError
from runwright.ckpt.records import StorageFailure

T = TypeVar("T")


def call_within(
    call: Callable[[], T], seconds: float, overran: Callable[[float], BaseException]
) -> T:
    """`call()` on a daemon thread: its result, or its exception re-raised here, or
    `overran(seconds)` raised once `seconds` passed without an answer (the call goes on)."""
    outcome: list[tuple[bool, Any]] = []
    finished = threading.Event()
    # The helper thread works on the caller's accelerator: DCP copies device tensors on the
    # current device's streams, and a new thread's current device is device 0.
    device = torch.accelerator.current_device_index() if torch.accelerator.is_available() else None

    def run() -> None:
        try:
            if device is not None:
                torch.accelerator.set_device_index(device)
            outcome.append((True, call()))
        except BaseException as exc:
            outcome.append((False, exc))
        finally:
            finished.set()

    threading.Thread(target=run, name="runwright-ckpt-save", daemon=True).start()
    if not finished.wait(seconds):
        raise overran(seconds)
    succeeded, value = outcome[0]
    if succeeded:
        return value
    raise value


def timed_out(
    step: int, checkpoint_id: str, path: str, limit_seconds: float, persisting_seconds: float
) -> CheckpointStorageError:
    """The error of a save that has persisted for `persisting_seconds`, past `limit_seconds`."""
    return CheckpointStorageError(
        StorageFailure(
            action=f"checkpoint save of step {step} ({checkpoint_id})",
            path=path,
            cause=(
                f"TimeoutError: [Errno {errno.ETIMEDOUT}] {os.strerror(errno.ETIMEDOUT)}: still "
                f"persisting after {persisting_seconds:.1f} s, past checkpoint."
                f"save_timeout_seconds={limit_seconds:g}"
            ),
            errno=errno.ETIMEDOUT,
            remedy=(
                "A write storage leaves blocked cannot be abandoned inside this process, so the "
                "run stops whatever on_save_failure says; its restart restores the latest "
                "checkpoint, which this save never moved. Check the storage; raise "
                "checkpoint.save_timeout_seconds if saves are legitimately this slow."
            ),
        )
    )
