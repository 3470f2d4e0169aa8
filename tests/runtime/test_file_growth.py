"""runtime/file_growth.py: a waiter wakes when the file is written, sleeps while it is not, and
ends when closed; where the kernel gives no inotify it polls."""

import sys
import threading
import time
from pathlib import Path

import pytest

from runwright.runtime import file_growth
from runwright.runtime.file_growth import FileGrowth


def wake_count(thread: threading.Thread) -> int:
    """How many times the kernel ran the thread (the third field of its schedstat)."""
    return int(Path(f"/proc/self/task/{thread.native_id}/schedstat").read_text().split()[2])


def asleep(thread: threading.Thread) -> bool:
    """The thread is blocked (state S) and was not run again over 50 ms: it waits in select."""
    task = Path(f"/proc/self/task/{thread.native_id}")
    before = wake_count(thread)
    time.sleep(0.05)
    state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
    return state == "S" and wake_count(thread) == before and before > 0


def waiter(growth: FileGrowth, seen: list[bool]) -> threading.Thread:
    def run() -> None:
        while True:
            grew = growth.wait() and growth.settled(0.01)  # as the dumper does
            seen.append(grew)
            if not grew:
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def wait_for(condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the waiter did not answer"
        time.sleep(0.01)


@pytest.mark.parametrize("kernel", [True, False], ids=["inotify", "polling"])
def test_a_write_wakes_the_waiter_and_close_ends_it(tmp_path, monkeypatch, kernel):
    if not kernel:
        monkeypatch.setattr(file_growth, "_inotify", lambda path: None)
    path = tmp_path / "stacks.txt"
    path.write_text("")
    growth = FileGrowth(path)
    # Off Linux there is no inotify: both cases run the polling path, as the product does.
    assert growth.kernel_notified is (kernel and sys.platform.startswith("linux"))
    seen: list[bool] = []
    thread = waiter(growth, seen)
    with path.open("a") as fh:
        fh.write("Thread 0x1 (most recent call first):\n")
    wait_for(lambda: seen == [True])
    with path.open("a") as fh:
        fh.write("  File x.py, line 3 in f\n")
    wait_for(lambda: seen == [True, True])
    growth.close()
    thread.join(timeout=30)
    assert not thread.is_alive() and seen[-1] is False
    growth.release()
    growth.close()  # idempotent


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc schedstat")
def test_an_idle_waiter_is_never_scheduled(tmp_path):
    """The point of the module: a dumper with nothing to dump takes no CPU and no GIL. Counted in
    wake-ups over a second (the poll it replaces woke 4 times)."""
    path = tmp_path / "stacks.txt"
    path.write_text("")
    growth = FileGrowth(path)
    if not growth.kernel_notified:
        pytest.skip(
            "fs.inotify.max_user_instances is used up on this host: the dumper polls here, "
            "which the polling case above covers"
        )
    seen: list[bool] = []
    thread = waiter(growth, seen)
    wait_for(lambda: asleep(thread))  # in select, however long a busy machine took to get there
    before = wake_count(thread)
    time.sleep(1.0)
    assert wake_count(thread) == before and seen == []
    growth.close()
    thread.join(timeout=30)
    assert seen == [False]
    growth.release()
