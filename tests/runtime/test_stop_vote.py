"""The step loop's overlapped stop vote across two real gloo ranks: a stop one rank asks for at
boundary k is agreed by both at boundary k + 1 (the vote cast at k is read at k + 1, while the
step between them runs), with the asking rank's own request; without a stop both run to the end
and the vote in flight completes. One pair of processes runs both cases (spawning costs more
than the votes)."""

import json
import os
import time

import torch.distributed as dist
import torch.multiprocessing as mp

from runwright.protocol import StopRequest
from runwright.runtime.stop import OverlappedStopVote

BOUNDARIES = 8
ASK_AT = 3


def _loop(rank: int, asker: int | None) -> list:
    vote = OverlappedStopVote()
    request = StopRequest(reason="cancel", save=False, requested_unix_s=time.time())
    for boundary in range(BOUNDARIES):
        decided = vote.boundary(request if rank == asker and boundary >= ASK_AT else None)
        if decided is not None:
            return [boundary, decided.reason, decided.save]
    vote.finish()
    return [None, None, None]


def _rank(rank: int, folder: str) -> None:
    init = f"file://{os.path.join(folder, 'init')}"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    outcomes = {"rank 1 asks": _loop(rank, asker=1), "nobody asks": _loop(rank, asker=None)}
    dist.destroy_process_group()
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as f:
        json.dump(outcomes, f)


def test_both_ranks_agree_one_boundary_after_the_ask_or_run_to_the_end(tmp_path):
    mp.spawn(_rank, args=(str(tmp_path),), nprocs=2, join=True)
    outcomes = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert outcomes[0] == outcomes[1]
    assert outcomes[0]["rank 1 asks"] == [ASK_AT + 1, "cancel", False]
    assert outcomes[0]["nobody asks"] == [None, None, None]
