"""LIST calls of one period's orphan sweep against the table's size: the whole data prefix (the sweep before
the data keys carried their hour) against the window since the watermark (statestore.engine.orphan_sweep).

Each table has ``--keys`` data keys (100,000 and 1,000,000 by default) made over the 30 days before the
first run, then ``--per-hour`` new keys an hour (a tenth of them never committed: orphans), and cleanup runs
hourly with the default policy (orphan delay, clock skew, upload allowance). The figures, per table size:

- **whole prefix**: the LIST calls of listing the table's data prefix, as every period did before;
- **window**: the most LIST calls of any of ``--runs`` consecutive hourly sweeps once the first run's full
  pass is done (the steady state), and the keys they listed;
- **full-pass slice**: the LIST calls of a run while a full pass goes on (one slice at most).

Every call goes through the real S3 adapter (``S3BlobStore``) to an in-process fake of ``ListObjectsV2``
(``Prefix``, ``StartAfter``, ``MaxKeys``, ``ContinuationToken``; keys in byte order) that counts calls, so the
figures are counts, not times: they do not move with the machine. Targets: the window's calls at the
largest size are no more than at the smallest plus one page (they follow what was written, not the table),
and at most a tenth of the whole prefix's at the largest size.

    .venv/bin/python benchmarks/bench_orphan_sweep.py            # 100k and 1M keys
    .venv/bin/python benchmarks/bench_orphan_sweep.py --quick    # 20k and 100k keys, not judged
"""

from __future__ import annotations

import argparse
import bisect
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from results import Figure, record  # noqa: E402

from statestore.adapters.aws.s3_blobs import S3BlobStore  # noqa: E402
from statestore.engine.log_store import TransactionLogStateStore  # noqa: E402
from statestore.engine.orphan_sweep import SweepProgress, load_progress, save_progress, sweep_orphans  # noqa: E402
from statestore.engine.snapshots import SnapshotStore  # noqa: E402
from statestore.model import layout  # noqa: E402
from statestore.model.files import FileReference  # noqa: E402
from statestore.model.partition_tree import partitions_from_split_points  # noqa: E402
from statestore.model.schema import Schema  # noqa: E402
from statestore.services.cleanup_policy import CleanupPolicy  # noqa: E402
from statestore.store.memory import InMemorySnapshotMetadataStore, InMemoryTransactionLog  # noqa: E402
from statestore.transactions import AddFiles, InitialisePartitions  # noqa: E402

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
BUCKET = "bench"


