"""An endpoint given by hand (a local runtime's, or a test's): checked before the first call.

boto3 would retry a call to an endpoint where nothing listens for minutes before it failed, and would refuse
an emulator's endpoint when no credentials are configured. The CLI and the Spark jobs check theirs here
first, each turning the errors into its own usage or unavailable exit.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

import boto3

from statestore.errors import ConnectionSettingsError, EndpointUnavailableError

# How long a connection to an endpoint given by hand may take before nothing is said to answer there.
CONNECT_TIMEOUT_SECONDS = 3.0


def check_endpoint(url: str | None, setting: str) -> None:
    """Nothing to check when ``url`` is None. Raises ConnectionSettingsError when it is not a URL, and
    EndpointUnavailableError when nothing answers at it, each naming ``setting`` (the option or variable
    it came from). Where boto3 finds no credentials, gives the process fake ones: emulators accept any."""
    if not url:
        return
    parts = urlsplit(url)
    if not parts.scheme or not parts.hostname:
        raise ConnectionSettingsError(f"{setting} {url!r} is not a URL; give one like http://127.0.0.1:4566")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT_SECONDS):
            pass
    except OSError as e:
        raise EndpointUnavailableError(
            f"nothing answers at {url} ({e.strerror or e}); start the local runtime with `statestore local` "
            f"and use the export lines it prints, or fix {setting}"
        ) from None
    if boto3.session.Session().get_credentials() is None:
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
