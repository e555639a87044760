"""The local endpoints serve this machine only: requests must name it, and web pages of other origins are
refused.

Binding to 127.0.0.1 keeps other machines out, but not a web page open in this machine's browser: it can send
requests to ``http://127.0.0.1:4566`` (and read the answers if the server echoes its ``Origin`` in
``Access-Control-Allow-Origin``, as moto does), or reach it under its own DNS name rebound to 127.0.0.1.
So a request is refused (403) when:

- its ``Host`` is not a name of this machine (``localhost``, ``*.localhost``, ``127.x.x.x``, ``[::1]``, or
  the host the endpoint was bound to): a rebound name arrives with the page's host name;
- it carries an ``Origin`` that is not a loopback ``http(s)`` origin (``null``, or a page of any other
  site): browsers send ``Origin`` on every cross-origin request and on preflights, so a foreign page gets
  no answer and no CORS header.

Clients that are not browsers (boto3, the CLI, Spark) send no ``Origin`` and the endpoint's own host.
DynamoDB Local applies the same rules in its launcher (``LocalOnlyDynamoDBLocal.java``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

_LOOPBACK_IPV4 = re.compile(r"127\.\d{1,3}\.\d{1,3}\.\d{1,3}")


def is_local_host(name: str, bound_host: str = "127.0.0.1") -> bool:
    """Whether ``name`` (a host, without port; IPv6 in brackets or not) names this machine."""
    host = name.lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return (
        host in ("localhost", "::1", bound_host.lower())
        or host.endswith(".localhost")
        or _LOOPBACK_IPV4.fullmatch(host) is not None
    )


def host_of_authority(authority: str) -> str:
    """The host of a ``Host`` header's ``host[:port]`` (IPv6 kept in brackets)."""
    if authority.startswith("["):
        end = authority.find("]")
        return authority if end < 0 else authority[: end + 1]
    return authority.rsplit(":", 1)[0] if ":" in authority else authority


def is_local_origin(origin: str, bound_host: str = "127.0.0.1") -> bool:
    """Whether ``origin`` is an ``http(s)`` origin on this machine (``null`` and anything else: no)."""
    try:
        parts = urlsplit(origin)
        host = parts.hostname
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and host is not None and is_local_host(host, bound_host)


class LocalOnly:
    """WSGI middleware answering 403 to requests that :func:`refusal` refuses, before ``app`` sees them."""

    def __init__(self, app: Any, bound_host: str) -> None:
        self.app = app
        self.bound_host = bound_host

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        reason = refusal(environ.get("HTTP_HOST"), environ.get("HTTP_ORIGIN"), self.bound_host)
        if reason is None:
            return self.app(environ, start_response)
        body = (
            "<?xml version='1.0' encoding='UTF-8'?><Error><Code>AccessDenied</Code>"
            f"<Message>this local endpoint serves this machine only: {_xml_escape(reason)}</Message></Error>"
        ).encode()
        start_response(
            "403 Forbidden", [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))]
        )
        return [body]


def refusal(host: str | None, origin: str | None, bound_host: str) -> str | None:
    """Why a request with these ``Host`` and ``Origin`` headers is refused, None if it is not."""
    if host is not None and not is_local_host(host_of_authority(host), bound_host):
        return f"Host {host!r} refused"
    if origin is not None and not is_local_origin(origin, bound_host):
        return f"Origin {origin!r} refused"
    return None


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
