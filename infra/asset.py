"""Build the Lambda asset offline, without Docker: our code plus its dependencies for the Lambda runtime.

``python -m infra.asset`` (or ``make lambda-asset``) fills ``build/lambda/asset/`` with

* the dependencies, installed by pip from manylinux wheels for the Lambda runtime's Python and
  architecture, pinned by ``requirements.lock`` (boto3 and its dependencies are left out: the runtime
  provides them), trimmed of what never runs in a Lambda (pyarrow's headers, Cython sources, tests,
  Arrow Flight);
* the ``statestore`` and ``lambdas`` packages, copied from the checkout;
* ``statestore-asset.json``: what was built, for what runtime, from which inputs, and how big it is.

The runtime is **Python 3.12 on x86_64**. Not 3.11: Lambda's ``python3.11`` runs on Amazon Linux 2
(glibc 2.26), and the pinned pyarrow ships only ``manylinux_2_28`` wheels (glibc >= 2.28), which would fail
to load there; ``python3.12`` runs on Amazon Linux 2023 (glibc 2.34).

A build is skipped when its inputs have not changed; the slow part (pip) is cached separately from the
code copy, so editing a handler rebuilds in a second or two.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ASSET_DIR = REPO_ROOT / "build" / "lambda" / "asset"
MANIFEST_NAME = "statestore-asset.json"

LAMBDA_PYTHON_VERSION = "3.12"
LAMBDA_ARCHITECTURE = "x86_64"
# Every glibc-compatible tag up to Amazon Linux 2023's glibc 2.34 that the pinned wheels use.
LAMBDA_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
# Lambda's limit on a function's unzipped code (layers included).
MAX_UNZIPPED_BYTES = 250 * 1024 * 1024

# What the handlers import beyond the standard library and boto3; versions come from requirements.lock.
BUNDLED_REQUIREMENTS = (
    "pyarrow",
    "numpy",
    "aws-lambda-powertools[tracer]",
    "psycopg[binary]",
    "psycopg-pool",
)
# Provided by the Lambda Python runtime; bundling them would shadow the runtime's own boto3 stack.
RUNTIME_PROVIDED = frozenset(
    {"boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "six", "urllib3"}
)
CODE_PACKAGES = ("statestore", "lambdas")

LOCK_FILE = REPO_ROOT / "requirements.lock"
_SONAME = re.compile(r"^(?P<stem>.+)\.so\.\d+$")
_PYARROW_UNUSED = (
    "include",  # C++ headers, for building extensions
    "src",
    "includes",  # Cython declarations
    "tests",
    "conftest.py",
    "_pyarrow_cpp_tests.*",
    # Arrow Flight (RPC): nothing imports pyarrow.flight; only _flight and libarrow_python_flight need it.
    "flight.py",
    "_flight.*",
    "libarrow_flight.so*",
    "libarrow_python_flight.so*",
    "*.pyx",
    "*.pxd",
    "*.pxi",
)


class AssetError(RuntimeError):
    """The asset could not be built or is not usable."""


def missing_asset_message(asset_dir: Path) -> str:
    return (
        f"The Lambda asset {asset_dir} has not been built (no {MANIFEST_NAME} in it). "
        "Run `make lambda-asset` (or `make synth`, which builds it first), "
        "or point the context key `lambda_asset` at a built asset folder."
    )


def require_asset(asset_dir: Path) -> dict[str, object]:
    """The manifest of a built asset; raises AssetError saying how to build it if there is none."""
    manifest = asset_dir / MANIFEST_NAME
    if not manifest.is_file():
        raise AssetError(missing_asset_message(asset_dir))
    data: dict[str, object] = json.loads(manifest.read_text())
    return data


def tree_size(root: Path) -> int:
    """Bytes of every file under ``root`` as they would be unzipped (symlinks followed, as CDK does)."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def hash_files(paths: Iterable[Path], digest: hashlib._Hash) -> None:
    for path in sorted(paths):
        digest.update(str(path.relative_to(REPO_ROOT)).encode())
        digest.update(path.read_bytes())


def _code_files() -> list[Path]:
    files: list[Path] = []
    for package in CODE_PACKAGES:
        files.extend(p for p in (REPO_ROOT / package).rglob("*") if p.is_file() and is_code_file(p))
    return files


def is_code_file(path: Path) -> bool:
    return "__pycache__" not in path.parts and path.suffix != ".pyc"


def dependencies_key() -> str:
    """Changes when the dependency install would come out different."""
    digest = hashlib.sha256()
    digest.update(
        json.dumps(
            [LAMBDA_PYTHON_VERSION, LAMBDA_PLATFORMS, BUNDLED_REQUIREMENTS, sorted(RUNTIME_PROVIDED)]
        ).encode()
    )
    hash_files([LOCK_FILE, Path(__file__).resolve()], digest)
    return digest.hexdigest()


def asset_key() -> str:
    """Changes when anything that goes into the asset changes."""
    digest = hashlib.sha256(dependencies_key().encode())
    hash_files(_code_files(), digest)
    return digest.hexdigest()


