"""NPU ids <-> coordinates, shared by the physical network and the emitted (logical) one.

NPU ids follow ASTRA-sim: dimension 0 varies fastest, id = a0 + n0 * (a1 + n1 * (a2 + ...)).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..errors import LibraError


class Grid:
    """Mixin for a network with ``dims`` (each with ``npus``): its grid of NPU ids."""

    dims: tuple

    def _where(self) -> str:
        """Prefix naming the network in error messages."""
        return ""

    @property
    def num_dims(self) -> int:
        return len(self.dims)

    @property
    def npus_per_dim(self) -> tuple[int, ...]:
        return tuple(d.npus for d in self.dims)

    @property
    def npus_count(self) -> int:
        return math.prod(self.npus_per_dim)

    def coords(self, npu: int) -> tuple[int, ...]:
        """Coordinates of an NPU id."""
        if not 0 <= npu < self.npus_count:
            raise LibraError(f"{self._where()}NPU id {npu} out of range 0..{self.npus_count - 1}")
        out = []
        for n in self.npus_per_dim:
            out.append(npu % n)
            npu //= n
        return tuple(out)

    def npu_id(self, coords: Sequence[int]) -> int:
        """NPU id of a coordinate tuple (inverse of :meth:`coords`)."""
        if len(coords) != self.num_dims:
            raise LibraError(f"{self._where()}{len(coords)} coordinates for {self.num_dims} dimensions")
        npu, stride = 0, 1
        for a, n in zip(coords, self.npus_per_dim):
            if not 0 <= a < n:
                raise LibraError(f"{self._where()}coordinate {a} out of range 0..{n - 1}")
            npu += a * stride
            stride *= n
        return npu

    def coords_array(self, npus: np.ndarray) -> np.ndarray:
        """Coordinates of many NPU ids at once: shape (len(npus), num_dims)."""
        rest = np.asarray(npus, dtype=np.int64).copy()
        out = np.empty(rest.shape + (self.num_dims,), dtype=np.int64)
        for d, n in enumerate(self.npus_per_dim):
            out[..., d] = rest % n
            rest //= n
        return out

    def ids_array(self, coords: np.ndarray) -> np.ndarray:
        """NPU ids of many coordinate rows at once (inverse of :meth:`coords_array`)."""
        coords = np.asarray(coords, dtype=np.int64)
        out = np.zeros(coords.shape[:-1], dtype=np.int64)
        stride = 1
        for d, n in enumerate(self.npus_per_dim):
            out += coords[..., d] * stride
            stride *= n
        return out

    def lowest_differing_dim(self, a: int, b: int) -> int:
        """The dimension a transfer from NPU a to NPU b crosses (ASTRA-sim routes lowest first)."""
        for d, (x, y) in enumerate(zip(self.coords(a), self.coords(b))):
            if x != y:
                return d
        raise LibraError(f"NPUs {a} and {b} are the same NPU")
