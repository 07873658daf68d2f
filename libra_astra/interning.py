"""Distinct values in first-seen order, each named by a small int (its index)."""

from __future__ import annotations

from typing import Generic, Hashable, Iterable, Iterator, TypeVar

T = TypeVar("T", bound=Hashable)


class Interner(Generic[T]):
    """``index(v)`` gives the same int for equal values; ``self[i]`` gives the value back."""

    def __init__(self, first: Iterable[T] = ()) -> None:
        self.values: list[T] = []
        self._index: dict[T, int] = {}
        for v in first:
            self.index(v)

    def index(self, value: T) -> int:
        i = self._index.get(value)
        if i is None:
            i = self._index[value] = len(self.values)
            self.values.append(value)
        return i

    def __getitem__(self, i: int) -> T:
        return self.values[i]

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[T]:
        return iter(self.values)