def install_wheels(
    target: Path, python_version: str, platforms: Iterable[str], requirements: Iterable[str]
) -> subprocess.CompletedProcess[str]:
    """pip-install ``requirements`` into ``target`` from binary wheels for another interpreter and platform
    (CPython ``python_version`` on ``platforms``), every file checked against the hashes in the lock file.
    The caller checks the result.

    pip's hash-checking mode needs every distribution it installs named, pinned and hashed, so it cannot
    take bare names with the lock as constraints. Two steps, then: resolve ``requirements`` for the target
    with the lock's pins (a dry run, which installs nothing), and install exactly that set, each with its
    hashes from the lock, ``--require-hashes --no-deps``. A distribution the target needs that the lock does
    not pin fails the build, naming it.
    """
    platform_args = [arg for platform in platforms for arg in ("--platform", platform)]
    common = [
        "--disable-pip-version-check",
        "--only-binary=:all:",
        "--implementation",
        "cp",
        "--python-version",
        python_version,
        *platform_args,
    ]
    with tempfile.TemporaryDirectory(prefix="statestore-lock-") as scratch:
        constraints, report = Path(scratch) / "constraints.txt", Path(scratch) / "report.json"
        constraints.write_text("".join(f"{pin}\n" for pin in locked_pins().values()))
        resolved = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
             "--report", str(report), "--target", str(target), *common,
             "--constraint", str(constraints), *requirements],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if resolved.returncode != 0:
            return resolved
        wanted = [
            (item["metadata"]["name"], item["metadata"]["version"])
            for item in json.loads(report.read_text())["install"]
        ]
        try:
            pinned = locked_requirements(wanted)
        except AssetError as e:
            return subprocess.CompletedProcess(resolved.args, 1, "", str(e))
        hashed = Path(scratch) / "requirements.txt"
        hashed.write_text(pinned)
        return subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--require-hashes",
             "--no-deps", "--target", str(target), *common, "--requirement", str(hashed)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip


def _lock_entries() -> dict[str, str]:
    """Each distribution of the lock file by normalised name: its whole entry (pin and hashes)."""
    entries: dict[str, list[str]] = {}
    name = ""
    for line in LOCK_FILE.read_text().splitlines():
        text = line.strip().removesuffix("\\").strip()
        if not text or text.startswith("#"):
            continue
        if not line[0].isspace():
            name = _normalise(text.split("==", 1)[0])
            entries[name] = [text]
        elif text.startswith("--hash=") and name:
            entries[name].append(text)
    return {name: " ".join(parts) for name, parts in entries.items()}


def locked_pins() -> dict[str, str]:
    """``name==version`` of each distribution the lock file pins, by normalised name (no hashes)."""
    return {name: entry.split()[0] for name, entry in _lock_entries().items()}


def locked_requirements(wanted: Iterable[tuple[str, str]]) -> str:
    """A requirements file of ``wanted`` (name, version) pairs with their hashes from the lock file; raises
    AssetError for one the lock does not pin at that version, or pins without hashes."""
    entries = _lock_entries()
    lines: list[str] = []
    for name, version in wanted:
        entry = entries.get(_normalise(name))
        if entry is None or entry.split()[0].split("==", 1)[1] != version:
            raise AssetError(
                f"{name} {version} is needed but requirements.lock does not pin it at that version: "
                "regenerate the lock (docs/security.md says how)"
            )
        if "--hash=" not in entry:
            raise AssetError(f"requirements.lock pins {name} without hashes: regenerate it with hashes")
        lines.append(entry)
    return "".join(f"{line}\n" for line in lines)


def _install_dependencies(target: Path) -> int:
    """Install into ``target``; return its size before trimming (without the runtime's boto3 stack)."""
    result = install_wheels(target, LAMBDA_PYTHON_VERSION, LAMBDA_PLATFORMS, BUNDLED_REQUIREMENTS)
    if result.returncode != 0:
        raise AssetError(
            "pip could not install the Lambda dependencies (it needs to reach PyPI):\n"
            + result.stderr.strip()
        )
    _remove_runtime_provided(target)
    shutil.rmtree(target / "bin", ignore_errors=True)
    untrimmed = tree_size(target)
    trim_pyarrow(target / "pyarrow")
    return untrimmed


