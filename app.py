#!/usr/bin/env python3
"""CDK app entry: ``cdk synth`` / ``cdk deploy`` (settings: CDK context, see infra/config.py)."""

from __future__ import annotations

import sys

try:
    import aws_cdk as cdk
except ImportError:
    sys.exit(
        "aws-cdk-lib is not importable by this python: run cdk from `make synth`, or put the project's "
        "virtual environment first on PATH (`source .venv/bin/activate`; `make venv` builds it)."
    )

from cdk_nag import AwsSolutionsChecks

from infra.asset import AssetError
from infra.config import InstanceConfig
from infra.stack import StatestoreStack


def main() -> None:
    app = cdk.App()
    try:
        config = InstanceConfig.from_context(app.node)
        StatestoreStack(
            app,
            f"statestore-{config.instance_id}",
            config=config,
            description=f"statestore instance {config.instance_id}: transaction log, snapshots, commit queue",
        )
    except (AssetError, ValueError) as e:
        sys.exit(f"error: {e}")
    # Synth (and so deploy) stops on any cdk-nag AwsSolutions finding that is not acknowledged with a reason.
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()


if __name__ == "__main__":
    main()
