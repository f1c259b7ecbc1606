"""What exists for an endpoint name, and which instance pool it landed on.

With instance pools the endpoint config lists up to five types but only one instance is
provisioned; ``DescribeEndpoint`` tells which by giving each pool its
``CurrentInstanceCount``. That is the number that decides the hourly bill, so both
``deploy`` and ``status`` report it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from speakwire.deploy.sagemaker.aws_errors import is_not_found


@dataclass(frozen=True, slots=True)
class EndpointReport:
    """The endpoint (if any), and whether its config and model exist."""

    name: str
    endpoint_status: str | None  # None: no endpoint of that name
    failure_reason: str | None = None
    creation_time: datetime | None = None
    landed_instance_type: str | None = None
    config_exists: bool = False
    configured_instance_types: tuple[str, ...] = ()
    model_exists: bool = False

    @property
    def anything_exists(self) -> bool:
        return self.endpoint_status is not None or self.config_exists or self.model_exists

    def lines(self) -> list[str]:
        """Human-readable report, one fact a line."""
        if self.endpoint_status is None:
            out = [f"endpoint {self.name}: not found"]
        else:
            out = [f"endpoint {self.name}: {self.endpoint_status}"]
            if self.failure_reason:
                out.append(f"  failure reason: {self.failure_reason}")
            if self.creation_time is not None:
                out.append(f"  created: {self.creation_time.isoformat()}")
            out.append(f"  running on: {self.landed_instance_type or 'no instance yet'}")
        if self.config_exists:
            pools = ", ".join(self.configured_instance_types) or "(no instance pools)"
            out.append(f"endpoint config {self.name}: exists; pools in priority order: {pools}")
        else:
            out.append(f"endpoint config {self.name}: not found")
        out.append(f"model {self.name}: {'exists' if self.model_exists else 'not found'}")
        return out


def landed_instance_type(describe_endpoint: Mapping[str, Any]) -> str | None:
    """The instance type actually running for the first variant, or None when none is yet.

    Prefers the pool with ``CurrentInstanceCount > 0``; falls back to a variant-level
    ``CurrentInstanceType``/``InstanceType`` should the service return one (single-type
    configs, or a future response shape).
    """
    variants = describe_endpoint.get("ProductionVariants") or []
    if not variants:
        return None
    variant = variants[0]
    for pool in variant.get("InstancePools") or []:
        if pool.get("CurrentInstanceCount", 0) > 0 and pool.get("InstanceType"):
            return str(pool["InstanceType"])
    for key in ("CurrentInstanceType", "InstanceType"):
        if variant.get(key):
            return str(variant[key])
    return None


def status(sm_client: Any, endpoint_name: str) -> EndpointReport:
    """Describe the endpoint, its endpoint config and its model (all named ``endpoint_name``).

    Raises:
        botocore.exceptions.ClientError: Any error other than "not found" (e.g. access denied).
    """
    endpoint = _describe(lambda: sm_client.describe_endpoint(EndpointName=endpoint_name))
    config = _describe(lambda: sm_client.describe_endpoint_config(EndpointConfigName=endpoint_name))
    model = _describe(lambda: sm_client.describe_model(ModelName=endpoint_name))
    configured: tuple[str, ...] = ()
    if config is not None:
        variants = config.get("ProductionVariants") or [{}]
        pools = sorted(variants[0].get("InstancePools") or [], key=lambda p: p.get("Priority", 0))
        configured = tuple(p["InstanceType"] for p in pools) or (
            (variants[0]["InstanceType"],) if variants[0].get("InstanceType") else ()
        )
    if endpoint is None:
        return EndpointReport(
            endpoint_name,
            None,
            config_exists=config is not None,
            configured_instance_types=configured,
            model_exists=model is not None,
        )
    return EndpointReport(
        endpoint_name,
        str(endpoint["EndpointStatus"]),
        failure_reason=endpoint.get("FailureReason"),
        creation_time=endpoint.get("CreationTime"),
        landed_instance_type=landed_instance_type(endpoint),
        config_exists=config is not None,
        configured_instance_types=configured,
        model_exists=model is not None,
    )


def _describe(call: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
    try:
        response: dict[str, Any] = call()
    except ClientError as exc:
        if is_not_found(exc):
            return None
        raise
    return response
