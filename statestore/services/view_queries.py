"""The client's queries through tables' queryable views (a mixin of
:class:`~statestore.services.client.StateStoreClient`): switching a table's view, where it stands, bringing
it current, and the four queries, each refusing a table without the setting unless a full load is asked
for."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from statestore.engine.log_store import TableStateStore
from statestore.engine.queryable_view import Answer, QueryableView, UpkeepResult
from statestore.errors import (
    DamagedViewItemError,
    QueryableViewOffError,
    StateStoreError,
    TransactionNotRetainedError,
)
from statestore.model.files import FileReference, TableFile
from statestore.model.partitions import Region
from statestore.model.schema import Key
from statestore.state.table_state import TableState
from statestore.store.ports import TableIndex, TransactionLogStore
from statestore.store.tables import QUERYABLE_VIEW_PROPERTY, TableInfo
from statestore.store.view_ports import QueryableViewStore
from statestore.views import view_answers as answers

T = TypeVar("T")
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueryableViewStatus:
    """Whether a table keeps a queryable view, and where it stands: the view's transaction number (None:
    not built), the number an upkeep is writing it to (None: none is), and the log's latest entry."""

    table_name: str
    table_id: str
    enabled: bool
    transaction_number: int | None
    writing_to: int | None
    log_head: int

    @property
    def behind(self) -> int | None:
        """How many log entries the view is behind (None: not built)."""
        return None if self.transaction_number is None else self.log_head - self.transaction_number


