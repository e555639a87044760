"""The launcher that keeps DynamoDB Local on this machine and tied to its owner, compiled once per jar.

``LocalOnlyDynamoDBLocal.java`` (beside this module) starts DynamoDB Local's server as the jar's own main
class does, but bound to one host (127.0.0.1), refusing requests whose ``Host`` or ``Origin`` is not of this
machine, and exiting when its standard input closes (see the Java file). It is compiled with the JDK's
``javac`` against the very jar it will run, into the user cache, keyed by the source and the jar; later
starts reuse the classes.

Without a JDK (a JRE has ``java`` but no ``javac``) or when the compilation fails, :func:`compile_launcher`
raises :class:`LauncherUnavailable` with the reason, and the caller starts the jar as it is (on every
interface), saying so.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

LAUNCHER_CLASS = "LocalOnlyDynamoDBLocal"
SOURCE = Path(__file__).with_name(f"{LAUNCHER_CLASS}.java")


class LauncherUnavailable(Exception):
    """The launcher cannot be built here; the message says why and what to install."""


def find_javac(java: str) -> str | None:
    """The ``javac`` of the JDK that ``java`` belongs to, else the one on PATH, else None."""
    beside = Path(os.path.realpath(java)).with_name("javac")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("javac")


def compile_launcher(java: str, jar: Path, cache: Path) -> Path:
    """The directory holding the launcher's classes compiled against ``jar`` (compiling them into
    ``cache/launcher/<key>`` the first time). Raises LauncherUnavailable."""
    javac = find_javac(java)
    if javac is None:
        raise LauncherUnavailable(
            "no `javac` was found (a Java runtime without the JDK): install a JDK 17, e.g. "
            "`apt-get install openjdk-17-jdk-headless`"
        )
    stat = jar.stat()
    key = hashlib.sha256(
        SOURCE.read_bytes() + f"\0{jar.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()
    ).hexdigest()[:20]
    classes = cache / "launcher" / key
    if (classes / f"{LAUNCHER_CLASS}.class").is_file():
        return classes
    try:
        classes.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".compile-", dir=classes.parent))
    except OSError as e:
        raise LauncherUnavailable(
            f"cannot write its classes to {classes.parent} ({e.strerror or e}): set XDG_CACHE_HOME to a "
            "writable directory"
        ) from e
    try:
        classpath = os.pathsep.join([str(jar), str(jar.parent / "DynamoDBLocal_lib" / "*")])
        result = subprocess.run(
            [javac, "--release", "17", "-cp", classpath, "-d", str(staging), str(SOURCE)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise LauncherUnavailable(
                f"{javac} could not compile {SOURCE.name} against {jar}: "
                f"{(result.stderr or result.stdout).strip()[-1500:]}"
            )
        try:
            os.replace(staging, classes)
        except OSError:
            if not (classes / f"{LAUNCHER_CLASS}.class").is_file():  # not a concurrent compile's result
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return classes
