"""The embedded default's endpoints serve this machine only, and its data directory is its user's alone.

- From a non-loopback address of this machine, neither port accepts a connection (DynamoDB Local used to
  listen on every interface and take any signature).
- A request carrying a foreign ``Origin`` (a web page of another site, in this machine's browser) or a
  ``Host`` that is not this machine (a DNS name rebound to 127.0.0.1) is refused with 403 and gets no
  ``Access-Control-Allow-Origin`` (moto used to echo any origin); the clients' own requests, and a page
  served from localhost, are not refused.
- ``--data-dir`` is created 0700, every file in it is 0600 and every directory 0700 (an existing directory
  is narrowed: ``tests/local/test_data_dir.py``).
- Where DynamoDB Local cannot be bound to loopback (no JDK to compile its launcher), startup warns naming
  the exposure, and DynamoDB Local still ends with the process that started it.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from statestore.adapters.aws.clients import make_client
from statestore.local.runtime import LocalRuntime
from tests.e2e.runtime_process import descendants, wait_until_gone
from tests.e2e.test_local_runtime import add_file, new_table

pytestmark = [pytest.mark.e2e, pytest.mark.dynamodb_local]


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    data_dir = tmp_path_factory.mktemp("endpoints") / "data"
    with LocalRuntime.start(
        "endpoints", port=0, data_dir=data_dir, snapshot_interval=None, cleanup_interval=None
    ) as rt:
        yield rt


def machine_addresses() -> list[str]:
    """This machine's IPv4 addresses that are not loopback, plus 127.0.0.2: a loopback address other than
    the one bound, which a server listening on every interface answers on and one bound to 127.0.0.1 not."""
    found = set()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
            found.add(probe.getsockname()[0])
        except OSError:
            pass
    try:
        output = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
        found.update(line.split()[3].split("/")[0] for line in output.splitlines() if " inet " in line)
    except OSError:
        pass
    return sorted(a for a in found if not a.startswith("127.")) + ["127.0.0.2"]


def request(
    url: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10)
    try:
        connection.putrequest(method, "/", skip_host=True)
        for name, value in {"Host": parts.netloc, **(headers or {})}.items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def test_neither_port_accepts_connections_from_another_address_of_this_machine(runtime: LocalRuntime) -> None:
    addresses = machine_addresses()
    for url in (runtime.endpoint_url, runtime.dynamodb_endpoint_url):
        port = urlsplit(url).port
        assert port is not None
        assert socket.create_connection(("127.0.0.1", port), timeout=5)  # served on loopback
        for address in addresses:
            with pytest.raises(OSError):  # refused: nothing listens on that address
                socket.create_connection((address, port), timeout=5).close()


@pytest.mark.parametrize("endpoint", ["moto", "dynamodb"])
@pytest.mark.parametrize("method", ["GET", "POST", "OPTIONS"])
def test_a_foreign_origin_is_refused_with_no_cors_header(
    runtime: LocalRuntime, endpoint: str, method: str
) -> None:
    url = runtime.endpoint_url if endpoint == "moto" else runtime.dynamodb_endpoint_url
    headers = {"Origin": "http://evil.example"}
    if method == "OPTIONS":  # a browser's preflight before a request with credentials
        headers |= {"Access-Control-Request-Method": "PUT", "Access-Control-Request-Headers": "authorization"}

    status, response_headers, body = request(url, method, headers)

    assert status == 403
    assert not any(name.startswith("access-control-") for name in response_headers)
    if method != "OPTIONS":
        assert b"Origin" in body and b"evil.example" in body


@pytest.mark.parametrize("endpoint", ["moto", "dynamodb"])
@pytest.mark.parametrize("origin", ["null", "file://", "https://127.0.0.1.evil.example"])
def test_opaque_and_lookalike_origins_are_refused(runtime: LocalRuntime, endpoint: str, origin: str) -> None:
    url = runtime.endpoint_url if endpoint == "moto" else runtime.dynamodb_endpoint_url
    assert request(url, "GET", {"Origin": origin})[0] == 403


@pytest.mark.parametrize("endpoint", ["moto", "dynamodb"])
def test_a_host_that_is_not_this_machine_is_refused(runtime: LocalRuntime, endpoint: str) -> None:
    url = runtime.endpoint_url if endpoint == "moto" else runtime.dynamodb_endpoint_url
    port = urlsplit(url).port

    status, _, body = request(url, "GET", {"Host": f"rebound.evil.example:{port}"})

    assert status == 403 and b"rebound.evil.example" in body


@pytest.mark.parametrize("endpoint", ["moto", "dynamodb"])
def test_a_page_served_from_this_machine_is_not_refused(runtime: LocalRuntime, endpoint: str) -> None:
    url = runtime.endpoint_url if endpoint == "moto" else runtime.dynamodb_endpoint_url
    port = urlsplit(url).port
    for headers in ({"Origin": "http://localhost:3000"}, {"Host": f"localhost:{port}"}):
        assert request(url, "GET", headers)[0] != 403


def test_the_clients_work_and_the_data_dir_holds_only_private_files(runtime: LocalRuntime) -> None:
    client = runtime.client()
    table_id, [leaf] = new_table(client, "private")
    client.commit(table_id, add_file(table_id, leaf, "f.parquet"))
    sender = runtime.sender()
    sender.wait(table_id, sender.send(table_id, add_file(table_id, leaf, "g.parquet")), timeout=60)
    runtime.run_snapshots()
    s3 = make_client("s3", endpoint_url=runtime.endpoint_url)
    s3.put_object(Bucket=runtime.resources.bucket, Key=f"tables/{table_id}/data/f.parquet", Body=b"rows")

    assert runtime.data_dir is not None
    paths = [runtime.data_dir, *runtime.data_dir.rglob("*")]
    files = [p for p in paths if p.is_file()]
    assert any(p.parent.name == "dynamodb" for p in files)  # DynamoDB Local's database
    assert any("snapshots" in str(p) or "@" in p.name for p in files)  # S3 objects kept
    modes = {str(p.relative_to(runtime.data_dir)): stat.S_IMODE(p.stat().st_mode) for p in paths}
    assert {name: mode for name, mode in modes.items() if mode not in (0o700, 0o600)} == {}
    assert all(modes[str(p.relative_to(runtime.data_dir))] == 0o600 for p in files)


def test_without_a_jdk_dynamodb_local_warns_that_it_is_exposed_and_still_dies_with_its_owner(
    tmp_path: Path,
) -> None:
    # A process that starts DynamoDB Local without the launcher (as on a machine with a JRE only), then is
    # killed with SIGKILL.
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import logging, sys, time
                from statestore.local import dynamodb_local, java_launcher
                logging.basicConfig(stream=sys.stdout, format="%(levelname)s %(message)s")
                java_launcher.find_javac = lambda java: None
                install = dynamodb_local.find_dynamodb_local()
                server = dynamodb_local.DynamoDBLocal.start(port=0, install=install)
                print("serving", server.endpoint_url, flush=True)
                time.sleep(600)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)},
    )
    assert owner.stdout is not None
    printed = []
    for line in owner.stdout:
        printed.append(line)
        if line.startswith("serving"):
            break
    java = descendants(owner.pid)
    owner.send_signal(signal.SIGKILL)
    owner.wait()

    warning = "".join(printed)
    assert "WARNING DynamoDB Local listens on EVERY network interface" in warning
    assert "no `javac` was found" in warning and "install a JDK 17" in warning
    assert java and wait_until_gone(java, timeout=30) == []
