"""The replay check (control/replay_check.py) on channel messages: verdicts, order, memory."""

import itertools
import random

from runwright.control.replay_check import RunReplays
from runwright.events import EventType
from runwright.protocol import ChannelMessage

_ids = itertools.count()


def step(generation: int, rank: int, number: int, loss: float, world: int = 2, **more):
    return ChannelMessage(
        event_id=f"e{next(_ids)}",
        type=EventType.STEP_HEALTHY,
        generation=generation,
        rank=rank,
        step=number,
        world_size=world,
        time_unix_s=0.0,
        attributes={"loss": loss, "samples": [number * 8, number * 8 + 4], **more},
    )


def commit(generation: int, number: int):
    return ChannelMessage(
        event_id=f"e{next(_ids)}",
        type=EventType.CHECKPOINT_COMMITTED,
        generation=generation,
        rank=0,
        step=number,
        time_unix_s=0.0,
    )


def loss_of(number: int, rank: int) -> float:
    return 1.0 / (number + 1) + rank * 1e-3


def run_of(steps_by_generation, world=2, perturb=None):
    """Messages of generations that each run the given step range with the same losses (a
    `perturb` (generation, step, rank) adds one ulp's worth there)."""
    messages = []
    for generation, numbers in steps_by_generation.items():
        for number in numbers:
            for rank in range(world):
                loss = loss_of(number, rank)
                if perturb == (generation, number, rank):
                    loss = loss + 2**-40
                messages.append(step(generation, rank, number, loss, world))
    return messages


def verdicts(messages, ended=False):
    replays = RunReplays(2)
    for message in messages:
        replays.observe(message)
    return [(gen.generation, kind, attrs) for gen, kind, attrs in replays.verdicts(ended)]


def test_a_faithful_replay_is_verified_once_it_passes_the_failed_generations_last_step():
    messages = run_of({1: range(1, 11), 2: range(9, 13)})
    ((generation, kind, attrs),) = verdicts(messages)
    assert (generation, kind) == (2, EventType.RECOVERY_VERIFIED)
    assert attrs["restored_step"] == 8 and attrs["replay_through_step"] == 10
    assert attrs["replayed_steps"] == 2 and attrs["compared"] == 4 and attrs["complete"]
    assert attrs["unchecked"] == 0


def test_no_verdict_while_the_replay_is_under_way_and_a_partial_one_when_it_ends():
    messages = run_of({1: range(1, 11), 2: range(5, 8)})
    assert verdicts(messages) == []
    ((_, kind, attrs),) = verdicts(messages, ended=True)
    assert kind == EventType.RECOVERY_VERIFIED and attrs["complete"] is False
    assert attrs["compared"] == 6 and attrs["replayed_steps"] == 6


def test_one_bit_of_one_rank_diverges_naming_the_step_rank_and_both_losses():
    messages = run_of({1: range(1, 11), 2: range(5, 13)}, perturb=(2, 7, 1))
    ((generation, kind, attrs),) = verdicts(messages)
    assert (generation, kind) == (2, EventType.RECOVERY_DIVERGED)
    assert (attrs["step"], attrs["rank"], attrs["earlier_generation"]) == (7, 1, 1)
    assert attrs["earlier_loss"] == loss_of(7, 1) != attrs["loss"]


def test_different_samples_with_the_same_loss_diverge():
    messages = run_of({1: range(1, 5)})
    messages += [step(2, r, 3, loss_of(3, r), samples=[0, 1]) for r in range(2)]
    (found,) = verdicts(messages)
    assert found[1] == EventType.RECOVERY_DIVERGED and found[2]["loss"] == found[2]["earlier_loss"]


def test_nothing_replayed_is_said_so():
    messages = run_of({1: range(1, 9), 2: range(9, 11)})
    ((_, kind, attrs),) = verdicts(messages)
    assert kind == EventType.RECOVERY_VERIFIED
    assert attrs["nothing_replayed"] is True and attrs["replayed_steps"] == 0


def test_the_verdict_does_not_depend_on_the_order_reports_are_read():
    messages = run_of({1: range(1, 11), 2: range(5, 13), 3: range(9, 15)}, perturb=(3, 10, 0))
    expected = verdicts(messages)
    assert [(g, k) for g, k, _ in expected] == [
        (2, EventType.RECOVERY_VERIFIED),
        (3, EventType.RECOVERY_DIVERGED),
    ]
    for seed in range(5):
        shuffled = list(messages)
        random.Random(seed).shuffle(shuffled)
        # Read twice, as a restarted controller does: the second copy changes nothing.
        assert verdicts(shuffled + shuffled) == expected


def test_a_rollback_and_a_reshard_are_unverified_with_the_reason():
    messages = run_of({1: range(1, 9)})
    messages += [step(2, r, 5, 0.0, skipped=True) for r in range(2)]
    ((_, kind, attrs),) = verdicts(messages, ended=True)
    assert kind == EventType.RECOVERY_UNVERIFIED and "rollback" in attrs["reason"]
    resharded = run_of({1: range(1, 9)}) + run_of({2: range(5, 10)}, world=4)
    ((_, kind, attrs),) = verdicts(resharded, ended=True)
    assert kind == EventType.RECOVERY_UNVERIFIED and "world size" in attrs["reason"]


def test_reports_older_than_the_checkpoint_before_the_newest_are_let_go():
    replays = RunReplays(2)
    for message in run_of({1: range(1, 13)}):
        replays.observe(message)
        if message.rank == 1 and message.step % 4 == 0:
            replays.observe(commit(1, message.step))
    assert sorted(replays.generations[1].steps) == [9, 10, 11, 12]
    # A restore further back than the kept reports compares nothing, and says why.
    for message in run_of({2: range(3, 13)}):
        replays.observe(message)
    ((_, kind, attrs),) = [(g.generation, k, a) for g, k, a in replays.verdicts(False)]
    assert kind == EventType.RECOVERY_VERIFIED and attrs["compared"] == 8
    assert attrs["unchecked"] == 12


def test_an_operators_skipped_shard_makes_the_replay_no_reference():
    """A generation that starts without a shard an operator named (control/operator.py) reads
    other data than the generations before it: neither it nor a later one is judged against
    them (unverified, not diverged)."""
    skip = ChannelMessage(
        event_id=f"e{next(_ids)}",
        type=EventType.DATA_SHARD_QUARANTINED,
        generation=2,
        rank=0,
        step=5,
        time_unix_s=0.0,
        attributes={"shard": "notes-00000", "reason": "operator"},
    )
    messages = run_of({1: range(1, 9)})
    messages += [skip] + [step(2, r, n, 9.0 + n + r) for n in range(5, 8) for r in range(2)]
    messages += [step(3, r, n, 9.0 + n + r) for n in range(6, 10) for r in range(2)]
    found = {g: (kind, attrs) for g, kind, attrs in verdicts(messages, ended=True)}
    assert found[2][0] == EventType.RECOVERY_UNVERIFIED
    assert "an operator had shard notes-00000 skipped" in found[2][1]["reason"]
    assert found[3][0] == EventType.RECOVERY_VERIFIED, found[3]  # against generation 2 only
