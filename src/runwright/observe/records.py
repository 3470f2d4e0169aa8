"""The shapes of what observe/ reads: an event and an attempt, as read-only protocols.

observe/ sits below the store (ARCHITECTURE.md), so it names the fields it reads instead of
importing the store's record classes; `runwright.store.EventRecord` and `AttemptRecord` have
them, and so does any test double or future source of events.
"""

from collections.abc import Mapping
from typing import Any, Protocol


class Event(Protocol):
    """One event of a run (the store's `EventRecord` is one)."""

    @property
    def type(self) -> str: ...

    @property
    def generation(self) -> int: ...

    @property
    def step(self) -> int | None: ...

    @property
    def world_size(self) -> int | None: ...

    @property
    def checkpoint_id(self) -> str | None: ...

    @property
    def time_unix_s(self) -> float: ...

    @property
    def attributes(self) -> Mapping[str, Any]: ...


class Attempt(Protocol):
    """One generation's allocation (the store's `AttemptRecord` is one)."""

    @property
    def generation(self) -> int: ...

    @property
    def started_unix_s(self) -> float: ...

    @property
    def ended_unix_s(self) -> float | None: ...

    @property
    def world_size(self) -> int: ...
