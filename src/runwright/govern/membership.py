"""The report's view of an elastic run's size changes (MEMBERSHIP_CHANGED, control/membership.py):
which generation ran at which layout, and why it changed."""

from runwright.events import EventType
from runwright.records import Record
from runwright.store import EventRecord

LAYOUT_KEYS = ("nodes", "world_size", "dp", "micro_batch_size", "grad_accumulation_steps")


class MembershipChange(Record):
    """One change of an elastic run's size, with the layouts on both sides."""

    time_unix_s: float
    """When the recovery decided it."""
    change: str
    """`shrink` (nodes lost) or `grow` (capacity back)."""
    from_generation: int
    """The generation that ran at the old layout."""
    to_generation: int
    """The first generation at the new layout."""
    step: int | None
    """The last step the old generation reported."""
    old: dict[str, int]
    """nodes, world_size, dp, micro_batch_size, grad_accumulation_steps, global_batch_samples."""
    new: dict[str, int]
    """The same at the new size (global_batch_samples is unchanged)."""
    reason: str
    """Why, in words (lost nodes, or the capacity the executor reported)."""

    def layout_words(self, which: str) -> str:
        """`2 nodes, world 2, dp 2, micro 2 x accum 1` for the report's table."""
        x = getattr(self, which)
        return (
            f"{x['nodes']} nodes, world {x['world_size']}, dp {x['dp']}, micro "
            f"{x['micro_batch_size']} x accum {x['grad_accumulation_steps']}"
        )


def membership_changes(events: list[EventRecord]) -> list[MembershipChange]:
    return [
        MembershipChange(
            time_unix_s=e.time_unix_s,
            change=str(e.attributes.get("change", "")),
            from_generation=int(e.attributes.get("from_generation") or e.generation),
            to_generation=int(e.attributes.get("to_generation") or e.generation + 1),
            step=e.step,
            old=dict(e.attributes.get("old") or {}),
            new=dict(e.attributes.get("new") or {}),
            reason=str(e.attributes.get("reason", "")),
        )
        for e in events
        if e.type == EventType.MEMBERSHIP_CHANGED
    ]
