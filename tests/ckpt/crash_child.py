"""Child process of the crash-consistency tests: commit step 1, then die during step 2's save.

Usage: python crash_child.py ROOT KILL_AT KILL_BYTES SAVED
ROOT is a folder or an s3:// URL (the fence is the root's own: `open_fence`). KILL_AT is a
CommitStep value; with `write_shards`, the process dies once KILL_BYTES bytes of
shards are written. The process SIGKILLs itself, so nothing after the kill point runs.
SAVED is a local folder outside ROOT: before each save, `saved-<step>.pt` there records what that
save holds (`saved_record`), for the test to compare the restored state with.
"""

import os
import signal
import sys
from pathlib import Path

import torch
from ckpt_helpers import make_state, saved_record

from runwright.ckpt import Checkpointer, CommitStep, MemorySink
from runwright.ckpt.fence import open_fence
from runwright.spec.policies import CheckpointSpec


class KillAt:
    def __init__(self, step: str, kill_bytes: int) -> None:
        self.step, self.kill_bytes, self.armed = CommitStep(step), kill_bytes, False

    def reached(self, step: CommitStep, bytes_written: int = 0) -> None:
        if not self.armed or step != self.step:
            return
        if step != CommitStep.WRITE_SHARDS or bytes_written >= self.kill_bytes:
            os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    root, kill_at, kill_bytes, saved = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    fence = open_fence(root)
    fence.advance_generation()
    probe = KillAt(kill_at, kill_bytes)
    saver = Checkpointer(
        root, policy=CheckpointSpec(), fence=fence, probe=probe, events=MemorySink()
    )
    for step in (1, 2):
        state = make_state(seed=step, width=256)
        torch.save(saved_record(state), Path(saved, f"saved-{step}.pt"))
        probe.armed = step == 2
        saver.save(step, state)
    print("survived")


if __name__ == "__main__":
    main()
