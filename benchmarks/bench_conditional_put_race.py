"""Writers racing for the same transaction number: how often does more than one win?

Each round, ``--writers`` threads (each with its own clients, released together by a barrier) append entry
N of one table through the real adapter, ``DynamoDBTransactionLog.append`` (a conditional PutItem with
``attribute_not_exists``). DynamoDB guarantees exactly one winner per round. The same race runs against the
plain moto server (the old embedded default) and against DynamoDB Local (the embedded default now).

A violation is a round with more than one winner: two writers were both told they own transaction N, and
the log keeps only one of their entries, so the other commit silently vanished.

    python benchmarks/bench_conditional_put_race.py [--writers 8] [--rounds 500] [--only moto|dynamodb_local]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from statestore.adapters.aws.backend import AwsBackend
from statestore.errors import TransactionNumberTakenError
from statestore.instance import ResourceNames
from statestore.local.dynamodb_local import DynamoDBLocal
from statestore.local.moto_server import MotoServer
from statestore.store.ports import LogEntry


@dataclass
class RaceResult:
    rounds: int
    winners_per_round: list[int]  # how many writers were told they won, per round
    entries_kept: int  # entries in the log afterwards
    lost_wins: int  # wins whose entry is not the one the log holds (commits that vanished)
    errors: list[str]
    seconds: float

    @property
    def violations(self) -> int:
        return sum(1 for w in self.winners_per_round if w != 1)


def race(
    resources: ResourceNames,
    endpoint_url: str,
    dynamodb_endpoint_url: str,
    *,
    writers: int = 8,
    rounds: int = 500,
) -> RaceResult:
    """Race ``writers`` threads for each of ``rounds`` transaction numbers of a new table id."""
    table_id = uuid.uuid4().hex
    backends = [
        AwsBackend.connect(resources, endpoint_url, dynamodb_endpoint_url=dynamodb_endpoint_url)
        for _ in range(writers)
    ]
    barrier = threading.Barrier(writers)
    won: list[list[int]] = [[] for _ in range(writers)]  # round numbers each writer won
    errors: list[str] = []

    def write(writer: int) -> None:
        log = backends[writer].log
        for number in range(1, rounds + 1):
            entry = LogEntry(number, int(time.time() * 1000), "AddFiles", f"writer-{writer}".encode())
            barrier.wait()
            try:
                log.append(table_id, entry)
                won[writer].append(number)
            except TransactionNumberTakenError:
                pass
            except Exception as e:  # reported, not raised: the other writers must not hang at the barrier
                errors.append(f"writer {writer}, round {number}: {e}")

    started = time.perf_counter()
    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started

    winners = Counter(number for numbers in won for number in numbers)
    kept = {e.transaction_number: e.body.decode() for e in backends[0].log.read(table_id, 1)}
    lost = sum(1 for writer, numbers in enumerate(won) for n in numbers if kept.get(n) != f"writer-{writer}")
    return RaceResult(
        rounds, [winners.get(n, 0) for n in range(1, rounds + 1)], len(kept), lost, errors, seconds
    )


@contextlib.contextmanager
def _endpoints(kind: str) -> Iterator[tuple[str, str]]:
    with contextlib.ExitStack() as stack:
        moto = MotoServer.start()
        stack.callback(moto.stop)
        if kind == "moto":
            yield moto.endpoint_url, moto.endpoint_url
        else:
            ddb = stack.enter_context(DynamoDBLocal.start())
            yield moto.endpoint_url, ddb.endpoint_url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--only", choices=["moto", "dynamodb_local"])
    args = parser.parse_args()
    for name, value in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}.items():
        os.environ.setdefault(name, value)
    os.environ.setdefault("AWS_DEFAULT_REGION", "eu-west-2")

    from results import Figure, record  # beside this script

    figures: list[Figure] = []
    print(f"{args.writers} writers race for each of {args.rounds} transaction numbers (one table)")
    print(
        f"{'endpoint':<16}{'rounds':>8}{'violations':>12}{'winners per round (rounds)':>32}"
        f"{'lost commits':>14}{'errors':>8}{'seconds':>9}"
    )
    for kind in ("moto", "dynamodb_local"):
        if args.only and kind != args.only:
            continue
        with _endpoints(kind) as (endpoint, dynamodb_endpoint):
            resources = ResourceNames.for_instance(f"race{uuid.uuid4().hex[:8]}")
            AwsBackend.connect(resources, endpoint, dynamodb_endpoint_url=dynamodb_endpoint).provision()
            result = race(resources, endpoint, dynamodb_endpoint, writers=args.writers, rounds=args.rounds)
        spread = ", ".join(f"{w}: {c}" for w, c in sorted(Counter(result.winners_per_round).items()))
        print(
            f"{kind:<16}{result.rounds:>8}{result.violations:>12}{spread:>32}"
            f"{result.lost_wins:>14}{len(result.errors):>8}{result.seconds:>9.1f}"
        )
        for error in result.errors[:3]:
            print(f"    {error}")
        # DynamoDB Local must give one winner per round: the embedded default depends on it. moto may not,
        # and no run of it is judged (its race is rare and load-dependent).
        figures.append(
            Figure.judged(
                f"{kind}: rounds with more than one winner, of {result.rounds}",
                result.violations,
                "",
                bound_by="the emulator's conditional writes (atomic or not)",
                at_most=0,
                judge=kind == "dynamodb_local",
            )
        )
    record(__file__, figures)


if __name__ == "__main__":
    main()
