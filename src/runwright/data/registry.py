"""A tiny registry of versioned algorithms ("permute-v1", "quota-v1", "concat-v1").

A cursor records the names it was produced with; looking a name up here is how a loader refuses
an algorithm version it does not have instead of silently substituting another one.
"""

from collections.abc import Iterator
from typing import Generic, TypeVar

from runwright.data.errors import UnknownAlgorithmError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps versioned names to implementations of one Protocol."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str, item: T) -> T:
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._items[name] = item
        return item

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "none"
            raise UnknownAlgorithmError(
                f"unknown {self.kind} algorithm {name!r}; this runwright knows: {known}. "
                "Pick one of those in the spec, or upgrade runwright to read data written by a "
                "newer version."
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
