"""Hang attribution over hand-made dumps (control/attribution.py): the rank that never entered
the collective the others wait in and what it did, a rank that sent no dump, a rank waiting in
another group's collective, a desync, and nothing to say."""

from runwright.control.attribution import attribute, find_desync

T0 = 1_764_770_527.0  # 2025-12-03 14:02:07 UTC


def rec(seq, op="all_reduce", *, group="0", shape=(4,), dtype="float32", done=True, **detail):
    return {
        "group": group, "seq": seq, "op": op, "dtype": dtype, "bytes": 4 * shape[0],
        "shape": list(shape), "step": 1, "enter_mono": 100.0 + seq, "enter_wall": T0 + seq - 1,
        "exit_mono": 100.5 + seq if done else None, "exit_wall": T0 + seq if done else None,
        **({"detail": detail} if detail else {}),
    }  # fmt: skip


def dump(records, phase=None, frames=(), now_mono=200.0):
    return {"records": records, "phase": phase, "now_mono": now_mono, "step": 12,
            "main_frames": list(frames)}  # fmt: skip


def test_the_rank_that_never_entered_is_named_with_its_data_wait_and_shard():
    grads = dict(bucket=3)
    waiting = [rec(1832), rec(1833), rec(1834, done=False, **grads)]
    waiting[2].update(bytes=25_000_000, enter_wall=T0)
    stalled = {"name": "data_wait", "since_mono": 159.0, "since_wall": T0}
    stalled["detail"] = {"shard": "00017"}
    frames = ["/x/read/prefetch.py:80 in get", "/x/loader.py:330 in _take", "/x/a.py:1 in b"]
    frames.append("/x/deep.py:2 in c")
    dumps = {
        0: dump(waiting),
        1: dump([rec(1832), rec(1833)], phase=stalled, frames=frames),
        2: dump(list(waiting)),
        3: dump(list(waiting)),
    }
    found = attribute(dumps, world_size=4)
    assert found.kind == "hang" and found.culprits == (1,)
    assert found.sentence.startswith(
        "ranks 0,2,3 wait in all_reduce #1834 (bucket 3, 25.0 MB) since 14:02:07 UTC; "
        "rank 1 never entered it: data wait 41 s on shard 00017; at /x/read/prefetch.py:80 in get"
    ), found.sentence
    assert "deep.py" not in found.sentence  # three frames are quoted, the bundle keeps all
    assert found.facts["waiting_ranks"] == [0, 2, 3] and found.facts["absent_ranks"] == [1]


def test_a_rank_without_a_dump_is_named_as_gone():
    dumps = {0: dump([rec(1), rec(2, done=False)])}
    found = attribute(dumps, world_size=2)
    assert found.culprits == (1,)
    assert "rank 1 sent no dump" in found.sentence and "rank 0 wait in all_reduce #2" in (
        found.sentence
    )


def test_a_rank_stuck_in_another_group_s_collective_says_so():
    dumps = {
        0: dump([rec(5), rec(6, done=False)]),
        1: dump([rec(5), rec(1, "all_gather", group="3", done=False)]),
    }
    found = attribute(dumps, world_size=2)
    assert found.culprits == (1,)
    assert "rank 1 never entered it: it waits in all_gather #1 on group 3" in found.sentence


def test_every_rank_in_the_collective_is_a_transport_fault_not_a_rank():
    dumps = {r: dump([rec(1), rec(2, done=False)]) for r in range(2)}
    found = attribute(dumps, world_size=2)
    assert found.kind == "hang" and found.culprits == ()
    assert "every rank of the group entered it" in found.sentence


def test_different_ops_or_shapes_at_one_sequence_number_are_a_desync():
    dumps = {
        0: dump([rec(1), rec(2, done=False)]),
        1: dump([rec(1), rec(2, "broadcast", done=False)]),
        2: dump([rec(1), rec(2, done=False)]),
    }
    found = attribute(dumps, world_size=3)
    assert found.kind == "desync" and found.culprits == (1,)
    assert found.sentence.startswith(
        "collective desync at #2 of group 0: ranks 0,2 issued all_reduce float32 [4]; "
        "rank 1 issued broadcast float32 [4]"
    )
    shapes = {0: dump([rec(1, shape=(4,))]), 1: dump([rec(1, shape=(8,))])}
    tie = find_desync(shapes)
    assert tie is not None and tie.culprits == (1,)  # a tie: the lowest rank's is the norm


def test_buffers_that_cover_different_windows_are_no_desync():
    dumps = {0: dump([rec(5), rec(6), rec(7, done=False)]), 1: dump([rec(6)])}
    assert find_desync(dumps) is None
    assert attribute(dumps, world_size=2).culprits == (1,)


def test_no_rank_in_a_collective_says_there_is_nothing_to_attribute():
    found = attribute({0: dump([rec(1)]), 1: dump([rec(1)])}, world_size=3)
    assert found.kind == "unknown" and found.culprits == (2,)
    assert found.sentence == "no rank waits in a recorded collective; rank 2 sent no dump"


def test_the_flight_recorder_s_entries_are_read_when_runwright_did_not_record():
    nccl = dump([])
    nccl["records"] = []
    nccl["flight_recorder"] = [rec(1), {**rec(2, done=False), "bytes": None}]
    found = attribute({0: nccl, 1: dump([rec(1)])}, world_size=2)
    assert found.culprits == (1,) and "rank 0 wait in all_reduce #2 since" in found.sentence


def test_the_quoted_frames_start_at_the_script_or_runwright_not_a_lock_s_wait():
    frames = [
        "/usr/lib/python3.11/threading.py:327 in wait",
        "/venv/lib/python3.11/site-packages/runwright/data/read/prefetch.py:80 in get",
        "/job/train.py:53 in main",
    ]
    stuck = dump([rec(1)], phase={"name": "data_wait", "since_mono": 190.0}, frames=frames)
    found = attribute({0: dump([rec(1), rec(2, done=False)]), 1: stuck}, world_size=2)
    assert found.sentence.endswith(
        "data wait 10 s; at /venv/lib/python3.11/site-packages/runwright/data/read/prefetch.py:80"
        " in get <- /job/train.py:53 in main"
    ), found.sentence


def test_a_rank_that_raised_before_the_collective_is_named_with_its_error():
    raised = dump([rec(1)])
    raised.update(reason="exit", error="ValueError: bad batch at step 12")
    found = attribute({0: dump([rec(1), rec(2, done=False)]), 1: raised}, world_size=2)
    assert found.culprits == (1,)
    assert "rank 1 never entered it: it exited at step 12 with ValueError: bad batch" in (
        found.sentence
    )
