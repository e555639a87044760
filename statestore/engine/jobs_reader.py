"""Keeps a table's job-status model up to date from its log, and saves it beside the state snapshots.

Like any reader of the log, :class:`JobStatusReader` starts from a saved position and reads only the entries
after it. The model is folded together with the table state (see :mod:`statestore.views.jobs_model`), so a
saved model at transaction N is continued from the table state at N, which the state snapshots and the log
give.

Why a JSON object beside the state snapshots rather than inside them: the model is small next to the state
(a few hundred bytes per job), it changes shape independently of the Parquet snapshot format, and readers
of the state never need it. It is written at the same transaction number as a state snapshot
(:meth:`JobStatusReader.save` with ``transaction_number`` of that snapshot), so loading it needs that
snapshot and no log at all, and cleanup, which keeps the log after its newest old-enough state snapshot,
never deletes entries the newest saved model still needs. Saved models live under the snapshot prefix,
where garbage collection of data files never looks.
"""

from __future__ import annotations

import json
import logging

from statestore.codec.transaction_json import decode_entry
from statestore.engine.log_store import TransactionLogStateStore, entries_after
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import BlobNotFoundError, CodecError, StateStoreError, TransactionNotRetainedError
from statestore.model import layout
from statestore.model.schema import Schema
from statestore.state.table_state import TableState
from statestore.store.ports import TransactionLogStore
from statestore.views.jobs_model import JobsModel, fold, model_from_json, model_to_json, seeded_from

logger = logging.getLogger(__name__)


class JobStatusReader:
    """The job-status model of one table, brought up to date by reading only the log entries it has not seen.

    Not thread-safe: give each thread its own instance.
    """

    def __init__(
        self,
        table_id: str,
        schema: Schema,
        log: TransactionLogStore,
        snapshots: SnapshotStore,
        *,
        keep_saved: int = 2,
    ) -> None:
        if keep_saved < 1:
            raise ValueError(f"keep_saved must be 1 or more, got {keep_saved}")
        self.table_id = table_id
        self.schema = schema
        self.log = log
        self.snapshots = snapshots
        self.keep_saved = keep_saved
        self._model: JobsModel | None = None
        self._state: TableState | None = None
        self.entries_folded = 0  # log entries this instance folded, for tests and metrics

    def model(self, to_number: int | None = None) -> JobsModel:
        """The model up to date with the log (or at ``to_number``). Treat it as read-only.

        Raises TransactionNotRetainedError when ``to_number`` is behind the position already reached.
        """
        if self._model is None or self._state is None:
            self._model, self._state = self._load(to_number)
        else:
            try:
                self._follow(self._model, self._state, to_number)
            except TransactionNotRetainedError:
                # Cleanup deleted entries this reader had not seen: start again from what is saved.
                self._model, self._state = self._load(to_number)
        if to_number is not None and self._model.transaction_number != to_number:
            raise TransactionNotRetainedError(
                f"table {self.table_id!r}: the job model is at transaction {self._model.transaction_number} "
                f"and cannot go back to {to_number}"
            )
        return self._model

    def save(self, transaction_number: int | None = None) -> int:
        """Save the model (at ``transaction_number``: that of a state snapshot just written, else the latest)
        and delete saved models older than the newest ``keep_saved``; returns the number saved at."""
        model = self.model(transaction_number)
        number = model.transaction_number
        body = json.dumps(model_to_json(model), separators=(",", ":")).encode()
        self.snapshots.blobs.put(layout.jobs_model_key(self.table_id, number), body)
        older = [n for n in self._saved_numbers() if n <= number][: -self.keep_saved]
        self.snapshots.blobs.delete([layout.jobs_model_key(self.table_id, n) for n in older])
        return number

    # --- loading --------------------------------------------------------------------------------

    def _saved_numbers(self) -> list[int]:
        """Transaction numbers of the saved models, oldest first."""
        numbers = []
        prefix = layout.jobs_model_prefix(self.table_id)
        for key in self.snapshots.blobs.list(prefix):
            stem = key[len(prefix) :].removesuffix(".json")
            if stem.isdigit():
                numbers.append(int(stem))
        return sorted(numbers)

    def _load(self, to_number: int | None) -> tuple[JobsModel, TableState]:
        """From the newest usable saved model; else the whole log; else (its start deleted) the newest state
        snapshot, with the claims it holds as the start of the history."""
        for number in reversed(self._saved_numbers()):
            if to_number is not None and number > to_number:
                continue
            loaded = self._load_saved(number)
            if loaded is not None:
                self._follow(*loaded, to_number)
                return loaded
        model, state = JobsModel(), TableState(self.schema)
        try:
            self._follow(model, state, to_number)
            return model, state
        except TransactionNotRetainedError:
            pass
        info = self.snapshots.latest_at_or_before(self.table_id, to_number)
        if info is None:
            raise TransactionNotRetainedError(
                f"table {self.table_id!r}: the start of the log was deleted and no snapshot covers it"
            )
        state = self.snapshots.read(info, self.schema)
        model = seeded_from(state)
        logger.warning(
            "table %r: no saved job model and the log before %d is gone; job history starts there",
            self.table_id, model.history_from,
        )  # fmt: skip
        self._follow(model, state, to_number)
        return model, state

    def _load_saved(self, number: int) -> tuple[JobsModel, TableState] | None:
        """The saved model at ``number`` with the table state at ``number``; None if either cannot be had."""
        key = layout.jobs_model_key(self.table_id, number)
        try:
            model = model_from_json(json.loads(self.snapshots.blobs.get(key)))
            if model.transaction_number != number:
                raise CodecError(f"it holds transaction {model.transaction_number}")
            state = TransactionLogStateStore(self.table_id, self.schema, self.log, self.snapshots).load(
                number
            )
        except (BlobNotFoundError, TransactionNotRetainedError) as e:
            logger.warning(
                "table %r: cannot continue the job model saved at %d: %s", self.table_id, number, e
            )
            return None
        except (CodecError, ValueError) as e:
            logger.warning("table %r: the job model saved at %d is unreadable: %s", self.table_id, number, e)
            return None
        return model, state

    def _follow(self, model: JobsModel, state: TableState, to_number: int | None) -> None:
        """Fold the entries after ``model``'s position (up to ``to_number``) into it and ``state``."""
        if to_number is not None and to_number <= model.transaction_number:
            return
        after = model.transaction_number
        for entry in entries_after(self.log, self.table_id, after, to_number, "saved job model"):
            fold(
                model, state, entry.transaction_number, entry.update_time, decode_entry(entry, self.table_id)
            )
            self.entries_folded += 1
        if to_number is not None and model.transaction_number < to_number:
            raise StateStoreError(
                f"table {self.table_id!r} has no transaction {to_number} (the job model reached "
                f"{model.transaction_number})"
            )


def save_job_model_beside_snapshot(
    table_id: str, schema: Schema, log: TransactionLogStore, snapshots: SnapshotStore, transaction_number: int
) -> int | None:
    """Save the table's job model at the number of the state snapshot just written (read incrementally from
    the previous saved one); returns that number, or None if it failed (logged: the state snapshot stands,
    and the next snapshot saves the model again)."""
    try:
        return JobStatusReader(table_id, schema, log, snapshots).save(transaction_number)
    except StateStoreError:
        logger.exception("table %r: could not save the job model at %d", table_id, transaction_number)
        return None
