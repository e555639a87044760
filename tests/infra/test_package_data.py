"""The RDS certificate bundle travels with the code: in the Spark code archive (read from the zip, as
executors and the driver import it) and in the Lambda asset (a copy of the package)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

from infra.spark_package import write_code_archive
from statestore.adapters.postgres.tls import BUNDLE_NAME

BUNDLE = Path(__file__).resolve().parents[2] / "statestore" / "adapters" / "postgres" / BUNDLE_NAME


def test_the_spark_code_archive_carries_the_bundle_and_the_client_reads_it_from_the_zip(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "code.zip"
    write_code_archive(archive)
    with zipfile.ZipFile(archive) as z:
        assert z.read(f"statestore/adapters/postgres/{BUNDLE_NAME}") == BUNDLE.read_bytes()

    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import statestore.adapters.postgres.tls as tls; "
        "import hashlib, pathlib; print(tls.__file__); "
        "print(hashlib.sha256(pathlib.Path(tls.bundled_ca_file()).read_bytes()).hexdigest())"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, str(archive)], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    module_file, digest = result.stdout.split()
    assert module_file.startswith(str(archive)), "imported from the checkout, not the archive"
    assert digest == hashlib.sha256(BUNDLE.read_bytes()).hexdigest()