class QueryableViewQueries:
    """What the client does with tables' queryable views (see the module's docstring)."""

    table_index: TableIndex
    log: TransactionLogStore
    queryable_view_store: QueryableViewStore | None

    if TYPE_CHECKING:  # the client's, which this works beside

        def get_table(self, table: str) -> TableInfo: ...

        def _open(self, info: TableInfo) -> TableStateStore: ...

        def _check_live(self, table_id: str) -> None: ...

    def set_queryable_view(self, table: str, enabled: bool) -> TableInfo:
        """Switch the table's queryable view on or off (its property ``queryable_view``).

        On: the deployment's snapshot upkeep builds the view at its next period and keeps it current after
        each snapshot (where the stack option ``queryable_views`` is on), and the queries below answer
        through it. Off: the upkeep stops and the queries refuse; the view's items are kept, unused, and
        switching it on again continues from them. Raises TableNotFoundError, StateStoreError for a table
        whose file references are not on its log."""
        info = self.get_table(table)
        return self.table_index.set_property(
            info.table_id, QUERYABLE_VIEW_PROPERTY, "true" if enabled else "false"
        )

    def queryable_view_status(self, table: str) -> QueryableViewStatus:
        """Whether the table keeps a view, and where the view stands against its log (three reads)."""
        info = self.get_table(table)
        meta = self._view_store().meta(info.table_id)
        return QueryableViewStatus(
            info.table_name,
            info.table_id,
            info.queryable_view,
            None if meta is None else meta.transaction_number,
            None if meta is None else meta.writing_to,
            self.log.latest_number(info.table_id),
        )

    def update_queryable_view(self, table: str) -> UpkeepResult:
        """Bring the table's view to its log's latest entry now, as the upkeep does after a snapshot (a full
        load only if it must be rebuilt). Raises QueryableViewOffError for a table without the setting,
        QueryableViewConflictError if an upkeep moved the view meanwhile."""
        info = self.get_table(table)
        return self._view(info).update(self._open(info).state)

    def rebuild_queryable_view(self, table: str) -> UpkeepResult:
        """Write the table's view again from a full load of its state: every item it should hold, and any
        other deleted, whatever the view held (the repair of a damaged item, which the upkeep redoes only
        where its own reads meet one). Raises QueryableViewOffError for a table without the setting."""
        info = self.get_table(table)
        return self._view(info).rebuild(self._open(info).state())

    def references_in_partition(
        self, table: str, partition_id: str, *, allow_full_load: bool = False
    ) -> Answer[list[FileReference]]:
        """The references in one partition, ordered by filename, through the table's queryable view,
        current to the log's latest entry (the answer's ``transaction_number``). See :meth:`file` for the
        errors and ``allow_full_load``."""
        return self._answer(
            table,
            lambda view: view.references_in_partition(partition_id),
            lambda state: answers.references_in_partition(state, partition_id),
            allow_full_load,
        )

    def references_in_region(
        self,
        table: str,
        region: Region | Mapping[str, tuple[Key | None, Key | None]],
        *,
        allow_full_load: bool = False,
    ) -> Answer[dict[str, list[FileReference]]]:
        """By partition id, the references of every partition overlapping ``region`` (the leaves and the
        partitions above them): the files holding the region's rows, through the queryable view.

        ``region``: a :class:`Region`, or ``{row key: (min, max)}`` (min inclusive, max exclusive, None
        unbounded; row keys not named cover their whole range), checked against the table's schema
        (InvalidKeyError, InvalidPartitionTreeError). See :meth:`file` for the rest."""
        info = self.get_table(table)
        wanted = region if isinstance(region, Region) else Region.of(info.schema, region)
        return self._answer(
            info.table_id,
            lambda view: view.references_in_region(wanted),
            lambda state: answers.references_in_region(state, wanted),
            allow_full_load,
        )

    def claimed_references(
        self, table: str, job_id: str, *, allow_full_load: bool = False
    ) -> Answer[list[FileReference]]:
        """The references compaction job ``job_id`` holds, ordered by filename and partition, through the
        queryable view. See :meth:`file`."""
        return self._answer(
            table,
            lambda view: view.claimed_references(job_id),
            lambda state: answers.claimed_references(state, job_id),
            allow_full_load,
        )

    def file(self, table: str, filename: str, *, allow_full_load: bool = False) -> Answer[TableFile | None]:
        """The file with all its references and its update time (None if the table has no such file),
        through the table's queryable view: it reads only the view's items it needs and the log entries
        after the view's number, and answers as a full load at the log's latest entry would.

        A table without the setting raises QueryableViewOffError, unless ``allow_full_load``: then the
        answer comes from a full load of its state (the same answer, at a full load's cost), as it does,
        with a warning, when the view holds a damaged item (else DamagedViewItemError:
        :meth:`rebuild_queryable_view`). Raises TransactionNotRetainedError when the view is behind what the
        log keeps (its upkeep has not run: :meth:`update_queryable_view`), QueryableViewBusyError while an
        upkeep keeps writing it."""
        return self._answer(
            table,
            lambda view: view.file(filename),
            lambda state: answers.file(state, filename),
            allow_full_load,
        )

    def _view(self, info: TableInfo) -> QueryableView:
        if not info.queryable_view:
            raise QueryableViewOffError(
                f"table {info.table_name!r} has no queryable view: switch it on with `statestore tables "
                f"view {info.table_name} --on` (StateStoreClient.set_queryable_view), or read the answer "
                "from a full load (--full-load, allow_full_load=True)"
            )
        return QueryableView(info.table_id, info.schema, self.log, self._view_store())

    def _view_store(self) -> QueryableViewStore:
        if self.queryable_view_store is None:
            raise StateStoreError(
                "this client has no queryable view store: give one (StateStoreClient(..., "
                "queryable_view=...); statestore.connect and StateStoreClient.for_aws give the instance's)"
            )
        return self.queryable_view_store

    def _answer(
        self,
        table: str,
        through_view: Callable[[QueryableView], Answer[T]],
        from_state: Callable[[TableState], T],
        allow_full_load: bool,
    ) -> Answer[T]:
        info = self.get_table(table)

        def from_full_load() -> Answer[T]:
            state = self._open(info).state()
            return Answer(state.transaction_number, from_state(state), from_full_load=True)

        if allow_full_load and not info.queryable_view:
            return from_full_load()
        view = self._view(info)
        try:
            try:
                answer = through_view(view)
            finally:
                # A table whose delete began says so, rather than answer from (or fail on) its partly
                # deleted view and log.
                self._check_live(info.table_id)
            return answer
        except DamagedViewItemError as e:
            if not allow_full_load:
                raise
            logger.warning("answering from a full load: %s", e)
            return from_full_load()
        except TransactionNotRetainedError as e:
            meta = self._view_store().meta(info.table_id)
            at = "has not been built" if meta is None else f"is at transaction {meta.transaction_number}"
            raise TransactionNotRetainedError(
                f"the queryable view of table {info.table_name!r} {at}, behind what the log still holds "
                f"({e}): no upkeep has kept it current (is the stack option queryable_views off?); bring it "
                f"current with `statestore tables view {info.table_name} --update`"
            ) from None
