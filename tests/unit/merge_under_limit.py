"""Run one merge of a partition's files in this process under an address-space limit; print the outcome.

    python -m tests.unit.merge_under_limit {stream|load-all} DATA_DIR FILES LIMIT_MIB

``stream`` is compaction's merge (:func:`spark_client.file_io.merge_files`); ``load-all`` is what compaction
did before it: read every input into one table, sort it, write it. The limit (``RLIMIT_AS``) is set after
the imports, at ``LIMIT_MIB`` above the address space the process then has, so it bounds what the merge
itself can take. Run it with :data:`LIMITED_ENV`: mimalloc and glibc's per-thread arenas reserve hundreds
of megabytes of address space they never touch, and every thread's stack counts, so the limit would
measure the allocator and the machine's core count instead of the merge. Prints one JSON object: ``ok``,
``rows``, ``error``, ``pool_peak_bytes``.
"""

from __future__ import annotations

import json
import resource
import sys

import pyarrow as pa
import pyarrow.compute as pc

from spark_client.columns import arrow_schema, sort_columns
from spark_client.data_store import DataStore
from spark_client.file_io import DataFileWriter, merge_files, read_files
from statestore.model.schema import Schema

# The system allocator with one arena, and Arrow's thread pools at 2 threads whatever the machine.
LIMITED_ENV = {
    "ARROW_DEFAULT_MEMORY_POOL": "system",
    "MALLOC_ARENA_MAX": "1",
    "OMP_NUM_THREADS": "2",
    "ARROW_IO_THREADS": "2",
}

SCHEMA = Schema.of({"key": "long"}, sort_keys={"ts": "long"}, values={"value": "string"})


def input_names(files: int) -> list[str]:
    return [f"in/{i}.parquet" for i in range(files)]


def address_space() -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmSize:"))
    return int(line.split()[1]) * 1024


def load_all(data: DataStore, parts: list[tuple[str, None]], output: str) -> int:
    table = read_files(data, SCHEMA, parts)
    table = table.take(pc.sort_indices(table, sort_keys=[(k, "ascending") for k in sort_columns(SCHEMA)]))
    writer = DataFileWriter(data, output, arrow_schema(SCHEMA))
    writer.write_table(table)
    writer.close()
    return writer.rows


def main(argv: list[str]) -> None:
    mode, directory, files, limit_mib = argv[0], argv[1], int(argv[2]), int(argv[3])
    data = DataStore.local(directory)
    parts: list[tuple[str, None]] = [(name, None) for name in input_names(files)]
    resource.setrlimit(resource.RLIMIT_AS, (address_space() + limit_mib * 2**20, resource.RLIM_INFINITY))
    outcome: dict[str, object] = {"ok": False, "rows": None, "error": None}
    try:
        if mode == "stream":
            outcome["rows"] = merge_files(data, SCHEMA, parts, "out.parquet")
        else:
            outcome["rows"] = load_all(data, parts, "out.parquet")
        outcome["ok"] = True
    except MemoryError as e:  # pyarrow's ArrowMemoryError is one
        outcome["error"] = f"{type(e).__name__}: {e}"
    outcome["pool_peak_bytes"] = pa.default_memory_pool().max_memory()
    print(json.dumps(outcome))


if __name__ == "__main__":
    main(sys.argv[1:])
