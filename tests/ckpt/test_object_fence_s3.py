"""The object-store fence against a real S3-compatible server (moto, tests/s3_server.py).

`ObjectFence` keeps the `LocalFence` contract with conditional PUTs instead of a lock and a
rename: racing writers lose compare-and-swap and retry from a fresh read, so no change is lost;
a publish is refused when the generation was raised between its read and its write; a repeated
publish is ALREADY_APPLIED; and on any sequence of operations it answers exactly as LocalFence.
"""

import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runwright.ckpt.errors import CheckpointError, CheckpointRootError, CheckpointStorageError
from runwright.ckpt.fence import FENCE_OBJECT, LocalFence, PublishOutcome, open_fence
from runwright.ckpt.manifest import CommitRecord
from runwright.ckpt.object_fence import FenceState, ObjectFence

pytestmark = pytest.mark.integration


def record(step: int, generation: int) -> CommitRecord:
    checkpoint_id = f"g{generation:06d}-{step:012x}"
    return CommitRecord(
        checkpoint_id=checkpoint_id,
        step=step,
        generation=generation,
        folder=f"{step:010d}-{checkpoint_id}",
        manifest_sha256="0" * 64,
        committed_unix_seconds=1.0,
    )


class CountingFence(ObjectFence):
    """An ObjectFence that counts its lost races and can run `between` once, after its first
    read and before its write (the window a stale writer races the controller in)."""

    def __init__(self, root: str, between=None) -> None:
        super().__init__(root)
        self.between, self.lost = between, 0

    def _read(self):
        found = super()._read()
        if self.between is not None:
            hook, self.between = self.between, None
            hook()
        return found

    def _put(self, state, etag):
        won = super()._put(state, etag)
        self.lost += not won
        return won


def test_open_fence_picks_the_fence_of_the_root(tmp_path, s3_bucket):
    assert isinstance(open_fence(str(tmp_path)), LocalFence)
    assert isinstance(open_fence(f"{s3_bucket}/run"), ObjectFence)
    with pytest.raises(CheckpointError, match="no fence for memory://"):
        open_fence("memory://bucket/run")


def test_generation_and_publish_follow_the_local_contract(s3_bucket):
    fence = ObjectFence(f"{s3_bucket}/run-a")
    assert (fence.current_generation(), fence.latest()) == (0, None)
    assert fence.raise_to(3) == 3
    assert fence.raise_to(2) == 3, "a raise never lowers the generation"
    assert fence.advance_generation() == 4
    assert fence.publish(record(5, 3), 3) == PublishOutcome.STALE_GENERATION
    assert fence.latest() is None
    assert fence.publish(record(5, 4), 4) == PublishOutcome.APPLIED
    assert fence.publish(record(5, 4), 4) == PublishOutcome.ALREADY_APPLIED
    pointer, published = fence.latest_published()
    assert pointer.checkpoint_id == record(5, 4).checkpoint_id
    assert abs(published - time.time()) < 600
    # A second instance (another process) reads the same state from the store.
    assert ObjectFence(f"{s3_bucket}/run-a").latest() == pointer


def test_make_room_runs_after_the_bump(s3_bucket):
    fence = ObjectFence(f"{s3_bucket}/run-b")
    seen = []
    generation = fence.advance_generation(
        make_room=lambda g: seen.append((g, fence.peek_generation()))
    )
    assert seen == [(1, 1)] and generation == 1


def test_a_publish_raced_by_a_raise_is_stale(s3_bucket):
    """The controller raises the generation after the writer read generation 1 and before its
    conditional PUT: the PUT fails on the changed ETag, the re-read sees generation 2, and the
    publish is refused with nothing changed."""
    root = f"{s3_bucket}/run-c"
    ObjectFence(root).raise_to(1)
    controller = ObjectFence(root)
    writer = CountingFence(root, between=lambda: controller.raise_to(2))
    assert writer.publish(record(7, 1), 1) == PublishOutcome.STALE_GENERATION
    assert writer.lost == 1, "the writer's PUT must have lost the race, not skipped it"
    assert controller.latest() is None and controller.current_generation() == 2


def test_a_raise_raced_by_a_publish_still_lands(s3_bucket):
    """The other order: the writer publishes between the controller's read and its PUT; the
    raise retries from the new state and keeps the published pointer."""
    root = f"{s3_bucket}/run-d"
    ObjectFence(root).raise_to(1)
    writer = ObjectFence(root)
    controller = CountingFence(root, between=lambda: writer.publish(record(9, 1), 1))
    assert controller.raise_to(2) == 2
    assert controller.lost == 1
    assert writer.latest().step == 9 and writer.current_generation() == 2


