"""Which ``Host`` and ``Origin`` headers the local endpoints take as this machine's (the moto side; the same
cases against DynamoDB Local's launcher are in ``tests/e2e/test_local_endpoints.py``)."""

from __future__ import annotations

import pytest

from statestore.local.local_only import LocalOnly, host_of_authority, is_local_host, is_local_origin, refusal


@pytest.mark.parametrize(
    ("host", "local"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("bucket.localhost", True),
        ("[::1]", True),
        ("::1", True),
        ("192.0.2.2", False),
        ("0.0.0.0", False),
        ("evil.example", False),
        ("127.0.0.1.evil.example", False),
        ("localhost.evil.example", False),
        ("127.0.0.1a", False),
    ],
)
def test_loopback_names_are_this_machine_and_others_are_not(host: str, local: bool) -> None:
    assert is_local_host(host) is local


def test_the_bound_host_is_this_machine_too() -> None:
    assert is_local_host("192.0.2.2", bound_host="192.0.2.2")


@pytest.mark.parametrize(
    ("authority", "host"),
    [
        ("127.0.0.1:4566", "127.0.0.1"),
        ("localhost", "localhost"),
        ("[::1]:4566", "[::1]"),
        ("[::1]", "[::1]"),
    ],
)
def test_the_host_of_a_host_header(authority: str, host: str) -> None:
    assert host_of_authority(authority) == host


@pytest.mark.parametrize(
    ("origin", "local"),
    [
        ("http://localhost:3000", True),
        ("https://127.0.0.1", True),
        ("http://[::1]:8080", True),
        ("http://evil.example", False),
        ("https://127.0.0.1.evil.example", False),
        ("null", False),
        ("file://", False),
        ("chrome-extension://abc", False),
        ("http://[::1", False),
    ],
)
def test_only_http_origins_on_this_machine_are_local(origin: str, local: bool) -> None:
    assert is_local_origin(origin) is local


def test_the_middleware_answers_403_naming_the_refused_header_and_never_calls_the_app() -> None:
    called: list[dict[str, object]] = []
    started: list[tuple[str, list[tuple[str, str]]]] = []

    def app(environ: dict[str, object], start_response: object) -> list[bytes]:
        called.append(environ)
        return [b"ok"]

    middleware = LocalOnly(app, "127.0.0.1")
    body = b"".join(
        middleware(
            {"HTTP_HOST": "127.0.0.1:4566", "HTTP_ORIGIN": "http://evil.example"},
            lambda status, headers: started.append((status, headers)),
        )
    )

    assert called == [] and started[0][0] == "403 Forbidden"
    assert b"AccessDenied" in body and b"Origin 'http://evil.example' refused" in body
    assert refusal("127.0.0.1:4566", None, "127.0.0.1") is None
    assert refusal(None, None, "127.0.0.1") is None