def _normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _remove_runtime_provided(target: Path) -> None:
    """Uninstall, by their RECORD files, the distributions the Lambda runtime already has."""
    for dist_info in target.glob("*.dist-info"):
        name = next(
            (
                line.split(":", 1)[1].strip()
                for line in (dist_info / "METADATA").open()
                if line.startswith("Name:")
            ),
            "",
        )
        if _normalise(name) not in RUNTIME_PROVIDED:
            continue
        for line in (dist_info / "RECORD").read_text().splitlines():
            path = target / line.split(",", 1)[0]
            if path.is_file():
                path.unlink()
        shutil.rmtree(dist_info, ignore_errors=True)
    for directory in sorted((p for p in target.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(directory.iterdir()):
            directory.rmdir()


def trim_pyarrow(pyarrow_dir: Path) -> None:
    if not pyarrow_dir.is_dir():
        raise AssetError(f"pyarrow was not installed into {pyarrow_dir.parent}")
    for pattern in _PYARROW_UNUSED:
        for path in pyarrow_dir.glob(pattern):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    # The wheel carries three copies of each libarrow_python library; the loader wants only the soname one
    # (``.so.<major>``), the unversioned and full-version copies are for compiling extensions against.
    for soname in pyarrow_dir.glob("libarrow_python*.so.*"):
        if match := _SONAME.match(soname.name):
            for library in pyarrow_dir.glob(f"{match['stem']}.so*"):
                if library != soname:
                    library.unlink()


def _write_manifest(asset_dir: Path, key: str, deps_dir: Path) -> dict[str, object]:
    distributions = sorted(p.name.removesuffix(".dist-info") for p in asset_dir.glob("*.dist-info"))
    manifest: dict[str, object] = {
        "asset_key": key,
        "python_version": LAMBDA_PYTHON_VERSION,
        "architecture": LAMBDA_ARCHITECTURE,
        "platforms": list(LAMBDA_PLATFORMS),
        "distributions": distributions,
        "runtime_provided": sorted(RUNTIME_PROVIDED),
        "dependencies_bytes_untrimmed": _untrimmed_size(deps_dir),
        "dependencies_bytes": tree_size(deps_dir),
        "unzipped_bytes": 0,
    }
    (asset_dir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
    manifest["unzipped_bytes"] = tree_size(asset_dir)
    (asset_dir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _untrimmed_size(deps_dir: Path) -> int:
    marker = deps_dir / ".untrimmed-bytes"
    return int(marker.read_text()) if marker.is_file() else 0


def _build_dependencies(deps_dir: Path) -> None:
    key = dependencies_key()
    key_file = deps_dir / ".inputs"
    if key_file.is_file() and key_file.read_text() == key:
        return
    staging = staging_dir(deps_dir)
    untrimmed = _install_dependencies(staging)
    (staging / ".untrimmed-bytes").write_text(str(untrimmed))
    (staging / ".inputs").write_text(key)
    replace_dir(deps_dir, staging)


def staging_dir(final: Path) -> Path:
    """A fresh folder beside ``final``: a build never shows half-done, and two builds never share one."""
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would travel into the asset
    return staging


def replace_dir(final: Path, staging: Path) -> None:
    """Move ``staging`` to ``final``, dropping what was there."""
    old = final.with_name(f".{final.name}-old-{os.getpid()}")
    if final.exists():
        final.rename(old)
    staging.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def build_asset(asset_dir: Path = DEFAULT_ASSET_DIR, *, force: bool = False) -> dict[str, object]:
    """Build the asset in ``asset_dir`` (unless it is up to date) and return its manifest."""
    key = asset_key()
    if not force:
        try:
            manifest = require_asset(asset_dir)
        except AssetError:
            pass
        else:
            if manifest.get("asset_key") == key:
                return manifest
    deps_dir = asset_dir.parent / "dependencies"
    if force:
        shutil.rmtree(deps_dir, ignore_errors=True)
    _build_dependencies(deps_dir)
    staging = staging_dir(asset_dir)
    shutil.copytree(
        deps_dir, staging, ignore=shutil.ignore_patterns(".inputs", ".untrimmed-bytes"), dirs_exist_ok=True
    )
    for package in CODE_PACKAGES:
        shutil.copytree(
            REPO_ROOT / package, staging / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    manifest = _write_manifest(staging, key, deps_dir)
    if int(str(manifest["unzipped_bytes"])) > MAX_UNZIPPED_BYTES:
        raise AssetError(
            f"the Lambda asset is {manifest['unzipped_bytes']} bytes unzipped, over Lambda's limit of "
            f"{MAX_UNZIPPED_BYTES}; see what grew in {staging}"
        )
    replace_dir(asset_dir, staging)
    return manifest


def find_runtime_python() -> str | None:
    """A local interpreter of the Lambda runtime's Python version, or None.

    ``STATESTORE_LAMBDA_PYTHON`` wins; then ``python3.12`` on PATH; then a pyenv install.
    """
    name = f"python{LAMBDA_PYTHON_VERSION}"
    candidates = [os.environ.get("STATESTORE_LAMBDA_PYTHON", ""), shutil.which(name) or ""]
    pyenv_root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates.extend(
        sorted(glob.glob(f"{pyenv_root}/versions/{LAMBDA_PYTHON_VERSION}*/bin/{name}"), reverse=True)
    )
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == LAMBDA_PYTHON_VERSION:
            return candidate
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_ASSET_DIR, help="asset folder (default: %(default)s)"
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if the inputs have not changed")
    args = parser.parse_args(argv)
    try:
        manifest = build_asset(args.out.resolve(), force=args.force)
    except AssetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    size_mb = int(str(manifest["unzipped_bytes"])) / 1024 / 1024
    print(
        f"Lambda asset {args.out}: Python {manifest['python_version']} {manifest['architecture']}, "
        f"{size_mb:.1f} MiB unzipped (limit {MAX_UNZIPPED_BYTES // 1024 // 1024} MiB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
