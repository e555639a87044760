"""The queryable view's port: the items of each table's view and its meta, with an in-memory twin in
``memory_view.py`` and the DynamoDB adapter in ``statestore.adapters.aws.dynamodb_view``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from statestore.views.queryable_view import ViewMeta, ViewValue


class QueryableViewStore(ABC):
    """The items of each table's queryable view (``statestore.views.queryable_view``) and its meta.

    Reads are strongly consistent. Writes of items are not atomic together: the meta's ``writing_to``
    tells readers not to use the items while an upkeep writes them (see ``ViewMeta``).
    """

    @abstractmethod
    def meta(self, table_id: str) -> ViewMeta | None:
        """Where the table's view stands, or None if it has none. Raises DamagedViewItemError for a meta that
        cannot be read (:meth:`replace_damaged_meta` repairs it)."""

    @abstractmethod
    def replace_meta(self, table_id: str, new: ViewMeta, expected: ViewMeta | None) -> None:
        """Set the meta to ``new`` if it is ``expected`` (None: absent); else raise
        QueryableViewConflictError and change nothing."""

    @abstractmethod
    def replace_damaged_meta(self, table_id: str, new: ViewMeta) -> None:
        """Set the meta to ``new`` in place of one that cannot be read, if it is still that damaged item;
        else (repaired, moved or removed meanwhile) raise QueryableViewConflictError and change nothing."""

    @abstractmethod
    def get(self, table_id: str, keys: Collection[str]) -> dict[str, ViewValue]:
        """The items at ``keys`` that exist. Each read of items raises DamagedViewItemError for one whose
        value cannot be decoded."""

    @abstractmethod
    def with_prefix(self, table_id: str, prefix: str) -> dict[str, ViewValue]:
        """Every item whose key starts with ``prefix`` (``""``: every item)."""

    def keys(self, table_id: str) -> list[str]:
        """The keys of every item, whether or not its value can be read (a store that decodes values
        reads only the keys)."""
        return list(self.with_prefix(table_id, ""))

    def with_prefixes(self, table_id: str, prefixes: Sequence[str]) -> list[dict[str, ViewValue]]:
        """:meth:`with_prefix` of each of ``prefixes``, in their order (a store may read them at once)."""
        return [self.with_prefix(table_id, prefix) for prefix in prefixes]

    @abstractmethod
    def descending(self, table_id: str, low: str, high: str) -> Iterator[ViewValue]:
        """The items with keys from ``low`` to ``high`` (both included), highest key first, read as the
        caller takes them: one that stops early reads little more than it took."""

    @abstractmethod
    def write(self, table_id: str, puts: Mapping[str, ViewValue], deletes: Collection[str]) -> None:
        """Put and delete items (disjoint keys); absent keys to delete are ignored. Not atomic: an
        interrupted write leaves some done (the caller set ``writing_to`` first)."""

    @abstractmethod
    def delete_table(self, table_id: str) -> None:
        """Delete the table's items and meta."""
