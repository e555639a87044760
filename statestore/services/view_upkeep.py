"""Keeping the queryable views of tables current: a step of the snapshot worker, after its snapshot.

A table asks for it with its property ``queryable_view=true`` (:data:`statestore.store.tables.
QUERYABLE_VIEW_PROPERTY`); a deployment keeps views at all only when its stack option ``queryable_views``
is on, which reaches the snapshot function as :data:`QUERYABLE_VIEWS_ENV` (and decides whether its role
may write the view's items).

The step is :meth:`QueryableView.update <statestore.engine.queryable_view.QueryableView.update>`: it applies
the log entries since the view's number as item writes, so its cost follows what changed, not the
table's size. Its ``load_state`` is the state the snapshot step loaded (the worker's warm store), used only
to rebuild a view that is missing, half written or behind the log's trimmed point.

The snapshot comes first and never waits for the view: a failure of the view's update is logged, counted
in the outcome (the function turns it into a metric) and left for the next period, whose plan queues the
table again because its view is behind its log (:func:`view_behind`), even when no snapshot is due.

Switching the property off stops the upkeep; the items are kept, and ignored: the client refuses queries
through the view of a table without the property, and switching it on again continues from the view's
number (or rebuilds, if cleanup trimmed the log past it). Deleting the table deletes them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from statestore.engine.queryable_view import QueryableView, UpkeepResult
from statestore.errors import DamagedViewItemError, QueryableViewConflictError
from statestore.state.table_state import TableState
from statestore.store.ports import TransactionLogStore
from statestore.store.tables import TableInfo
from statestore.store.view_ports import QueryableViewStore

logger = logging.getLogger(__name__)

# The stack option ``queryable_views`` as the snapshot function reads it: "true" or "false" (unset: true,
# as the local runtime runs it).
QUERYABLE_VIEWS_ENV = "STATESTORE_QUERYABLE_VIEWS"
_SWITCH = {"true": True, "false": False}
# The snapshot function's count of failed view updates, which the stack's alarm watches.
VIEW_FAILURES_METRIC = "QueryableViewUpdateFailures"


def views_kept(environ: Mapping[str, str]) -> bool:
    """Whether this deployment keeps tables' queryable views (:data:`QUERYABLE_VIEWS_ENV`). Raises
    ValueError naming the variable for a value other than true or false."""
    raw = environ.get(QUERYABLE_VIEWS_ENV, "").strip()
    if not raw:
        return True
    try:
        return _SWITCH[raw.lower()]
    except KeyError:
        raise ValueError(f"{QUERYABLE_VIEWS_ENV}={raw!r} must be true or false") from None


@dataclass(frozen=True)
class ViewOutcome:
    """What the upkeep did to one table's view: ``result`` when it moved (or found it current), ``skipped``
    when another upkeep moved it first, ``error`` when it failed (nothing lost: retried next period)."""

    table_id: str
    result: UpkeepResult | None = None
    skipped: str | None = None
    error: str | None = None


def view_behind(table: TableInfo, log_head: int, views: QueryableViewStore) -> bool:
    """Whether ``table`` asks for a view that is not at ``log_head`` (its log's latest entry): missing, left
    half written, behind, or with a meta that cannot be read. One read of the view's meta, none for a table
    without the property. Raises StateStoreError for a property value that is not true or false."""
    if not table.queryable_view:
        return False
    try:
        meta = views.meta(table.table_id)
    except DamagedViewItemError as e:  # the upkeep rebuilds it
        logger.warning("the queryable view of table %r is due a rebuild: %s", table.table_id, e)
        return True
    return meta is None or meta.writing_to is not None or meta.transaction_number < log_head


def update_view(
    table: TableInfo,
    log: TransactionLogStore,
    views: QueryableViewStore,
    load_state: Callable[[], TableState],
) -> ViewOutcome:
    """Bring ``table``'s view to its log's latest entry (see the module's docstring). Never raises: what
    failed is logged and returned, so the snapshot it follows is reported whatever happens here."""
    table_id = table.table_id
    try:
        result = QueryableView(table_id, table.schema, log, views).update(load_state)
    except QueryableViewConflictError as e:
        return ViewOutcome(table_id, skipped=f"another upkeep moved the view first: {e}")
    # Any failure, not only the store's: the view is a derived model, and no fault of its upkeep may cost
    # the snapshot outcome before it; the next period retries, and the function counts the failure.
    except Exception as e:
        logger.exception("could not update the queryable view of table %r", table_id)
        return ViewOutcome(table_id, error=f"{type(e).__name__}: {e}")
    return ViewOutcome(table_id, result=result)
