"""How the PostgreSQL store connects: TLS with the server's certificate verified, unless told otherwise.

libpq's default (``sslmode=prefer``) and ``require`` encrypt without checking who answers, so anyone on the
path can stand in for the database and read the credentials. A connection to a server that is not on this
machine therefore verifies the certificate chain and the host name (``sslmode=verify-full``), against the
certificate bundle this package carries (:data:`BUNDLE_NAME`: the certificate authorities of Amazon RDS in
every region, and the Amazon roots RDS Proxy's certificates chain to), unless the connection string or
libpq's environment (``PGSSLMODE``, ``PGSSLROOTCERT``) says otherwise. A weaker ``sslmode`` given for a
remote server is honoured with a warning naming the server; a loopback or Unix-socket server (the embedded
runtime, the tests) is left as given.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import json
import logging
import os
from collections.abc import Mapping
from functools import cache
from importlib import resources

from psycopg.conninfo import conninfo_to_dict, make_conninfo

logger = logging.getLogger("statestore.postgres")

BUNDLE_NAME = "rds-ca-bundle.pem"
VERIFYING = ("verify-ca", "verify-full")


@cache
def bundled_ca_file() -> str:
    """The path of the bundled certificate authorities, extracted to a temporary file for the life of the
    process when the package is imported from a zip (the Spark code archive): libpq reads a file."""
    stack = contextlib.ExitStack()
    atexit.register(stack.close)
    return str(stack.enter_context(resources.as_file(resources.files(__package__) / BUNDLE_NAME)))


def is_local_host(host: str | None) -> bool:
    """Whether ``host`` (a libpq host: a name, an address or a socket directory) is this machine."""
    if not host or host.startswith("/") or host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def secure_conninfo(conninfo: str, environ: Mapping[str, str] | None = None) -> str:
    """``conninfo`` with the server's certificate verified (see the module's docstring): ``sslmode`` and
    ``sslrootcert`` added where neither it nor libpq's environment gives them. Raises ValueError for a
    connection string libpq cannot parse."""
    env = os.environ if environ is None else environ
    params = conninfo_to_dict(conninfo)
    # The name verified is ``host`` (``hostaddr`` only says where to reach it, a tunnel's end, say).
    hosts = [h for h in str(params.get("host") or params.get("hostaddr") or "").split(",") if h]
    if not hosts or all(is_local_host(h) for h in hosts):
        return conninfo
    sslmode = str(params.get("sslmode") or env.get("PGSSLMODE") or "")
    if not sslmode:
        params["sslmode"] = sslmode = "verify-full"
    if sslmode in VERIFYING:
        if not params.get("sslrootcert") and not env.get("PGSSLROOTCERT"):
            params["sslrootcert"] = bundled_ca_file()
    else:
        logger.warning(
            "connecting to PostgreSQL at %s with sslmode=%s: the server's certificate is not checked, so "
            "anyone on the path can pose as it; use sslmode=verify-full",
            ",".join(hosts),
            sslmode,
        )
    return make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


def conninfo_from_secret(secret: str | Mapping[str, object], *, sslmode: str = "verify-full") -> str:
    """A libpq connection string from a Secrets Manager secret of the shape RDS writes for a database user
    (JSON ``{"host", "port", "username", "password", "dbname"}``; ``dbname`` defaults to ``postgres``).
    ``sslmode="verify-full"`` encrypts the connection and verifies the server's certificate and name against
    the bundled RDS certificate authorities. Raises ValueError naming
    what is missing from the secret."""
    fields = json.loads(secret) if isinstance(secret, str) else dict(secret)
    if not isinstance(fields, dict):
        raise ValueError("the database secret must be a JSON object with host, port, username and password")
    missing = [key for key in ("host", "username", "password") if not fields.get(key)]
    if missing:
        raise ValueError(f"the database secret has no {', '.join(missing)}: expected the JSON RDS writes")
    verify = (
        {"sslrootcert": bundled_ca_file()}
        if sslmode in VERIFYING and not os.environ.get("PGSSLROOTCERT")
        else {}
    )
    return make_conninfo(
        host=str(fields["host"]),
        port=str(fields.get("port") or 5432),
        user=str(fields["username"]),
        password=str(fields["password"]),
        dbname=str(fields.get("dbname") or "postgres"),
        sslmode=sslmode,
        **verify,
    )
