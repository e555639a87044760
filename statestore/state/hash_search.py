"""One value at a time, where it is in a sorted array of 64-bit hashes: a lookup on the commit path.

``np.searchsorted`` for one value costs about a microsecond of NumPy call overhead, and its binary search
over a million hashes touches a cache line at each of ~20 steps. :class:`HashSearch` keeps a table of where
each bucket of the top bits starts (about 8 hashes per bucket) and finishes with ``bisect`` over a
``memoryview`` of the array: a few steps, each a C-level read, and no NumPy call.
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

_PER_BUCKET = 8  # hashes per bucket on average: a bisect of ~3 steps


class HashSearch:
    """Searches ``sorted_hashes`` (uint64, ascending), which it keeps a view of and never changes.

    Pickles as its NumPy arrays and makes its ``memoryview``s again when unpickled (a ``memoryview`` does
    not pickle; cloudpickle would turn it into ``bytes`` and every search would go wrong)."""

    __slots__ = ("_hashes", "_starts", "_shift")

    def __init__(self, sorted_hashes: np.ndarray) -> None:
        count = len(sorted_hashes)
        bits = min(24, max(1, (count // _PER_BUCKET).bit_length()))
        self._shift = 64 - bits
        bucket_floors = np.arange(1 << bits, dtype=np.uint64) << np.uint64(self._shift)
        starts = np.empty((1 << bits) + 1, np.int64)
        starts[:-1] = np.searchsorted(sorted_hashes, bucket_floors)
        starts[-1] = count
        self._hashes = np.ascontiguousarray(sorted_hashes, np.uint64).data
        self._starts = starts.data

    def __getstate__(self) -> tuple[np.ndarray, np.ndarray, int]:
        return np.asarray(self._hashes), np.asarray(self._starts), self._shift

    def __setstate__(self, state: tuple[np.ndarray, np.ndarray, int]) -> None:
        hashes, starts, self._shift = state
        self._hashes = hashes.data
        self._starts = starts.data

    def position(self, h: int) -> int:
        """Where ``h`` (a Python int in [0, 2**64)) is, or would go: the first position of a hash ≥ ``h``."""
        bucket = h >> self._shift
        return bisect_left(self._hashes, h, self._starts[bucket], self._starts[bucket + 1])

    def at(self, position: int) -> int:
        return self._hashes[position]

    def __len__(self) -> int:
        return len(self._hashes)

    @property
    def nbytes(self) -> int:
        """The bytes of its arrays: the hashes (shared with the array it was made from, where that was
        contiguous ``uint64``) and its bucket index."""
        return self._hashes.nbytes + self._starts.nbytes

    @property
    def index_nbytes(self) -> int:
        """The bytes of its bucket index alone: what it holds beyond the hashes it was made from."""
        return self._starts.nbytes
