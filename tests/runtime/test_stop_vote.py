"""The step loop's overlapped stop vote across two real gloo ranks. A stop one rank asks for is
agreed by both at the same boundary, with the asking rank's own request; without a stop both run
to the end and the vote in flight completes. Votes are cast every `stride` boundaries, a stride
the ranks agree on from their step times: with quarter-second steps every boundary votes and the
stop asked at boundary k is agreed at k + 1; with instant steps the stride grows to
`MAX_VOTE_STRIDE` and the stop still comes within two strides. One pair of processes runs every
case (spawning costs more than the votes)."""

import json
import os
import time

import torch.distributed as dist
import torch.multiprocessing as mp

from runwright.protocol import StopRequest
from runwright.runtime.stop import MAX_VOTE_STRIDE, VOTE_EVERY_SECONDS, OverlappedStopVote

ASK_AT = 3


def _loop(rank: int, asker: int | None, boundaries: int, step_seconds: float = 0.0) -> list:
    vote = OverlappedStopVote()
    request = StopRequest(reason="cancel", save=False, requested_unix_s=time.time())
    for boundary in range(boundaries):
        decided = vote.boundary(request if rank == asker and boundary >= ASK_AT else None)
        if decided is not None:
            return [boundary, decided.reason, decided.save, vote.stride]
        time.sleep(step_seconds)  # the step between two boundaries
    vote.finish()
    return [None, None, None, vote.stride]


def _rank(rank: int, folder: str) -> None:
    init = f"file://{os.path.join(folder, 'init')}"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    slow = VOTE_EVERY_SECONDS * 1.2
    outcomes = {
        "slow steps, rank 1 asks": _loop(rank, asker=1, boundaries=8, step_seconds=slow),
        "instant steps, rank 0 asks": _loop(rank, asker=0, boundaries=4 * MAX_VOTE_STRIDE),
        "instant steps, nobody asks": _loop(rank, asker=None, boundaries=4 * MAX_VOTE_STRIDE),
    }
    dist.destroy_process_group()
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as f:
        json.dump(outcomes, f)


def test_both_ranks_agree_on_one_boundary_after_the_ask_or_run_to_the_end(tmp_path):
    mp.spawn(_rank, args=(str(tmp_path),), nprocs=2, join=True)
    outcomes = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert outcomes[0] == outcomes[1]
    # Steps longer than the vote interval: a vote at every boundary, agreed one after the ask.
    assert outcomes[0]["slow steps, rank 1 asks"] == [ASK_AT + 1, "cancel", False, 1]
    # Instant steps: votes a full stride apart; the ask is cast at the next voting boundary and
    # read at the one after it.
    boundary, reason, save, _ = outcomes[0]["instant steps, rank 0 asks"]
    assert ASK_AT + 1 < boundary <= ASK_AT + 2 * MAX_VOTE_STRIDE
    assert (reason, save) == ("cancel", False)
    assert outcomes[0]["instant steps, nobody asks"] == [None, None, None, MAX_VOTE_STRIDE]
