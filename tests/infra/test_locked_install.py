"""The Lambda asset and the Spark package install their dependencies only as requirements.lock pins them,
every file checked against the lock's hashes (needs PyPI, as the asset build does)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infra import asset
from infra.asset import AssetError, install_wheels, locked_requirements

PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64")


def test_every_distribution_of_the_lock_is_pinned_with_hashes() -> None:
    entries = asset._lock_entries()
    assert len(entries) > 50
    for name, entry in entries.items():
        assert re.match(r"^[A-Za-z0-9._-]+==\S+ --hash=sha256:[0-9a-f]{64}", entry), (name, entry)


def test_a_distribution_the_lock_does_not_pin_fails_the_build_naming_it() -> None:
    with pytest.raises(AssetError, match="left-pad 1.0 .*requirements.lock"):
        locked_requirements([("six", "1.17.0"), ("left-pad", "1.0")])
    with pytest.raises(AssetError, match="six 1.16.0"):
        locked_requirements([("six", "1.16.0")])  # pinned, at another version


def test_a_wheel_whose_hash_the_lock_does_not_hold_is_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The install really checks: with six's hashes in the lock replaced, pip refuses its files."""
    lock = asset.LOCK_FILE.read_text()
    six = re.search(r"^six==1\.17\.0 \\\n(?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+", lock, re.MULTILINE)
    assert six is not None
    forged = re.sub(r"[0-9a-f]{64}", "0" * 64, six[0])
    tampered = tmp_path / "requirements.lock"
    tampered.write_text(lock.replace(six[0], forged))
    monkeypatch.setattr(asset, "LOCK_FILE", tampered)
    target = tmp_path / "target"

    result = install_wheels(target, "3.12", PLATFORMS, ["six"])

    assert result.returncode != 0
    assert "hash" in result.stderr.lower() and "six" in result.stderr
    assert not list(target.glob("six*"))


def test_the_locked_install_installs_the_closure_of_what_is_asked(tmp_path: Path) -> None:
    target = tmp_path / "target"

    result = install_wheels(target, "3.12", PLATFORMS, ["python-dateutil"])

    assert result.returncode == 0, result.stderr
    assert {p.name.split("-")[0] for p in target.glob("*.dist-info")} == {"python_dateutil", "six"}
