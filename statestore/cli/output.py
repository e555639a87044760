"""How the CLI shows things: aligned tables and short summaries for people, plain JSON values for scripts."""

from __future__ import annotations

import base64
import datetime
import json
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any, TextIO

from statestore.model.files import FileReference, TableFile
from statestore.model.partitions import Partition
from statestore.model.schema import Key, KeyType, Schema
from statestore.store.ports import CommitStatus
from statestore.store.snapshot_ports import SnapshotInfo
from statestore.store.tables import TableInfo
from statestore.transactions import (
    AddFiles,
    AssignJobIds,
    ClearFiles,
    ClearTable,
    DeleteFiles,
    ExtendPartitionTree,
    InitialisePartitions,
    ReleaseClaims,
    ReplaceFileReferences,
    SplitFileReferences,
    SplitPartition,
    Transaction,
    TransactionBatch,
)


@dataclass
class Output:
    """Where results (stdout) and progress (stderr) go, and in which form."""

    json_mode: bool = False
    quiet: bool = False
    stdout: TextIO = dataclass_field(default_factory=lambda: sys.stdout)
    stderr: TextIO = dataclass_field(default_factory=lambda: sys.stderr)

    def result(self, data: Any, human: Callable[[], str]) -> None:
        """Print ``data`` as JSON, or ``human()`` as text."""
        text = json.dumps(data, indent=2, sort_keys=False) if self.json_mode else human()
        if text:
            print(text, file=self.stdout, flush=True)

    def progress(self, message: str) -> None:
        if not self.quiet:
            print(message, file=self.stderr, flush=True)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Rows under headers, each column as wide as its widest cell; numbers aligned right."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [bool(rows) and all(_is_number(r[i]) for r in rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(headers)), *(line(r) for r in cells)])


def _is_number(value: object) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int | float) or (isinstance(value, str) and value.lstrip("~").isdigit())


def render_fields(pairs: Sequence[tuple[str, object]]) -> str:
    """``name: value`` lines with the values aligned."""
    width = max((len(name) for name, _ in pairs), default=0)
    return "\n".join(f"{(name + ':').ljust(width + 1)} {_cell(value)}" for name, value in pairs)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def format_time(epoch_ms: int | None) -> str:
    """UTC, to the second: ``2024-05-01 12:00:00Z``."""
    if not epoch_ms:
        return "-"
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def iso_time(epoch_ms: int | None) -> str | None:
    """ISO 8601 UTC with milliseconds, for JSON output."""
    if not epoch_ms:
        return None
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"


# --- keys, partitions, files -------------------------------------------------------------------------


def key_json(value: Key | None) -> Any:
    """A key value in JSON as the transaction codec writes it: bytes as ``{"b64": ...}``."""
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode("ascii")}
    return value


def format_key(value: Key | None, key_type: KeyType, upper: bool = False) -> str:
    if value is None:
        return "+inf"
    if not upper and value == key_type.minimum:
        return "-inf"
    if isinstance(value, bytes):
        return "0x" + value.hex()
    if isinstance(value, str):
        return repr(value)
    return str(value)


def format_region(partition: Partition, schema: Schema) -> str:
    """``key in [10, 20)`` for each row key, joined by commas."""
    parts = []
    for field, value_range in zip(schema.row_keys, partition.region.ranges, strict=True):
        low = format_key(value_range.min, field.key_type)
        high = format_key(value_range.max, field.key_type, upper=True)
        parts.append(f"{field.name} in [{low}, {high})")
    return ", ".join(parts)


def partition_json(
    partition: Partition, schema: Schema, references: Sequence[FileReference]
) -> dict[str, Any]:
    return {
        "id": partition.id,
        "parent_id": partition.parent_id,
        "child_ids": list(partition.child_ids),
        "leaf": partition.leaf,
        "split_dimension": None if partition.leaf else partition.dimension,
        "region": [
            {"field": f.name, "min": key_json(r.min), "max": key_json(r.max)}
            for f, r in zip(schema.row_keys, partition.region.ranges, strict=True)
        ],
        "file_references": len(references),
        "rows": sum(r.number_of_rows for r in references),
        "rows_approximate": any(r.count_approximate for r in references),
    }


def reference_json(ref: FileReference) -> dict[str, Any]:
    return {
        "partition_id": ref.partition_id,
        "number_of_rows": ref.number_of_rows,
        "count_approximate": ref.count_approximate,
        "only_contains_data_for_this_partition": ref.only_contains_data_for_this_partition,
        "job_id": ref.job_id,
        "last_update_time": ref.last_update_time,
    }


def file_json(table_file: TableFile) -> dict[str, Any]:
    return {
        "filename": table_file.filename,
        "last_update_time": table_file.last_update_time,
        "references": [reference_json(r) for r in table_file.references],
    }


def rows_text(count: int, approximate: bool) -> str:
    return f"~{count}" if approximate else str(count)


# --- tables, statuses, snapshots ----------------------------------------------------------------------


def schema_text(fields: Sequence[Any]) -> str:
    return ", ".join(f"{f.name}:{f.type}" for f in fields) or "-"


