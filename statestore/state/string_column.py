"""Filenames as the file columns hold them: split into a directory and a base name, and hashed.

:class:`StringColumn` reads single values of an Arrow string column straight from its buffers (what each
lookup on the commit path pays for a name). A filename is its directory (with its trailing ``/``) plus its
base name (:func:`split_filename`); its 64-bit hash combines the :mod:`statestore.state.name_hash` of each,
in Python for one name (:func:`_hash_of`) and with NumPy passes for a column of them
(:func:`_combined_hashes`), with the same result. :class:`statestore.state.file_columns.FileColumns` finds
names by these hashes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statestore.state.name_hash import hash_bytes, hash_directory, hash_strings

_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd: mixing the directory's hash keeps every bit
_MIX_INT = int(_MIX)
_ALL_BITS = ALL_HASH_BITS = (1 << 64) - 1


def one_array(column: pa.ChunkedArray) -> pa.Array:
    """The column as one array: its only chunk as it is (``combine_chunks`` copies even one chunk, and
    the state keeps views of these buffers)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def split_filename(filename: str) -> tuple[str, str]:
    """``(directory, base name)``: the directory keeps its trailing ``/`` (empty for a bare name)."""
    cut = filename.rfind("/") + 1
    return filename[:cut], filename[cut:]


def _hash_of(directory: str, base_bytes: bytes, mask: int) -> int:
    # The scalar twin of _combined_hashes (uint64 arithmetic, wrapping); the base name as its UTF-8 bytes,
    # which a lookup compares with the stored name's after.
    return (hash_directory(directory) * _MIX_INT + hash_bytes(base_bytes)) & _ALL_BITS & mask


class StringColumn:
    """Single values of an Arrow string column read straight from its buffers: ``Array[i].as_py()`` costs
    ~10 µs, this ~0.2 µs (what each lookup on the commit path pays). The buffers are read through
    ``memoryview``s: an item is a Python int, with no NumPy scalar made.

    A ``memoryview`` does not pickle (and cloudpickle, which PySpark ships objects to its workers with,
    turns one into ``bytes``, whose items are single bytes, not offsets), so a column pickles as its two
    NumPy arrays and makes its views again when unpickled: a state loaded from a snapshot travels to Spark
    tasks whole."""

    __slots__ = ("_offsets", "_data")

    def __init__(self, strings: pa.Array) -> None:
        large = pa.types.is_large_string(strings.type) or pa.types.is_large_binary(strings.type)
        _, offsets, data = strings.buffers()
        count = len(strings)
        self._set_views(
            np.zeros(1, np.int64)
            if offsets is None
            else np.frombuffer(offsets, np.int64 if large else np.int32)[
                strings.offset : strings.offset + count + 1
            ],
            np.zeros(0, np.uint8) if data is None else np.frombuffer(data, np.uint8),
        )

    def _set_views(self, offsets: np.ndarray, data: np.ndarray) -> None:
        self._offsets = offsets.data
        self._data = data.data

    @property
    def nbytes(self) -> int:
        """The bytes of the buffers it reads: the offsets and the characters."""
        return self._offsets.nbytes + self._data.nbytes

    def __getstate__(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self._offsets), np.asarray(self._data)

    def __setstate__(self, state: tuple[np.ndarray, np.ndarray]) -> None:
        self._set_views(*state)

    def bytes_at(self, row: int) -> bytes:
        offsets = self._offsets
        return self._data[offsets[row] : offsets[row + 1]].tobytes()

    def at(self, row: int) -> str:
        return self.bytes_at(row).decode()


def _combined_hashes(directory_hashes: np.ndarray, base_name_hashes: np.ndarray, mask: int) -> np.ndarray:
    """The vectorised :func:`_hash_of`: one hash per row from its directory's and its base name's."""
    with np.errstate(over="ignore"):
        hashes = directory_hashes * _MIX + base_name_hashes
    hashes &= np.uint64(mask)
    return hashes


class SplitNames(NamedTuple):
    """A batch of filenames split as the columns hold them, and hashed: what a bulk AddFiles needs to look
    its names up (:meth:`FileColumns.rows_of`) and then to add them (:meth:`FileColumns.of_new_files`)."""

    directories: pa.Array  # the distinct directories (``string``), each with its "/"; "" for a bare name
    directory_codes: np.ndarray  # int32: each name's directory, read-only
    base_names: pa.Array  # ``large_string``: each name's base name
    hashes: np.ndarray  # uint64: each name's hash with every bit (``_hash_of``), read-only
    order: np.ndarray  # int64: the names in ascending order of ``hashes``, read-only

    def sorted_hashes(self, mask: int) -> tuple[np.ndarray, np.ndarray]:
        """The hashes under ``mask``, in ascending order, and the name of each (its position)."""
        if mask == _ALL_BITS:
            return self.hashes[self.order], self.order
        hashes = self.hashes & np.uint64(mask)
        order = np.argsort(hashes)
        return hashes[order], order


def _split_filenames(filenames: Sequence[str]) -> SplitNames:
    names = pa.array(filenames, pa.large_string())  # a batch's names may pass 2 GB
    parts = pc.split_pattern(names, "/", max_splits=1, reverse=True)
    offsets = parts.offsets.to_numpy()
    values = parts.values
    base_names = values.take(pa.array(offsets[1:] - 1))
    has_directory = np.diff(offsets) == 2
    # Each name's directory without its "/" (null for a bare name), encoded: a batch names few directories,
    # so the "/" is added and the hash computed once per directory, not once per name.
    heads = pc.dictionary_encode(values.take(pa.array(offsets[:-1], mask=~has_directory)))
    directories = pc.binary_join_element_wise(
        heads.dictionary, pa.scalar("", pa.large_string()), pa.scalar("/", pa.large_string())
    ).cast(pa.string())
    codes = heads.indices.fill_null(len(directories)).to_numpy().astype(np.int32)
    if not has_directory.all():
        directories = pa.concat_arrays([directories, pa.array([""], pa.string())])
    hashes = _combined_hashes(hash_strings(directories)[codes], hash_strings(base_names), _ALL_BITS)
    order = np.argsort(hashes)
    for column in (codes, hashes, order):  # shared by the columns made from them: never changed
        column.setflags(write=False)
    return SplitNames(directories, codes, base_names, hashes, order)