class FakeS3:
    """Just enough of an S3 client for S3BlobStore over one bucket, counting ListObjectsV2 calls."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.modified: dict[str, int] = {}
        self.bodies: dict[str, bytes] = {}
        self.list_calls = 0

    def add(self, key: str, modified: int, body: bytes = b"") -> None:
        if key not in self.modified:
            bisect.insort(self.keys, key)
        self.modified[key] = modified
        self.bodies[key] = body

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, **_: Any) -> dict[str, Any]:  # noqa: N803
        self.add(Key, max(self.modified.values(), default=0), Body)
        return {}

    def get_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803
        if Key not in self.bodies:
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": "NoSuchKey", "Message": Key}}, "GetObject")

        class Body:
            def __init__(self, data: bytes) -> None:
                self.data = data

            def read(self) -> bytes:
                return self.data

            def close(self) -> None:
                pass

        return {"Body": Body(self.bodies[Key])}

    def delete_objects(self, *, Bucket: str, Delete: dict[str, Any]) -> dict[str, Any]:  # noqa: N803
        for obj in Delete["Objects"]:
            key = obj["Key"]
            if key in self.modified:
                del self.modified[key], self.bodies[key]
                self.keys.pop(bisect.bisect_left(self.keys, key))
        return {}

    def list_objects_v2(
        self,
        *,
        Bucket: str,  # noqa: N803
        Prefix: str,  # noqa: N803
        MaxKeys: int,  # noqa: N803
        StartAfter: str = "",  # noqa: N803
        ContinuationToken: str | None = None,  # noqa: N803
    ) -> dict[str, Any]:
        self.list_calls += 1
        after = ContinuationToken if ContinuationToken is not None else StartAfter
        start = max(bisect.bisect_left(self.keys, Prefix), bisect.bisect_right(self.keys, after))
        page = []
        for key in self.keys[start : start + MaxKeys + 1]:
            if not key.startswith(Prefix):
                break
            page.append(key)
        truncated = len(page) > MaxKeys
        page = page[:MaxKeys]
        response: dict[str, Any] = {
            "Contents": [
                {"Key": k, "LastModified": datetime.fromtimestamp(self.modified[k] / 1000, UTC)} for k in page
            ],
            "IsTruncated": truncated,
        }
        if truncated:
            response["NextContinuationToken"] = page[-1]
        return response


def measure(keys: int, per_hour: int, runs: int) -> dict[str, float]:
    s3 = FakeS3()
    blobs = S3BlobStore(s3, BUCKET)
    log = InMemoryTransactionLog(blobs)
    snapshots = SnapshotStore(InMemorySnapshotMetadataStore(), blobs)
    schema = Schema.of({"key": "int"})
    table_id = uuid.uuid4().hex
    store = TransactionLogStateStore(table_id, schema, log, snapshots)
    store.commit(InitialisePartitions(tuple(partitions_from_split_points(schema, []))))
    policy = CleanupPolicy()
    delay = policy.orphan_delay_ms(policy.gc_delay_ms)

    first = 1_767_225_600_000  # the first run's time
    history = 30 * DAY_MS
    for i in range(keys):  # the table's history: made and last written over 30 days before the first run
        made = first - history + i * history // keys
        s3.add(layout.new_data_key(table_id, made), made)
    # Only the recent keys need to be in the state for the sweep to judge them right; the old ones are never
    # listed by a window (and the full pass is done before the figures are taken).

    def sweep(now: int) -> tuple[int, int]:
        s3.list_calls = 0
        outcome = sweep_orphans(
            store, snapshots.metadata, blobs, now=now, cutoff=now - delay,
            max_clock_skew_ms=policy.max_clock_skew_ms, max_upload_ms=policy.max_upload_ms,
            full_pass_interval_ms=policy.full_sweep_interval_ms, may_delete=lambda _key: True,
        )  # fmt: skip
        return s3.list_calls, outcome.keys_listed

    s3.list_calls = 0
    blobs.list_modified(layout.data_prefix(table_id))
    whole = s3.list_calls

    # The first run starts the full pass; with every old key "committed" for the pass, mark them known by
    # running the pass with nothing old enough to delete (a cutoff before the history).
    now = first
    slice_calls = []
    while True:
        s3.list_calls = 0
        sweep_orphans(
            store, snapshots.metadata, blobs, now=now, cutoff=first - history - 1,
            max_clock_skew_ms=policy.max_clock_skew_ms, max_upload_ms=policy.max_upload_ms,
            full_pass_interval_ms=policy.full_sweep_interval_ms, may_delete=lambda _key: True,
        )  # fmt: skip
        slice_calls.append(s3.list_calls)
        if load_progress(blobs, table_id).full_pass_cursor is None:
            break
        now += HOUR_MS

    # The steady state: hourly runs from three days on (past the overlap, so no window reaches back into the
    # history), the last one's watermark an hour before the first.
    now = first + 3 * DAY_MS
    # The runs judge keys an orphan delay after they were written: their clock is that far ahead.
    done = SweepProgress(watermark=now, full_pass_started=now + delay, full_pass_done=now + delay)
    save_progress(blobs, table_id, done)
    window_calls, window_keys = [], []
    for _ in range(runs):
        written = [layout.new_data_key(table_id, now + i) for i in range(per_hour)]
        for i, key in enumerate(written):
            s3.add(key, now + i)
        committed = written[per_hour // 10 :]
        store.commit(AddFiles(tuple(FileReference(k, "root", 1, False, True, None, 0) for k in committed)))
        now += HOUR_MS
        calls, listed = sweep(now + delay)  # the run an orphan delay later judges this hour's keys
        window_calls.append(calls)
        window_keys.append(listed)
    return {
        "whole": whole,
        "window": max(window_calls),
        "window_keys": max(window_keys),
        "slice": max(slice_calls),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="20k and 100k keys; figures not judged")
    parser.add_argument("--per-hour", type=int, default=1000, help="new keys an hour (default 1,000)")
    parser.add_argument("--runs", type=int, default=48, help="hourly runs measured (default 48)")
    args = parser.parse_args()
    sizes = (20_000, 100_000) if args.quick else (100_000, 1_000_000)
    judge = not args.quick

    found = {}
    for keys in sizes:
        found[keys] = measure(keys, args.per_hour, args.runs)
        f = found[keys]
        print(
            f"{keys:>9,} keys: whole prefix {f['whole']:,.0f} LIST calls; window {f['window']:,.0f} calls "
            f"({f['window_keys']:,.0f} keys); full-pass slice {f['slice']:,.0f} calls"
        )
    small, large = found[sizes[0]], found[sizes[-1]]
    bound = "LIST calls through S3BlobStore to a counting fake of ListObjectsV2 (1,000 keys a page)"
    figures = []
    for keys in sizes:
        label = f"{keys // 1000:,}k keys" if keys < 1_000_000 else f"{keys // 1_000_000}M keys"
        figures += [
            Figure(f"whole data prefix (before), {label}", found[keys]["whole"], "LIST calls/run", bound),
            Figure(f"window since the watermark, {label}", found[keys]["window"], "LIST calls/run", bound),
            Figure(f"keys the window listed, {label}", found[keys]["window_keys"], "keys/run", bound),
            Figure(f"full-pass slice, {label}", found[keys]["slice"], "LIST calls/run", bound),
        ]
    figures += [
        Figure.judged(
            f"window at {sizes[-1]:,} keys less at {sizes[0]:,}",
            large["window"] - small["window"], "LIST calls", bound_by=bound, at_most=1, judge=judge,
        ),
        Figure.judged(
            f"window / whole prefix at {sizes[-1]:,} keys",
            large["window"] / large["whole"], "x", bound_by=bound, at_most=0.1, judge=judge,
        ),
    ]  # fmt: skip
    ok = True
    for figure in figures[-2:]:
        print(f"{figure.verdict}: {figure.name} = {figure.value:,.3g} {figure.unit} (target {figure.target})")
        ok = ok and figure.verdict.value != "FAIL"
    record(__file__, figures)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
