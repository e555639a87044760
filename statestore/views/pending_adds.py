"""The ``AddFiles`` entries behind a queryable view that a query's replay does not apply, and the search of
their text for the names a query asks about (decoding only the entries that may hold them)."""

from __future__ import annotations

import bisect
import functools
import itertools
import json
from collections.abc import Callable, Sequence

from statestore.transactions import AddFiles


class PendingAdd:
    """An ``AddFiles`` entry a query's replay did not apply: its update time and its transaction, decoded
    only if a query needs it.

    ``text`` is the entry's JSON body (decompressed), searched for a name before decoding: the codec writes
    a name that needs no escaping in JSON as itself between quotes, so a body that does not hold
    ``"<name>"`` adds nothing named so. A name that would be escaped is never searched for (the entry is
    decoded). Made from a decoded transaction, it has no text and is always read.
    """

    __slots__ = ("_decode", "_transaction", "text", "update_time")

    def __init__(
        self, update_time: int, text: bytes | None, decode: Callable[[], AddFiles] | AddFiles
    ) -> None:
        self.update_time = update_time
        self.text = text
        self._transaction = decode if isinstance(decode, AddFiles) else None
        self._decode = None if isinstance(decode, AddFiles) else decode

    @property
    def transaction(self) -> AddFiles:
        if self._transaction is None:
            assert self._decode is not None
            self._transaction = self._decode()
        return self._transaction

    def may_name(self, name: str) -> bool:
        """False only if the entry certainly adds nothing named ``name`` (file or partition)."""
        if self.text is None or self._transaction is not None:
            return True
        needle = _quoted(name)
        return needle is None or needle in self.text


class PendingTexts:
    """Which of a run of pending adds may name a given name, searched in all their texts at once.

    The texts are joined (JSON text holds no NUL, and a quoted name no NUL either, so a match never spans
    two entries) and each name is found with ``bytes.find`` over the whole run, instead of a search per
    entry and name: a region query asks about each partition above its leaf, and a view 1,000 entries
    behind has 1,000 texts to ask.
    """

    def __init__(self, added: Sequence[PendingAdd]) -> None:
        self.added = added
        self._always = [i for i, p in enumerate(added) if p.text is None]
        texts = [(i, p.text) for i, p in enumerate(added) if p.text is not None]
        self._entries = [i for i, _ in texts]  # the entry of each joined text, and where the text starts
        self._starts = list(itertools.accumulate((len(t) + 1 for _, t in texts[:-1]), initial=0))
        self._joined = b"\0".join(t for _, t in texts)

    def naming(self, name: str) -> list[PendingAdd]:
        """The pending adds that may add something named ``name``, in their order."""
        needle = _quoted(name)
        if needle is None:
            return list(self.added)
        found = set(self._always)
        at = self._joined.find(needle)
        while at != -1:
            k = bisect.bisect_right(self._starts, at) - 1
            found.add(self._entries[k])
            if k + 1 == len(self._starts):
                break
            at = self._joined.find(needle, self._starts[k + 1])
        return [self.added[i] for i in sorted(found)]


@functools.lru_cache(maxsize=4096)
def _quoted(name: str) -> bytes | None:
    """``name`` as the codec writes it between quotes, or None if JSON would escape it (a query asks about
    a few names, each searched for in many entries: encoded once)."""
    quoted = json.dumps(name)
    return None if quoted[1:-1] != name else quoted.encode("ascii")
