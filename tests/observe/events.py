"""Event records for observe tests, built in memory (no store needed for pure functions)."""

from runwright.store import AttemptRecord, EventRecord

_seq = iter(range(1, 10**9))


def event(type_, at, generation=1, step=None, checkpoint_id=None, **attrs) -> EventRecord:
    seq = next(_seq)
    return EventRecord(
        seq=seq,
        event_id=f"e{seq}",
        run_id="r",
        generation=generation,
        type=type_,
        step=step,
        checkpoint_id=checkpoint_id,
        time_unix_s=at,
        attributes=attrs,
    )


def step(at, step_, rank=0, generation=1, seconds=1.0, **attrs) -> EventRecord:
    return event("STEP_HEALTHY", at, generation, step_, rank=rank, step_seconds=seconds, **attrs)


def attempt(generation, start, end, world_size=1) -> AttemptRecord:
    return AttemptRecord(
        run_id="r",
        generation=generation,
        started_unix_s=start,
        ended_unix_s=end,
        world_size=world_size,
        exit_code=0,
        failure_class=None,
        detail=None,
    )
