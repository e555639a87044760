"""The check of an endpoint given by hand that the CLI and the Spark jobs make before their first call."""

from __future__ import annotations

import os
import socket

import pytest

from statestore.adapters.aws.endpoints import check_endpoint
from statestore.errors import ConnectionSettingsError, EndpointUnavailableError


def test_an_endpoint_that_is_not_a_url_is_named_with_its_setting() -> None:
    with pytest.raises(ConnectionSettingsError, match=r"^--endpoint-url '127.0.0.1:4566' is not a URL"):
        check_endpoint("127.0.0.1:4566", "--endpoint-url")


def test_nothing_answering_is_said_at_once_with_how_to_start_the_local_runtime() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(EndpointUnavailableError, match=f"nothing answers at http://127.0.0.1:{port} .*") as e:
        check_endpoint(f"http://127.0.0.1:{port}", "$AWS_ENDPOINT_URL")
    assert "`statestore local`" in str(e.value) and str(e.value).endswith("or fix $AWS_ENDPOINT_URL")


def test_an_answering_endpoint_gets_fake_credentials_only_where_none_are_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.setenv(name, "")  # so that what the check sets is undone after the test, too
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        url = f"http://127.0.0.1:{listening.getsockname()[1]}"
        check_endpoint(url, "--endpoint-url")
        assert (os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]) == (
            "testing",
            "testing",
        )

        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "mine")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "my-secret")
        check_endpoint(url, "--endpoint-url")
        assert os.environ["AWS_ACCESS_KEY_ID"] == "mine"

    check_endpoint(None, "--endpoint-url")  # none given: nothing to check