def table_json(table: TableInfo) -> dict[str, Any]:
    return {
        "table_name": table.table_name,
        "table_id": table.table_id,
        "schema": table.schema.to_json(),
        "properties": dict(table.properties),
        "created_time": table.created_time,
        "file_store": table.file_store,
        "allowed_senders": list(table.allowed_senders),
        **({"deleting": True} if table.deleting else {}),
    }


def status_json(status: CommitStatus) -> dict[str, Any]:
    return {
        "request_id": status.request_id,
        "table_id": status.table_id,
        "outcome": status.outcome.value,
        "transaction_number": status.transaction_number,
        "reason": status.reason,
        "recorded_time": status.recorded_time,
    }


def snapshot_json(snapshot: SnapshotInfo | None) -> dict[str, Any] | None:
    if snapshot is None:
        return None
    return {
        "transaction_number": snapshot.transaction_number,
        "created_time": snapshot.created_time,
        "partitions_key": snapshot.partitions_key,
        "files_key": snapshot.files_key,
    }


# --- transactions ------------------------------------------------------------------------------------


def summarize(transaction: Transaction) -> str:
    """One short line saying what a transaction does."""
    if isinstance(transaction, TransactionBatch):
        counts = Counter(item.transaction.TYPE for item in transaction.items)
        if len(counts) == 1:
            [(only, _)] = counts.items()
            inner = [item.transaction for item in transaction.items]
            return f"{plural(len(inner), 'request')}: {_merged_summary(only, inner)}"
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
        return f"{plural(len(transaction.items), 'request')}: {kinds}"
    return _merged_summary(transaction.TYPE, [transaction])


def _merged_summary(kind: str, transactions: Sequence[Transaction]) -> str:
    """What several transactions of one type do together."""
    if kind == AddFiles.TYPE:
        refs = [r for t in transactions if isinstance(t, AddFiles) for r in t.references]
        unreferenced = sum(len(t.unreferenced_files) for t in transactions if isinstance(t, AddFiles))
        files = len({r.filename for r in refs}) + unreferenced
        rows = sum(r.number_of_rows for r in refs)
        extra = f", {unreferenced} with none" if unreferenced else ""
        return (
            f"added {plural(files, 'file')} ({plural(len(refs), 'reference')}{extra}, {plural(rows, 'row')})"
        )
    if kind == InitialisePartitions.TYPE:
        parts = [p for t in transactions if isinstance(t, InitialisePartitions) for p in t.partitions]
        leaves = sum(1 for p in parts if p.leaf)
        return f"initialised {plural(len(parts), 'partition')} ({plural(leaves, 'leaf', 'leaves')})"
    if kind == SplitPartition.TYPE:
        splits = [t for t in transactions if isinstance(t, SplitPartition)]
        if len(splits) == 1:
            return f"split partition {splits[0].parent.id} into {', '.join(c.id for c in splits[0].children)}"
        return f"split {plural(len(splits), 'partition')}"
    if kind == ExtendPartitionTree.TYPE:
        extensions = [t for t in transactions if isinstance(t, ExtendPartitionTree)]
        leaves = sum(len(t.updated_partitions) for t in extensions)
        added = sum(len(t.new_partitions) for t in extensions)
        below = plural(leaves, "leaf", "leaves")
        return f"extended the tree below {below} ({plural(added, 'new partition')})"
    if kind == AssignJobIds.TYPE:
        requests = [r for t in transactions if isinstance(t, AssignJobIds) for r in t.requests]
        files = sum(len(r.filenames) for r in requests)
        assignees = plural(len({r.job_id for r in requests}), "job")
        taking_over = any(
            isinstance(t, AssignJobIds) and t.take_over_claimed_before is not None for t in transactions
        )
        suffix = " (taking over expired claims)" if taking_over else ""
        return f"assigned {plural(files, 'file')} to {assignees}{suffix}"
    if kind == ReleaseClaims.TYPE:
        released = {j for t in transactions if isinstance(t, ReleaseClaims) for j in t.job_ids}
        return f"released the claims of {plural(len(released), 'job')}"
    if kind == ReplaceFileReferences.TYPE:
        jobs = [j for t in transactions if isinstance(t, ReplaceFileReferences) for j in t.jobs]
        inputs = sum(len(j.input_files) for j in jobs)
        return f"compacted {plural(inputs, 'file')} into {len(jobs)} ({plural(len(jobs), 'job')})"
    if kind == SplitFileReferences.TYPE:
        split_requests = [r for t in transactions if isinstance(t, SplitFileReferences) for r in t.requests]
        return f"split references of {plural(len(split_requests), 'file')}"
    if kind == DeleteFiles.TYPE:
        names = [n for t in transactions if isinstance(t, DeleteFiles) for n in t.filenames]
        return f"deleted {plural(len(names), 'file')}"
    if kind == ClearFiles.TYPE:
        return "cleared every file"
    if kind == ClearTable.TYPE:
        return "cleared every file and partition"
    return kind
