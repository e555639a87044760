"""The in-memory twin of :class:`~statestore.store.ports.QueryableViewStore`: a dictionary per table,
counting the items read and written (what the view's costs are measured in)."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping

from statestore.errors import QueryableViewConflictError
from statestore.store.view_ports import QueryableViewStore
from statestore.views.queryable_view import ViewMeta, ViewValue


class InMemoryQueryableViewStore(QueryableViewStore):
    def __init__(self) -> None:
        self._items: dict[str, dict[str, ViewValue]] = {}
        self._meta: dict[str, ViewMeta] = {}
        self.items_read = 0
        self.items_written = 0

    def meta(self, table_id: str) -> ViewMeta | None:
        return self._meta.get(table_id)

    def replace_meta(self, table_id: str, new: ViewMeta, expected: ViewMeta | None) -> None:
        current = self._meta.get(table_id)
        if current != expected:
            raise QueryableViewConflictError(
                f"the queryable view of table {table_id!r} is at {current}, not at {expected}"
            )
        self._meta[table_id] = new

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
