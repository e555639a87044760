"""How the DynamoDB log reads an entry's attributes from its item (``statestore.adapters.aws.log_items``)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from statestore.adapters.aws import log_items
from statestore.store.memory import InMemoryBlobStore


def item(**extra: Any) -> dict[str, Any]:
    return {
        log_items.TABLE_ID: {"S": "t1"},
        log_items.NUMBER: {"N": "5"},
        log_items.UPDATE_TIME: {"N": "1700000000000"},
        log_items.TYPE: {"S": "AddFiles"},
        log_items.BODY: {"S": "{}"},
        **extra,
    }


@pytest.mark.parametrize(
    "value",
    [
        {"L": [{"N": "-1"}, {"N": "0"}]},  # a negative count
        {"L": [{"N": "3"}]},  # one count
        {"L": [{"N": "3"}, {"N": "1"}, {"N": "1"}]},  # three
        {"L": [{"S": "3"}, {"N": "1"}]},  # not a number
        {"L": [{"N": "1.5"}, {"N": "1"}]},
        {"N": "3"},  # not a list
    ],
)
def test_an_entry_whose_counts_were_not_written_by_the_log_reads_as_having_none_and_says_so(
    value: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """The counts only say how much room to make before the body is decoded (the reader makes room from the
    decoded transaction as well): an unreadable value does not stop the table, but is not passed over
    unsaid either."""
    with caplog.at_level(logging.WARNING, logger="statestore.dynamodb_log"):
        entry = log_items.entry_of(InMemoryBlobStore(), "t1", item(**{log_items.MOST_ADDED: value}))

    assert entry.most_added is None
    assert entry.transaction_number == 5
    assert "transaction 5 has an unreadable 'most_added'" in caplog.text


def test_an_entry_reads_its_counts() -> None:
    value = log_items.most_added_value((12, 3))
    assert log_items.entry_of(InMemoryBlobStore(), "t1", item(most_added=value)).most_added == (12, 3)
    assert log_items.entry_of(InMemoryBlobStore(), "t1", item()).most_added is None
