"""A step's per-rank STEP_HEALTHY reports folded into one stored event, and unfolded again.

A run of 1,024 ranks at one step a second reported 1,024 STEP_HEALTHY rows a second, ~88 million
a day, which `report` and `compare` then read whole (issue 20). The controller's ingest now holds
a step's reports until every rank of the generation has sent one (control/step_holding.py) and
stores ONE STEP_HEALTHY for them, whose attributes carry each rank's figures column by column:

    ranks    [0, 1, ...]              the ranks this row speaks for, ascending
    times    [t0, t1, ...]            each rank's own report time (time_unix_s)
    columns  {"loss": [..], ...}      a key every covered rank reported: one value per rank
    sparse   {"data_lost": {"0": ..}} a key only some ranks reported: rank -> value
    ids      {"3": "custom-id"}       a rank's event id where it is not the runtime's
                                      `g{generation}-r{rank}-step{step}` (`default_id`)

The type stays STEP_HEALTHY (a row of one generation's step, as before), so `events --type`,
the indexes and the event feeds read it as they read a rank's report; a row without `ranks` is
one rank's report (stores written before this change). Readers that want each rank's report call
`per_rank` (or `rank_view` for one rank): the figures, times and ids come back as each rank sent
them, so every sum, maximum and rank-0 filter gives the answer it gave per row.

A step can be stored in parts (a rank later than the ingest's bound, a generation that ended
mid-step): each part names the ranks it covers and no rank is in two parts of a step, so unfolding
every part of a step gives each rank's report once.
"""

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple, TypeVar

from runwright.events import EventType
from runwright.observe.records import Event

RANKS = "ranks"
"""The attribute that marks a folded row: the ranks it covers."""


def default_id(generation: int, rank: int, step: int) -> str:
    """The event id the runtime gives a rank's STEP_HEALTHY (runtime/context.py `step_healthy`);
    a folded row stores only the ids that differ from it."""
    return f"g{generation}-r{rank}-step{step}"


class RankReport(NamedTuple):
    """One rank's STEP_HEALTHY as the channel delivered it: what a folded row keeps of it. A
    tuple rather than a frozen dataclass: the ingest builds one per report, and a frozen
    dataclass's __init__ sets each field through object.__setattr__."""

    rank: int
    event_id: str
    """The worker's id for the report (the channel message's, without the run prefix)."""
    time_unix_s: float
    attributes: Mapping[str, Any]
    """The report's figures, without `rank`."""


def fold(generation: int, step: int, reports: Iterable[RankReport]) -> dict[str, Any]:
    """The attributes of the one row that stands for `reports` (one per rank, any order)."""
    ordered = sorted(reports, key=lambda r: r.rank)
    ranks = [r.rank for r in ordered]
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"step {step} of generation {generation} has two reports of one rank")
    everywhere = set.intersection(*(set(r.attributes) for r in ordered)) if ordered else set()
    columns = {key: [r.attributes[key] for r in ordered] for key in sorted(everywhere)}
    sparse: dict[str, dict[str, Any]] = {}
    for r in ordered:
        for key, value in r.attributes.items():
            if key not in everywhere:
                sparse.setdefault(key, {})[str(r.rank)] = value
    ids = {
        str(r.rank): r.event_id
        for r in ordered
        if r.event_id != default_id(generation, r.rank, step)
    }
    folded: dict[str, Any] = {
        RANKS: ranks,
        "times": [r.time_unix_s for r in ordered],
        "columns": columns,
    }
    if sparse:
        folded["sparse"] = sparse
    if ids:
        folded["ids"] = ids
    return folded


def is_folded(event: Event) -> bool:
    """Whether `event` is a folded step row (several ranks' reports, or a part of them)."""
    return event.type == EventType.STEP_HEALTHY and isinstance(event.attributes.get(RANKS), list)


def reports(event: Event) -> list[RankReport]:
    """The per-rank reports a folded row holds, in rank order."""
    attrs = event.attributes
    columns: Mapping[str, list[Any]] = attrs.get("columns") or {}
    sparse: Mapping[str, Mapping[str, Any]] = attrs.get("sparse") or {}
    ids: Mapping[str, str] = attrs.get("ids") or {}
    found = []
    for i, rank in enumerate(attrs[RANKS]):
        figures = {key: values[i] for key, values in columns.items()}
        for key, by_rank in sparse.items():
            if str(rank) in by_rank:
                figures[key] = by_rank[str(rank)]
        event_id = ids.get(str(rank)) or default_id(event.generation, rank, event.step or 0)
        found.append(RankReport(rank, event_id, attrs["times"][i], figures))
    return found


E = TypeVar("E", bound=Event)


def unfold(event: E) -> list[E]:
    """Each rank's report in a folded row as an event of the row's own class (a store row gives
    store rows, with the rank's time and attributes as the rank sent them); any other event as
    it is."""
    if not is_folded(event):
        return [event]
    return [
        _copy(event, time_unix_s=r.time_unix_s, attributes={**r.attributes, "rank": r.rank})
        for r in reports(event)
    ]


def per_rank(events: Iterable[E]) -> Iterator[E]:
    """`events` with every folded step row replaced by its ranks' reports, in rank order."""
    for event in events:
        if is_folded(event):
            yield from unfold(event)
        else:
            yield event


def rank_view(event: E, rank: int) -> E | None:
    """Rank `rank`'s STEP_HEALTHY in `event`: the event itself when it is that rank's own report,
    the rank's report when it is a folded row covering it, else None."""
    if event.type != EventType.STEP_HEALTHY:
        return None
    if not is_folded(event):
        return event if event.attributes.get("rank") == rank else None
    if rank not in event.attributes[RANKS]:
        return None
    return next(e for e in unfold(event) if e.attributes["rank"] == rank)


def _copy(event: E, **fields: Any) -> E:
    """`event` with `fields` replaced, of its own class (a pydantic record or a dataclass)."""
    if hasattr(event, "model_copy"):
        return event.model_copy(update=fields)  # type: ignore[no-any-return]
    if dataclasses.is_dataclass(event) and not isinstance(event, type):
        return dataclasses.replace(event, **fields)  # type: ignore[return-value]
    raise TypeError(f"cannot unfold a {type(event).__name__}: give a record or a dataclass")
