"""Acknowledging cdk-nag findings (cdk-nag 3 uses CDK's own ``Validations``): every one with its reason."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct


def acknowledge(scope: IConstruct, reason: str, *finding_ids: str) -> None:
    """Acknowledge each of ``finding_ids`` (``Rule`` or ``Rule[finding]``) on ``scope`` and its children."""
    Validations.of(scope).acknowledge(
        *(Acknowledgment(id=finding_id, reason=reason) for finding_id in finding_ids)
    )
