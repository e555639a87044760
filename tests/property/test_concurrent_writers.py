"""Writers racing on one log: every acknowledged commit is in the log exactly once, the numbers have
no gaps, and every writer ends with the state a full replay gives."""

from __future__ import annotations

import sys
import threading
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from statestore.codec.transaction_json import decode_entry
from statestore.engine.log_store import RetryPolicy, TransactionLogStateStore
from statestore.errors import CommitConflictError
from statestore.store.memory import InMemoryTransactionLog
from statestore.transactions import AddFiles, InitialisePartitions
from tests.builders import STRING_SCHEMA, data_key, ref, tree

TABLE = "table-1"


@settings(max_examples=30, deadline=None)
@given(
    files_per_writer=st.lists(st.integers(1, 6), min_size=2, max_size=6),
    max_attempts=st.sampled_from([3, 50]),
)
def test_racing_writers_each_acknowledged_commit_lands_exactly_once_with_no_gaps(
    files_per_writer: list[int], max_attempts: int
) -> None:
    log = InMemoryTransactionLog()
    TransactionLogStateStore(TABLE, STRING_SCHEMA, log).commit(
        InitialisePartitions(tuple(tree(STRING_SCHEMA, ["m"])))
    )
    policy = RetryPolicy(max_attempts=max_attempts, base_delay=0.0001, max_delay=0.001)
    writers = [TransactionLogStateStore(TABLE, STRING_SCHEMA, log, retry=policy) for _ in files_per_writer]
    acknowledged: list[tuple[int, str]] = []  # (transaction number, filename)
    gave_up: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(len(writers))

    def write(index: int, store: TransactionLogStateStore, count: int) -> None:
        start.wait()
        for n in range(count):
            filename = data_key(TABLE, f"w{index}-f{n}")
            partition_id = "p1" if n % 2 else "p2"
            try:
                result = store.commit(AddFiles((ref(filename, partition_id),)))
            except CommitConflictError:
                with lock:
                    gave_up.append(filename)
                continue
            with lock:
                acknowledged.append((result.transaction_number, filename))

    threads = [
        threading.Thread(target=write, args=(i, store, count))
        for i, (store, count) in enumerate(zip(writers, files_per_writer, strict=True))
    ]
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, so writers really collide
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch_interval)

    entries = list(log.read(TABLE, 1))
    numbers = [e.transaction_number for e in entries]
    assert numbers == list(range(1, len(entries) + 1))  # 1..N, none skipped
    assert len(acknowledged) + len(gave_up) == sum(files_per_writer)
    assert sorted(n for n, _ in acknowledged) == numbers[1:]  # each acknowledged number once, nothing else

    files_in_log: Counter[str] = Counter()
    for entry in entries[1:]:
        transaction = decode_entry(entry)
        assert isinstance(transaction, AddFiles)
        files_in_log.update(r.filename for r in transaction.references)
    assert files_in_log == Counter(filename for _, filename in acknowledged)
    for number, filename in acknowledged:
        [entry] = [e for e in entries if e.transaction_number == number]
        assert [r.filename for r in decode_entry(entry).references] == [filename]  # type: ignore[attr-defined]

    replay = TransactionLogStateStore(TABLE, STRING_SCHEMA, log).load()
    assert sorted(replay.files_by_name) == sorted(filename for _, filename in acknowledged)
    assert all(len(replay.file(name).references) == 1 for name in replay.files_by_name)
    for store in writers:
        assert store.state() == replay
