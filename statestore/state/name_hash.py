"""A 64-bit hash of strings, the same whether computed for one ``str`` or for a whole Arrow column.

The file index (:mod:`statestore.state.file_columns`) hashes every filename of a table when a snapshot is
loaded and every name of a bulk AddFiles. Python's own ``hash`` needs one ``str`` object per name, and making
a million of them from an Arrow column is most of a load's time. This hash is computed from the UTF-8 bytes
with whole-column NumPy passes (:func:`hash_strings`), and from one ``str`` in pure Python
(:func:`hash_string`, for a lookup on the commit path), with the same result.

Each string's bytes are read as little-endian 64-bit words (the last one zero-padded), folded in with a
multiply and a shift each, starting from a value that depends on the length (so padding cannot collide
with real zero bytes); a final mix spreads every bit. It is not a cryptographic hash: the index checks
every hit against the stored name, so a collision costs a comparison, never a wrong answer.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import lru_cache

import numpy as np
import pyarrow as pa

_MASK = (1 << 64) - 1
_SEED = 0x243F6A8885A308D3
_LENGTH_MIX = 0x9E3779B97F4A7C15
_WORD_MIX = 0xFF51AFD7ED558CCD
_FINAL_MIX = 0xC4CEB9FE1A85EC53
_WORD_MIX_U64 = np.uint64(_WORD_MIX)
_FINAL_MIX_U64 = np.uint64(_FINAL_MIX)
_SHIFT_32 = np.uint64(32)
_SHIFT_29 = np.uint64(29)


def hash_string(value: str) -> int:
    """The hash of one string (the scalar twin of :func:`hash_strings`)."""
    return hash_bytes(value.encode())


@lru_cache(maxsize=4096)
def hash_directory(directory: str) -> int:
    """:func:`hash_string`, remembered: a table's names share one directory per partition."""
    return hash_string(directory)


def hash_bytes(data: bytes) -> int:
    length = len(data)
    prepared = _by_length.get(length)
    if prepared is None:
        prepared = _prepare(length)
    h, padding, unpack = prepared
    for word in unpack(data + padding):  # the last word zero-padded
        h = ((h ^ word) * _WORD_MIX) & _MASK
        h ^= h >> 32
    h ^= h >> 29
    h = (h * _FINAL_MIX) & _MASK
    return h ^ (h >> 32)


# By length: the starting value, the padding to a whole word and the reader of the words (a lookup hashes
# names of a few lengths again and again). Bounded: names of every length would not grow it past this.
_by_length: dict[int, tuple[int, bytes, Callable[[bytes], tuple[int, ...]]]] = {}
_LENGTHS_KEPT = 1024


def _prepare(length: int) -> tuple[int, bytes, Callable[[bytes], tuple[int, ...]]]:
    if len(_by_length) >= _LENGTHS_KEPT:
        _by_length.clear()
    words = (length + 7) >> 3
    prepared = _by_length[length] = (
        (_SEED ^ (length * _LENGTH_MIX)) & _MASK,
        bytes(-length % 8),
        struct.Struct(f"<{words}Q").unpack,
    )
    return prepared


