"""What a trace read remembers per attribute row once a program used it as a collective: its
group key, physics id, (type, size) id and involved_dim index. The read's :class:`.context.Context`
holds one; :mod:`.program` and :mod:`.program_batch` fill it."""

from __future__ import annotations

import numpy as np

# A row's entry before any program resolved it
UNRESOLVED = -2


class RowMemo:
    """Per attribute row of a read: group key index, physics id, (type, size) id and the
    involved_dim index that matters (all-ranks collectives; else -1) -- UNRESOLVED until a
    program uses the row as a collective."""

    def __init__(self) -> None:
        self.key = np.zeros(0, dtype=np.int64)
        self.pid = np.zeros(0, dtype=np.int64)
        self.sem = np.zeros(0, dtype=np.int64)
        self.inv = np.zeros(0, dtype=np.int64)

    def grow(self, n: int) -> None:
        for name in ("key", "pid", "sem", "inv"):
            old = getattr(self, name)
            new = np.full(n, UNRESOLVED, dtype=np.int64)
            new[:old.size] = old
            setattr(self, name, new)
