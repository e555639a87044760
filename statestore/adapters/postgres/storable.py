"""What the PostgreSQL store can hold, checked before anything is queried.

Every text value a commit reads or writes goes into a ``text`` column and an index key, and every number
into a ``bigint``. PostgreSQL refuses text with a NUL character, psycopg cannot encode a lone surrogate as
UTF-8, and a B-tree index refuses an entry larger than about a third of a page (2,704 bytes in version 4).
A request carrying such a value is invalid input, whatever the transactions' own rules say about it: the
store rejects that member of a commit, with a reason naming the value, before it takes a connection, and
commits the others. Left to the server, the same value failed the whole group as "unavailable" and the
committer retried it until the message went to the dead-letter queue.

The longest text accepted is :data:`MAX_TEXT_BYTES` of UTF-8 per value: the widest index entry
(``file_references``' key: table id, filename, partition id) then stays under the B-tree's limit with room
for its headers, whatever the text compresses to.
"""

from __future__ import annotations

import dataclasses

from statestore.errors import InvalidTransactionError, UnstorableValueError
from statestore.model.files import FileReference
from statestore.model.schema import INT64_MAX, INT64_MIN
from statestore.transactions.base import Transaction

MAX_TEXT_BYTES = 1_024
# A value is quoted in a reason up to this many characters.
_QUOTED = 60


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as an indexed ``text`` value, or None if it can."""
    if "\x00" in value:
        return "holds a NUL character, which PostgreSQL text cannot"
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return "holds a lone surrogate, which cannot be encoded as UTF-8"
    if size > MAX_TEXT_BYTES:
        return f"is {size} bytes of UTF-8, over the {MAX_TEXT_BYTES} a name may have in the file store"
    return None


def number_problem(value: int) -> str | None:
    """Why ``value`` cannot be stored as a ``bigint``, or None if it can."""
    if INT64_MIN <= value <= INT64_MAX:
        return None
    return "is outside the range of a 64-bit integer"


def check_text(what: str, value: str) -> None:
    """Raise UnstorableValueError, naming ``what``, unless ``value`` can be stored and indexed."""
    problem = text_problem(value)
    if problem is not None:
        raise UnstorableValueError(f"{what} {_quoted(value)} {problem}")


def transaction_problem(
    transaction: Transaction, request_id: str | None = None
) -> InvalidTransactionError | None:
    """The error to reject a commit member with if its transaction or request id holds a value the store
    cannot hold, or None. Every string and integer inside the transaction is checked, whichever field it is
    in: each is a name, a count or a time the store writes or looks up. A clean transaction is checked in a
    few passes in C (an AddFiles of 100,000 references must not pay a Python call per value); only a
    failing one is searched value by value, to name the culprit."""
    texts: list[str] = [] if request_id is None else [request_id]
    numbers: list[int] = []
    _collect(transaction, texts, numbers)
    joined = "".join(texts)
    clean = (
        "\x00" not in joined
        and (joined.isascii() or _encodes(joined))
        and (not texts or max(map(len, texts)) * 4 <= MAX_TEXT_BYTES or _all_short(texts))
        and (not numbers or (INT64_MIN <= min(numbers) and max(numbers) <= INT64_MAX))
    )
    if clean:
        return None
    if request_id is not None and (problem := text_problem(request_id)) is not None:
        return InvalidTransactionError(f"{transaction.TYPE}: request id {_quoted(request_id)} {problem}")
    for value in texts:
        if (problem := text_problem(value)) is not None:
            return InvalidTransactionError(
                f"{transaction.TYPE}: {_quoted(value)} {problem}; the file store cannot hold it"
            )
    for number in numbers:
        if (problem := number_problem(number)) is not None:
            return InvalidTransactionError(
                f"{transaction.TYPE}: {number} {problem}; the file store cannot hold it"
            )
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _all_short(texts: list[str]) -> bool:
    return all(len(text.encode("utf-8", "surrogatepass")) <= MAX_TEXT_BYTES for text in texts)


def _collect(value: object, texts: list[str], numbers: list[int]) -> None:
    """Every string and integer inside ``value`` (dataclasses, tuples, lists, sets and dicts)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, bool) or item is None or isinstance(item, float):
            continue
        elif isinstance(item, int):
            numbers.append(item)
        elif isinstance(item, tuple | list) and item and set(map(type, item)) == {FileReference}:
            # A transaction's references, column by column (an AddFiles may hold 100,000 of them); a column
            # of unexpected types is left to the value-by-value walk.
            names, partition_ids, rows, _, _, job_ids, times = zip(*item, strict=True)
            for column, kinds, into in (
                (names, {str}, texts),
                (partition_ids, {str}, texts),
                (rows, {int}, numbers),
                (times, {int}, numbers),
            ):
                if set(map(type, column)) <= kinds:
                    into.extend(column)
                else:
                    pending.extend(column)
            pending.extend(filter(None, job_ids))
        elif isinstance(item, tuple | list | frozenset | set):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            pending.extend(getattr(item, field.name) for field in dataclasses.fields(item))


def _quoted(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _QUOTED else f"{text[:_QUOTED]}...' ({len(str(value))} characters)"
