"""Acknowledging cdk-nag findings (cdk-nag 3 uses CDK's own ``Validations``): every one with its reason."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct

# The plugin's name; cdk-nag reports a finding as ``<plugin>::<rule>[<finding>]``.
PLUGIN = "AwsSolutions"


def acknowledge(scope: IConstruct, reason: str, *finding_ids: str) -> None:
    """Acknowledge each of ``finding_ids`` (``AwsSolutions-XX`` or ``AwsSolutions-XX[finding]``) on ``scope``
    and its children, with ``reason``."""
    if not reason.strip():
        raise ValueError("a cdk-nag acknowledgment needs a reason")
    Validations.of(scope).acknowledge(
        *(Acknowledgment(id=f"{PLUGIN}::{finding_id}", reason=reason) for finding_id in finding_ids)
    )