def test_racing_writers_lose_no_change(s3_bucket):
    """Threads bump the generation concurrently, each through its own fence: every bump lands
    exactly once (the generations returned are 1..N, none twice) and some lost a race."""
    root = f"{s3_bucket}/run-e"
    threads, bumps = 4, 6
    returned: list[int] = []
    fences: list[CountingFence] = []
    start = threading.Barrier(threads)

    def bump() -> None:
        fence = CountingFence(root)
        fences.append(fence)
        start.wait()
        for _ in range(bumps):
            returned.append(fence.advance_generation())

    workers = [threading.Thread(target=bump) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sorted(returned) == list(range(1, threads * bumps + 1))
    assert ObjectFence(root).current_generation() == threads * bumps
    assert sum(f.lost for f in fences) > 0, "no race happened; the test proved nothing"


def test_two_writers_publish_against_one_raise(s3_bucket):
    """Two writers of generation 1 publish while the controller raises to 2: each publish is
    APPLIED (it landed before the raise) or STALE; the pointer names an APPLIED one or none."""
    root = f"{s3_bucket}/run-f"
    ObjectFence(root).raise_to(1)
    outcomes: dict[int, PublishOutcome] = {}
    start = threading.Barrier(3)

    def publish(step: int) -> None:
        fence = ObjectFence(root)
        start.wait()
        outcomes[step] = fence.publish(record(step, 1), 1)

    def raise_() -> None:
        fence = ObjectFence(root)
        start.wait()
        fence.raise_to(2)

    workers = [threading.Thread(target=t, args=a) for t, a in ((publish, (1,)), (publish, (2,)))]
    workers.append(threading.Thread(target=raise_))
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    latest = ObjectFence(root).latest()
    applied = {s for s, o in outcomes.items() if o == PublishOutcome.APPLIED}
    assert set(outcomes.values()) <= {PublishOutcome.APPLIED, PublishOutcome.STALE_GENERATION}
    assert (latest is None and not applied) or latest.step in applied
    assert ObjectFence(root).current_generation() == 2


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("raise"), st.integers(0, 4)),
        st.tuples(st.just("advance"), st.just(0)),
        st.tuples(st.just("publish"), st.integers(0, 4), st.integers(1, 3)),
    ),
    max_size=8,
)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(operations=OPERATIONS)
def test_object_fence_answers_as_the_local_fence(operations, s3_bucket, tmp_path_factory):
    """On any sequence of raises, bumps and publishes, both fences give the same outcomes and
    end in the same state: the object store changes the mechanism, not the contract."""
    local = LocalFence(tmp_path_factory.mktemp("fence"))
    remote = ObjectFence(f"{s3_bucket}/prop-{time.monotonic_ns()}")
    for operation in operations:
        answers = []
        for fence in (local, remote):
            if operation[0] == "raise":
                answers.append(fence.raise_to(operation[1]))
            elif operation[0] == "advance":
                answers.append(fence.advance_generation())
            else:
                answers.append(fence.publish(record(operation[2], operation[1]), operation[1]))
        assert answers[0] == answers[1], operation
    assert local.current_generation() == remote.current_generation()
    assert local.latest() == remote.latest()


def test_a_corrupt_fence_object_names_itself_and_the_fix(s3_bucket):
    root = f"{s3_bucket}/run-g"
    fence = ObjectFence(root)
    fence.fs.pipe_file(f"{root}/{FENCE_OBJECT}", b'{"generation": "x"}')
    with pytest.raises(CheckpointRootError, match=f"{FENCE_OBJECT} is not a fence state"):
        fence.current_generation()
    fence.fs.pipe_file(
        f"{root}/{FENCE_OBJECT}", FenceState(generation=5).model_dump_json().encode()
    )
    assert fence.current_generation() == 5


def test_an_unreachable_store_is_a_storage_error_not_a_hang(own_s3_server, monkeypatch, time_bound):
    """With the server gone, a fence call gives up after its bounded retries and says so."""
    from runwright_tests_s3_server import new_bucket

    root = f"s3://{new_bucket()}/run-h"
    fence = ObjectFence(root)
    fence.raise_to(1)
    own_s3_server.stop()
    monkeypatch.setenv("RUNWRIGHT_S3_MAX_ATTEMPTS", "2")
    from runwright_tests_s3_server import forget_clients

    forget_clients()
    with time_bound(120), pytest.raises(CheckpointStorageError) as raised:
        ObjectFence(root).publish(record(1, 1), 1)
    message = str(raised.value)
    assert f"{root}/{FENCE_OBJECT}" in message
    assert "Cannot connect" in message or "Could not connect" in message
    assert f"AWS_ENDPOINT_URL={own_s3_server.endpoint}" in message
