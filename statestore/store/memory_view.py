"""The in-memory twin of :class:`~statestore.store.ports.QueryableViewStore`: a dictionary per table,
counting the items read and written (what the view's costs are measured in)."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping

from statestore.errors import DamagedViewItemError, QueryableViewConflictError
from statestore.store.view_ports import QueryableViewStore
from statestore.views.queryable_view import ViewMeta, ViewValue


class InMemoryQueryableViewStore(QueryableViewStore):
    def __init__(self) -> None:
        self._items: dict[str, dict[str, ViewValue]] = {}
        self._meta: dict[str, ViewMeta] = {}
        self._damaged_meta: dict[str, str] = {}  # a damaged meta's cause, by table (damage_meta)
        self.items_read = 0
        self.items_written = 0

    def meta(self, table_id: str) -> ViewMeta | None:
        cause = self._damaged_meta.get(table_id)
        if cause is not None:
            raise DamagedViewItemError(table_id, "meta", cause)
        return self._meta.get(table_id)

    def replace_meta(self, table_id: str, new: ViewMeta, expected: ViewMeta | None) -> None:
        current = self._meta.get(table_id)
        if current != expected or table_id in self._damaged_meta:
            raise QueryableViewConflictError(
                f"the queryable view of table {table_id!r} is at {current}, not at {expected}"
            )
        self._meta[table_id] = new

    def replace_damaged_meta(self, table_id: str, new: ViewMeta) -> None:
        if self._damaged_meta.pop(table_id, None) is None:
            raise QueryableViewConflictError(
                f"the queryable view's meta of table {table_id!r} is no longer damaged"
            )
        self._meta[table_id] = new

    def damage_meta(self, table_id: str, cause: str = "it was damaged") -> None:
        """Make the table's meta one that cannot be read (what a test of the repair starts from)."""
        self._meta.pop(table_id, None)
        self._damaged_meta[table_id] = cause

    def get(self, table_id: str, keys: Collection[str]) -> dict[str, ViewValue]:
        items = self._items.get(table_id, {})
        found = {key: items[key] for key in keys if key in items}
        self.items_read += len(found)
        return found

    def with_prefix(self, table_id: str, prefix: str) -> dict[str, ViewValue]:
        found = {k: v for k, v in self._items.get(table_id, {}).items() if k.startswith(prefix)}
        self.items_read += len(found)
        return found

    def descending(self, table_id: str, low: str, high: str) -> Iterator[ViewValue]:
        items = self._items.get(table_id, {})
        for key in sorted((k for k in items if low <= k <= high), reverse=True):
            if key in items:
                self.items_read += 1
                yield items[key]

    def write(self, table_id: str, puts: Mapping[str, ViewValue], deletes: Collection[str]) -> None:
        if puts.keys() & set(deletes):
            raise ValueError("an item cannot be both put and deleted in one write")
        items = self._items.setdefault(table_id, {})
        items.update(puts)
        for key in deletes:
            items.pop(key, None)
        self.items_written += len(puts) + len(deletes)

    def delete_table(self, table_id: str) -> None:
        self._items.pop(table_id, None)
        self._meta.pop(table_id, None)
        self._damaged_meta.pop(table_id, None)
