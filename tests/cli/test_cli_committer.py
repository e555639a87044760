"""``statestore committer pause|resume|status`` against the embedded local runtime: a paused committer
leaves requests on the queue, and commits them once resumed."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from statestore.cli import EXIT_OK
from statestore.local.event_sources import PAUSED_CHECK_SECONDS
from statestore.store.ports import CommitOutcome
from statestore.transactions import AddFiles
from tests.builders import INT_SCHEMA, data_key, ref
from tests.cli.conftest import Cli
from tests.cli.test_cli_ops import ours


@pytest.fixture
def paused_then_resumed(cli: Cli) -> Iterator[Cli]:
    yield cli
    cli("committer", "resume")  # leave the module's runtime running for the other tests


def test_a_paused_committer_leaves_requests_on_the_queue_until_resumed(paused_then_resumed: Cli) -> None:
    cli, rt = paused_then_resumed, paused_then_resumed.runtime
    client = rt.client()
    table = client.create_table("paused", INT_SCHEMA).table_id
    running = cli("committer", "status", "--json")
    assert running.code == EXIT_OK
    assert ours(running.out)["paused"] is False and ours(running.out)["queue"]["waiting"] == 0

    paused = cli("committer", "pause", "--json")
    assert paused.code == EXIT_OK and ours(paused.out)["paused"] is True
    # A receive the poller started before the pause may still take a message: let it end.
    time.sleep(rt.poll_wait_seconds + PAUSED_CHECK_SECONDS)
    request_id = rt.sender().send(table, AddFiles((ref(data_key(table, "while-paused")),)))
    time.sleep(2 * PAUSED_CHECK_SECONDS)

    status = cli("committer", "status")
    assert status.code == EXIT_OK
    assert "paused" in status.out and "1 request waiting" in status.out
    assert rt.sender().status(table, request_id) is None  # not committed: still waiting
    # Nothing leaves a paused committer's queue: waiting for it to drain gives up after the timeout.
    with pytest.raises(TimeoutError, match=r"still holds 1 message\(s\): none has left it for 1s"):
        rt.wait_idle(timeout=1)

    resumed = cli("committer", "resume", "--json")
    assert resumed.code == EXIT_OK and ours(resumed.out)["paused"] is False
    rt.wait_idle(timeout=30)
    outcome = rt.sender().status(table, request_id)
    assert outcome is not None and outcome.outcome is CommitOutcome.COMMITTED
