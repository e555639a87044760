"""The search of pending adds' texts for the names a query asks about: it finds every entry that adds
something named so, in the entries' order, and the same entries a search of each entry alone finds."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from statestore.model.files import FileReference
from statestore.transactions import AddFiles
from statestore.views.pending_adds import PendingAdd, PendingTexts

# Names JSON writes as they are, names it escapes (quote, backslash, non-ASCII), and prefixes of each other.
NAMES = ["p1", "p10", 'p1"0', "a\\b", "é", "p", "f-1.parquet"]


def pending(number: int, refs: list[tuple[str, str]], *, with_text: bool) -> PendingAdd:
    add = AddFiles(tuple(FileReference(f, p, 1) for f, p in refs))
    text = json.dumps({"refs": [[f, p] for f, p in refs]}).encode("ascii") if with_text else None
    return PendingAdd(number, text, lambda: add)


entries = st.lists(
    st.tuples(
        st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(NAMES)), max_size=4),
        st.booleans(),
    ),
    max_size=12,
)


@given(entries, st.sampled_from(NAMES))
def test_the_joined_search_finds_every_entry_naming_the_name_and_only_those_a_per_entry_search_finds(
    drawn: list[tuple[list[tuple[str, str]], bool]], name: str
) -> None:
    added = [pending(i, refs, with_text=text) for i, (refs, text) in enumerate(drawn)]

    found = PendingTexts(added).naming(name)

    assert found == [p for p in added if p.may_name(name)]
    naming = [p for p in added if any(name in (r.filename, r.partition_id) for r in p.transaction.references)]
    assert set(map(id, naming)) <= set(map(id, found))


def test_an_entry_without_text_and_a_name_json_escapes_are_always_read() -> None:
    with_text = pending(1, [("f", "p1")], with_text=True)
    without = pending(2, [("g", "p2")], with_text=False)
    texts = PendingTexts([with_text, without])

    assert texts.naming("p1") == [with_text, without]
    assert texts.naming("p3") == [without]
    assert texts.naming("é") == [with_text, without]  # escaped in JSON: never searched for
