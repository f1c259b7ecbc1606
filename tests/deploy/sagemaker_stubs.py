"""Response builders for botocore Stubber that satisfy the real service models' required members."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.stub import Stubber

REGION = "us-west-2"
ACCOUNT = "210987654321"
NAME = "speakwire-test"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/SpeakwireSageMakerRole"
WHEN = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
FAST_WAITER = {"Delay": 0, "MaxAttempts": 5}


@dataclass
class Stubbed:
    """A real boto3 client and the Stubber that answers its calls."""

    client: Any
    stub: Stubber


def arn(kind: str, name: str = NAME) -> str:
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:{kind}/{name}"


def endpoint_description(status: str, **extra: Any) -> dict[str, Any]:
    """A ``DescribeEndpoint`` response with the model's required members."""
    return {
        "EndpointName": NAME,
        "EndpointArn": arn("endpoint"),
        "EndpointConfigName": NAME,
        "EndpointStatus": status,
        "CreationTime": WHEN,
        "LastModifiedTime": WHEN,
        **extra,
    }


def pools(*counts: tuple[str, int]) -> dict[str, Any]:
    """``ProductionVariants`` with instance pools and their current counts."""
    return {
        "ProductionVariants": [
            {
                "VariantName": "AllTraffic",
                "InstancePools": [{"InstanceType": t, "CurrentInstanceCount": c} for t, c in counts],
            }
        ]
    }


def not_found(stub: Stubber, operation: str, what: str, params: dict[str, Any]) -> None:
    """Queue SageMaker's "missing resource" error: ValidationException "Could not find ..."."""
    stub.add_client_error(
        operation,
        service_error_code="ValidationException",
        service_message=f'Could not find {what} "{NAME}".',
        http_status_code=400,
        expected_params=params,
    )


def queue_delete_all(stub: Stubber) -> None:
    """The full, successful cleanup sequence: endpoint, wait until gone, config, model."""
    stub.add_response("delete_endpoint", {}, {"EndpointName": NAME})
    stub.add_response("describe_endpoint", endpoint_description("Deleting"), {"EndpointName": NAME})
    not_found(stub, "describe_endpoint", "endpoint", {"EndpointName": NAME})
    stub.add_response("delete_endpoint_config", {}, {"EndpointConfigName": NAME})
    stub.add_response("delete_model", {}, {"ModelName": NAME})