def hash_strings(strings: pa.Array) -> np.ndarray:
    """:func:`hash_string` of every value of an Arrow ``string``/``large_string``/``binary`` array, as
    ``uint64``. The values must not be null.

    Word ``j`` of every string is read at once. Strings all of one length (a column of same-length names)
    are read in place, through strided views of the data buffer; a column of a few lengths is taken
    apart into one column per length. Others are read from a copy of their bytes that holds a 64-bit word
    at every byte offset, taken longest first so that the strings that still have a word ``j`` are a
    prefix; bytes past a string's end are masked off.
    """
    count = len(strings)
    if not count:
        return np.empty(0, np.uint64)
    large = pa.types.is_large_string(strings.type) or pa.types.is_large_binary(strings.type)
    _, offsets_buffer, data_buffer = strings.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int64 if large else np.int32)[
        strings.offset : strings.offset + count + 1
    ].astype(np.int64)
    first, end = int(offsets[0]), int(offsets[-1])
    starts, lengths = offsets[:-1] - first, np.diff(offsets)
    length = int(lengths[0])
    with np.errstate(over="ignore"):
        # Arrow lays a column's strings out one after another: same-length ones are a strided view.
        if bool((lengths == length).all()):
            data = np.zeros(0, np.uint8)  # only empty strings: no byte is read
            if length:
                data = np.frombuffer(data_buffer, np.uint8, end - first, first)
            return _finish(_hash_laid_out(data, count, length))
        distinct_lengths = np.unique(lengths)
        if len(distinct_lengths) > _FEW_LENGTHS:
            return _finish(_hash_any(data_buffer, first, end, starts, lengths))
        # A few lengths (names that differ by a digit or two): each length's strings taken apart, in C,
        # and read in place.
        h = np.empty(count, np.uint64)
        for each_length in distinct_lengths.tolist():
            rows = np.flatnonzero(lengths == each_length)
            h[rows] = hash_strings(strings.take(pa.array(rows)))
        return h


_FEW_LENGTHS = 16  # up to this many distinct lengths, each length's strings are hashed apart


def _start(lengths: np.ndarray | int) -> np.ndarray:
    return np.uint64(_SEED) ^ (np.asarray(lengths).astype(np.uint64) * np.uint64(_LENGTH_MIX))


def _fold(h: np.ndarray, word: np.ndarray) -> None:
    h ^= word
    h *= _WORD_MIX_U64
    h ^= h >> _SHIFT_32


def _hash_laid_out(data: np.ndarray, count: int, length: int) -> np.ndarray:
    """``count`` strings of ``length`` bytes each, one after another in ``data``: read in place."""
    h = np.full(count, _start(length), np.uint64)
    whole, tail = divmod(length, 8)
    for j in range(whole):
        _fold(h, np.ndarray((count,), "<u8", data, 8 * j, (length,)))
    if tail:  # the last word's bytes one by one: a whole word would read past the buffer's end
        tail_bytes = np.ndarray((count, tail), np.uint8, data, 8 * whole, (length, 1))
        word = tail_bytes[:, 0].astype(np.uint64)
        for t in range(1, tail):
            word |= tail_bytes[:, t].astype(np.uint64) << np.uint64(8 * t)
        _fold(h, word)
    return h


def _hash_any(
    data_buffer: pa.Buffer | None, first: int, end: int, starts: np.ndarray, lengths: np.ndarray
) -> np.ndarray:
    """Strings anywhere in the buffer, of any lengths."""
    # The strings' bytes and 8 zero bytes, so a word can be read at any offset inside them.
    data = np.zeros(end - first + 8, np.uint8)
    if data_buffer is not None:
        data[: end - first] = np.frombuffer(data_buffer, np.uint8, end - first, first)
    words_at = np.ndarray((len(data) - 7,), "<u8", data, 0, (1,))
    order = np.argsort(-lengths, kind="stable")
    starts, lengths = starts[order], lengths[order]
    descending = -lengths
    h = _start(lengths)
    for j in range((int(lengths[0]) + 7) // 8):
        low = 8 * j
        # The strings longer than ``low``, and of those the ones with all 8 bytes of this word.
        active = int(np.searchsorted(descending, -low, "left"))
        whole = int(np.searchsorted(descending, -(low + 8), "right"))
        word = words_at[starts[:active] + low]
        if whole < active:
            tail_bits = (lengths[whole:active] - low).astype(np.uint64) * np.uint64(8)
            word[whole:] &= (np.uint64(1) << tail_bits) - np.uint64(1)
        _fold(h[:active], word)
    out = np.empty(len(h), np.uint64)
    out[order] = h
    return out


def _finish(h: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        h ^= h >> _SHIFT_29
        h *= _FINAL_MIX_U64
        h ^= h >> _SHIFT_32
    return h
