"""Long work says how far it got — files, rows, seconds — on the jobs' command line (unless ``--quiet``)
and wherever a program asks for it with ``show_progress``; as a library it stays quiet."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from spark_client.compaction import compact
from spark_client.ingest import ingest
from spark_client.jobs import EXIT_OK, main
from spark_client.progress import hide_progress, show_progress
from spark_client.splitting import split_partitions
from statestore.local.runtime import LocalRuntime
from tests.fixtures.aws_servers import dynamodb_local, moto_server  # noqa: F401  (session fixtures)
from tests.spark.conftest import KEY_SCHEMA, MakeTable, dataframe, key_rows
from tests.spark.embedded import embedded, user_shell  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.spark]

# "<what>: wrote 4 file(s), 2,000 rows in 1.3 s": numbers a user reads as files, rows and seconds.
FILES_ROWS_SECONDS = r"(\d+) file\(s\)(?: into (\d+))?, ([\d,]+) rows in [\d.]+ s"


@pytest.fixture(autouse=True)
def quiet_after() -> Iterator[None]:
    yield
    hide_progress()


def run_the_three(spark: SparkSession, make_table: MakeTable) -> None:
    table = make_table(KEY_SCHEMA, [5_000])
    for seed in (800, 801):
        ingest(
            dataframe(spark, KEY_SCHEMA, key_rows(1_000, seed=seed)),
            table.store(),
            table.data,
            table.committer,
        )
    split_partitions(spark, table.store(), table.data, table.committer, max_rows=600)
    compact(spark, table.store(), table.data, table.committer)


def test_the_library_prints_nothing_unless_asked(
    spark: SparkSession, make_table: MakeTable, capsys: pytest.CaptureFixture[str]
) -> None:
    run_the_three(spark, make_table)
    assert capsys.readouterr().err == ""


def test_show_progress_prints_files_rows_and_seconds_of_ingest_splitting_and_compaction(
    spark: SparkSession, make_table: MakeTable, capsys: pytest.CaptureFixture[str]
) -> None:
    show_progress()
    run_the_three(spark, make_table)
    err = capsys.readouterr().err

    wrote = re.findall(r"ingest into table '[^']+': wrote " + FILES_ROWS_SECONDS, err)
    assert [rows for _, _, rows in wrote] == ["1,000", "1,000"]
    assert len(re.findall(r"ingest into table '[^']+': committed at transaction \d+ in [\d.]+ s", err)) == 2
    assert re.search(r"splitting of table '[^']+': sampling the keys of 2 leaf/leaves over 600 rows", err)
    assert re.search(r"splitting of table '[^']+': split 2 of 2 leaf/leaves in [\d.]+ s", err)
    merged = re.search(r"compaction of table '[^']+': merged " + FILES_ROWS_SECONDS, err)
    assert merged is not None and merged.group(3) == "2,000"
    assert re.search(r"compaction of table '[^']+': committed \d+ job\(s\), 0 lost, 0 pending", err)


@pytest.mark.e2e
@pytest.mark.dynamodb_local
def test_the_jobs_command_line_prints_progress_on_stderr_and_only_the_result_on_stdout(
    spark: SparkSession,
    embedded: LocalRuntime,  # noqa: F811
    user_shell: dict[str, str],  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    embedded.client().create_table("events", KEY_SCHEMA, [5_000])
    columns = list(zip(*key_rows(2_000, seed=802), strict=True))
    (tmp_path / "in").mkdir()
    pq.write_table(
        pa.table({"key": columns[0], "ts": columns[1], "value": columns[2]}), tmp_path / "in" / "a.parquet"
    )
    capsys.readouterr()

    assert main(["ingest", "--table", "events", "--input", str(tmp_path / "in")], spark) == EXIT_OK
    out, err = capsys.readouterr()
    assert out.count("\n") == 1 and '"rows": 2000' in out  # stdout: the one JSON line
    assert re.search(r"ingest into table '[^']+': wrote \d+ file\(s\), 2,000 rows in [\d.]+ s", err)
    assert re.search(r"committed at transaction 2 in [\d.]+ s", err)

    assert main(["split", "--table", "events", "--max-rows", "500", "--quiet"], spark) == EXIT_OK
    out, err = capsys.readouterr()
    assert err == "" and '"split": [' in out
    assert main(["compact", "--table", "events"], spark) == EXIT_OK
    assert "compaction of table" in capsys.readouterr().err
