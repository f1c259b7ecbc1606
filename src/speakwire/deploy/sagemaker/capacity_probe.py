"""Ask a running endpoint how many streams one instance admits: its ``/ready`` through ``InvokeEndpoint``.

speakwire derives its capacity at start-up (measured throughput on CPU, the batch limit
on GPU) and reports it in ``/ready`` as ``capacity.streams``; that is the number an
autoscaling target should be a share of, rather than a guess. SageMaker forwards only
``/ping`` and ``/invocations`` to a container, and ``/ping`` says only "healthy" — but our
``/invocations`` routes by ``X-Amzn-SageMaker-Custom-Attributes: route=/ready`` (a POST to a
GET-only route is dispatched as GET), so one ``InvokeEndpoint`` after InService reads it.
The number is the instance that answered: every instance of one image and instance type
derives the same limit, but another pool's type may admit more or fewer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from speakwire.deploy.sagemaker.aws_errors import error_message

READY_ATTRIBUTES = "route=/ready"


class CapacityProbeError(RuntimeError):
    """The endpoint did not report a capacity (not speakwire's image, or /ready failed)."""


@dataclass(frozen=True, slots=True)
class ReportedCapacity:
    """``/ready``'s ``capacity``: streams admitted at once, and how that number was found."""

    streams: int
    source: str


def reported_capacity(runtime_client: Any, endpoint_name: str) -> ReportedCapacity:
    """``capacity.streams`` from the endpoint's ``/ready``.

    Args:
        runtime_client: A boto3 ``sagemaker-runtime`` client.
        endpoint_name: An InService endpoint running speakwire's image.

    Raises:
        CapacityProbeError: The call failed, or the answer carries no ``capacity.streams``.
    """
    try:
        response = runtime_client.invoke_endpoint(
            EndpointName=endpoint_name,
            ContentType="application/json",
            Accept="application/json",
            CustomAttributes=READY_ATTRIBUTES,
            Body=b"{}",
        )
        body = response["Body"].read()
    except ClientError as exc:
        raise CapacityProbeError(f"InvokeEndpoint {READY_ATTRIBUTES} failed: {error_message(exc)}") from exc
    except BotoCoreError as exc:
        raise CapacityProbeError(f"InvokeEndpoint {READY_ATTRIBUTES} failed: {exc}") from exc
    try:
        ready = json.loads(body)
        capacity = ready["capacity"]
        streams = int(capacity["streams"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CapacityProbeError(f"/ready reported no capacity.streams: {body[:200]!r}") from exc
    if streams < 1:
        raise CapacityProbeError(f"/ready reported capacity.streams = {streams}")
    return ReportedCapacity(streams=streams, source=str(capacity.get("source", "unknown")))
