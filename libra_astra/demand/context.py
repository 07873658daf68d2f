"""What one trace read shares across its programs: the network, the communicator groups, and
the distinct group keys, group shapes and collectives found so far (each computed once)."""

from __future__ import annotations

from typing import Any

from . import groups as grp
from ..interning import Interner
from ..model.network import Network
from ..traces.reader import TraceReader
from ..traces.schema import COMM_TYPE_NAMES
from .row_memo import RowMemo
from .types import Collective


class Context:
    def __init__(self, net: Network, file_groups: dict[str, tuple[int, ...]], groups_source: str,
                 peak_tflops: float | None, mem_bw_gbps: float | None, reader: TraceReader) -> None:
        self.net = net
        self.file_groups = file_groups
        self.groups_source = groups_source
        self.meta_groups: dict[str, tuple[int, ...]] = {}
        self.meta_where: dict[str, str] = {}
        self.peak = peak_tflops
        self.membw = mem_bw_gbps
        self.reader = reader
        self.keys: Interner[str] = Interner()
        self.shapes: dict[tuple[int, int], grp.GroupShape] = {}
        self.shapes_by_key: dict[bytes, Any] = {}  # program shape digest -> _Shape
        self.physics: Interner[Collective] = Interner()   # distinct collectives ("physics ids")
        self._coll_cache: dict[tuple, int] = {}
        self.sems: Interner[tuple[str, int]] = Interner()
        self.rows = RowMemo()

    def sem(self, ctype: int, size: int) -> int:
        """Id of a (collective type, size) pair: what members of a communicator must agree on."""
        return self.sems.index((COMM_TYPE_NAMES[ctype], size))

    def key_index(self, key: str) -> int:
        return self.keys.index(key)

    def members(self, key: str) -> tuple[int, ...] | None:
        """Members of a named group, or None if it is not defined anywhere."""
        if key in self.file_groups:
            return self.file_groups[key]
        if key in self.meta_groups:
            m = self.meta_groups[key]
            return m if m else tuple(range(self.net.npus_count))
        return None

    def source(self, key: str) -> str:
        if key == grp.ALL_RANKS:
            return "all ranks"
        return self.groups_source if key in self.file_groups else "trace METADATA"

    def shape(self, kidx: int, inv_idx: int) -> grp.GroupShape:
        k = (kidx, inv_idx) if self.keys[kidx] == grp.ALL_RANKS else (kidx, -1)
        s = self.shapes.get(k)
        if s is None:
            key = self.keys[kidx]
            if key == grp.ALL_RANKS:
                s = grp.all_ranks_shape(self.net, self.reader.attrs.involved[inv_idx])
            else:
                s = grp.group_shape(self.net, key, self.members(key), self.source(key))
            self.shapes[k] = s
        return s

    def intern(self, c: Collective) -> int:
        return self.physics.index(c)

    def coll_pid(self, ctype: int, size: int, kidx: int, inv_idx: int) -> int:
        key = (ctype, size, kidx, inv_idx if self.keys[kidx] == grp.ALL_RANKS else -1)
        pid = self._coll_cache.get(key)
        if pid is None:
            shape = self.shape(kidx, inv_idx)
            pid = self.intern(grp.group_collective(self.net, COMM_TYPE_NAMES[ctype], float(size), shape))
            self._coll_cache[key] = pid
        return pid

    def p2p_pid(self, size: int, dim: int, hops: int) -> int:
        """Physics id of a send of ``size`` bytes crossing ``dim`` in ``hops`` hops."""
        key = ("P2P", size, dim, hops)
        pid = self._coll_cache.get(key)
        if pid is None:
            pid = self._coll_cache[key] = self.intern(grp.p2p_collective(self.net, float(size), int(dim), int(hops)))
        return pid
