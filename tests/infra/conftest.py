"""Synthesising the stack for tests: the context of cdk.json, and a tiny stand-in for the Lambda asset."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aws_cdk
import pytest
from aws_cdk import assertions

from infra.asset import MANIFEST_NAME, REPO_ROOT
from infra.config import InstanceConfig
from infra.stack import StatestoreStack

CDK_JSON = REPO_ROOT / "cdk.json"

SynthStack = Callable[..., StatestoreStack]


def cdk_json_context() -> dict[str, Any]:
    context: dict[str, Any] = json.loads(CDK_JSON.read_text())["context"]
    return context


@pytest.fixture(scope="session")
def fake_asset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A built-looking asset folder of a few bytes, for tests that do not run the handlers."""
    folder = tmp_path_factory.mktemp("fake-lambda-asset")
    (folder / "lambdas").mkdir()
    (folder / "lambdas" / "__init__.py").write_text("")
    (folder / MANIFEST_NAME).write_text(json.dumps({"asset_key": "fake-for-tests"}))
    return folder


@pytest.fixture(scope="session")
def synth_stack(fake_asset: Path) -> SynthStack:
    """Build the stack with cdk.json's context plus ``overrides`` (as ``cdk -c key=value`` would)."""

    def synth(**overrides: Any) -> StatestoreStack:
        context = {**cdk_json_context(), "lambda_asset": str(fake_asset), **overrides}
        app = aws_cdk.App(context=context)
        config = InstanceConfig.from_context(app.node)
        return StatestoreStack(app, f"statestore-{config.instance_id}", config=config)

    return synth


@pytest.fixture(scope="session")
def stack(synth_stack: SynthStack) -> StatestoreStack:
    return synth_stack()


@pytest.fixture(scope="session")
def template(stack: StatestoreStack) -> Any:
    return assertions.Template.from_stack(stack)


@pytest.fixture(scope="session")
def postgres_template(synth_stack: SynthStack) -> Any:
    """The stack with ``-c postgres=true`` (the proxy by default), synthesised once for every test."""
    return assertions.Template.from_stack(synth_stack(postgres="true"))
