"""Compiling DynamoDB Local's launcher: once per jar into the cache, or a reason the caller can print."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from statestore.local import java_launcher
from statestore.local.dynamodb_package import locate_jar
from statestore.local.java_launcher import LAUNCHER_CLASS, LauncherUnavailable, compile_launcher

pytestmark = pytest.mark.dynamodb_local


@pytest.fixture(scope="module")
def jar() -> Path:
    return locate_jar()


def java() -> str:
    found = shutil.which("java")
    assert found is not None, "these tests need Java 17 on PATH"
    return found


def test_the_launcher_compiles_against_the_jar_into_the_cache_and_is_reused(
    jar: Path, tmp_path: Path
) -> None:
    classes = compile_launcher(java(), jar, tmp_path)

    assert classes.parent == tmp_path / "launcher" and (classes / f"{LAUNCHER_CLASS}.class").is_file()
    compiled = (classes / f"{LAUNCHER_CLASS}.class").stat().st_mtime_ns
    assert compile_launcher(java(), jar, tmp_path) == classes
    assert (classes / f"{LAUNCHER_CLASS}.class").stat().st_mtime_ns == compiled


def test_without_javac_the_reason_says_to_install_a_jdk(
    jar: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(java_launcher, "find_javac", lambda java: None)

    with pytest.raises(LauncherUnavailable, match="no `javac` was found .*install a JDK 17"):
        compile_launcher(java(), jar, tmp_path)


def test_a_cache_that_cannot_be_written_is_a_reason_not_a_crash(jar: Path, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")

    with pytest.raises(LauncherUnavailable, match="cannot write its classes .*XDG_CACHE_HOME"):
        compile_launcher(java(), jar, tmp_path / "a-file")
