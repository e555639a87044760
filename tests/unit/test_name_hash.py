"""The name hash: one ``str`` hashed in Python and a whole Arrow column hashed in NumPy agree, on every
layout a column can have (same-length names laid out in a row, names of mixed lengths, slices, gaps)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import uuid

import pyarrow as pa
import pytest

from statestore.state.name_hash import hash_string, hash_strings

ALPHABET = "ab/=.-_0123456789é€𝄞\x00"  # 1- to 4-byte characters: strings of mixed byte lengths


def random_strings(rng: random.Random, count: int, lengths: range) -> list[str]:
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.choice(lengths))) for _ in range(count)]


def one_by_one(values: list[str]) -> list[int]:
    return [hash_string(value) for value in values]


@pytest.mark.parametrize("arrow_type", [pa.string(), pa.large_string()])
@pytest.mark.parametrize(
    "lengths",
    [range(1), range(7, 8), range(8, 9), range(13, 14), range(44, 45), range(40), range(60, 90)],
    ids=["empty", "7", "8", "13", "44", "mixed-short", "mixed-long"],
)
def test_a_column_hashes_as_its_strings_do_one_by_one(arrow_type: pa.DataType, lengths: range) -> None:
    values = random_strings(random.Random(len(lengths) * 31 + lengths.start), 3_000, lengths)
    column = pa.array(values, arrow_type)

    assert hash_strings(column).tolist() == one_by_one(values)
    # A slice starts inside the buffers; its last string may end before the buffer does, or exactly at it.
    assert hash_strings(column.slice(17, 2_000)).tolist() == one_by_one(values[17:2_017])
    assert hash_strings(column.slice(2_990)).tolist() == one_by_one(values[2_990:])


@pytest.mark.parametrize("length", [1, 7, 8, 13, 16, 44])
def test_a_column_of_same_length_names_read_in_place_hashes_as_they_do_one_by_one(length: int) -> None:
    rng = random.Random(length)
    values = ["".join(rng.choice("0123456789abcdef-/.") for _ in range(length)) for _ in range(2_000)]
    column = pa.array(values, pa.large_string())

    assert hash_strings(column).tolist() == one_by_one(values)
    assert hash_strings(column.slice(5, 1_000)).tolist() == one_by_one(values[5:1_005])
    assert hash_strings(column.slice(1_999)).tolist() == one_by_one(
        values[1_999:]
    )  # ends at the buffer's end


def test_a_column_of_names_of_a_few_lengths_hashes_as_they_do_one_by_one() -> None:
    """Directories of partitions whose ids differ in length by a digit or two."""
    values = [f"tables/t/data/partition={i}/" for i in range(0, 200_000, 37)]
    column = pa.array(values)

    assert hash_strings(column).tolist() == one_by_one(values)
    assert hash_strings(column.slice(100, 3_000)).tolist() == one_by_one(values[100:3_100])


def test_strings_taken_out_of_order_hash_as_they_do_one_by_one() -> None:
    values = [f"{i:013d}" for i in range(500)] + ["short", "a much longer name than the rest"]
    order = list(range(len(values) - 1, -1, -3))
    taken = pa.array(values).take(pa.array(order))
    assert hash_strings(taken).tolist() == one_by_one([values[i] for i in order])


def test_a_column_of_no_strings_hashes_to_nothing() -> None:
    assert hash_strings(pa.array([], pa.string())).tolist() == []


def test_a_hundred_thousand_names_get_distinct_hashes() -> None:
    rng = random.Random(3)
    names = [str(uuid.UUID(int=rng.getrandbits(128))) + ".parquet" for _ in range(100_000)]
    assert len(set(hash_strings(pa.array(names)).tolist())) == len(names)


def test_the_hash_is_the_same_in_every_process_unlike_pythons_own() -> None:
    """Python's ``hash`` of a str changes with PYTHONHASHSEED; this one must not (it may be stored)."""
    program = (
        "from statestore.state.name_hash import hash_string; print(hash_string('tables/t/data/p1/f.parquet'))"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", program],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert seen == {str(hash_string("tables/t/data/p1/f.parquet"))}
