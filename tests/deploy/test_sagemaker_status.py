"""status(): which of endpoint, config and model exist, and the pool the endpoint landed on."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError
from sagemaker_stubs import NAME, WHEN, Stubbed, arn, endpoint_description, not_found, pools

from speakwire.deploy.sagemaker.status import landed_instance_type, status


def _config_description() -> dict[str, object]:
    return {
        "EndpointConfigName": NAME,
        "EndpointConfigArn": arn("endpoint-config"),
        "CreationTime": WHEN,
        "ProductionVariants": [
            {
                "VariantName": "AllTraffic",
                "ModelName": NAME,
                "InitialInstanceCount": 1,
                "InstancePools": [
                    {"InstanceType": "ml.g5.xlarge", "Priority": 2},
                    {"InstanceType": "ml.g6.xlarge", "Priority": 1},
                ],
            }
        ],
    }


def test_status_reports_the_landed_pool_and_the_configured_priority_order(sm: Stubbed) -> None:
    sm.stub.add_response(
        "describe_endpoint",
        endpoint_description("InService", **pools(("ml.g6.xlarge", 0), ("ml.g5.xlarge", 1))),
        {"EndpointName": NAME},
    )
    sm.stub.add_response("describe_endpoint_config", _config_description(), {"EndpointConfigName": NAME})
    sm.stub.add_response(
        "describe_model",
        {"ModelName": NAME, "CreationTime": WHEN, "ModelArn": arn("model")},
        {"ModelName": NAME},
    )

    report = status(sm.client, NAME)

    assert report.endpoint_status == "InService"
    assert report.landed_instance_type == "ml.g5.xlarge"
    assert report.configured_instance_types == ("ml.g6.xlarge", "ml.g5.xlarge")
    assert report.config_exists and report.model_exists
    assert report.creation_time == WHEN
    assert f"endpoint {NAME}: InService" in report.lines()
    assert "  running on: ml.g5.xlarge" in report.lines()


def test_status_of_a_failed_endpoint_shows_why_and_notes_missing_pieces(sm: Stubbed) -> None:
    sm.stub.add_response(
        "describe_endpoint",
        endpoint_description("Failed", FailureReason="Image pull failed"),
        {"EndpointName": NAME},
    )
    not_found(sm.stub, "describe_endpoint_config", "endpoint configuration", {"EndpointConfigName": NAME})
    not_found(sm.stub, "describe_model", "model", {"ModelName": NAME})

    report = status(sm.client, NAME)

    assert report.failure_reason == "Image pull failed"
    assert not report.config_exists and not report.model_exists
    assert "  failure reason: Image pull failed" in report.lines()
    assert f"model {NAME}: not found" in report.lines()


def test_status_when_nothing_exists_says_so(sm: Stubbed) -> None:
    not_found(sm.stub, "describe_endpoint", "endpoint", {"EndpointName": NAME})
    not_found(sm.stub, "describe_endpoint_config", "endpoint configuration", {"EndpointConfigName": NAME})
    not_found(sm.stub, "describe_model", "model", {"ModelName": NAME})

    report = status(sm.client, NAME)

    assert report.endpoint_status is None
    assert not report.anything_exists
    assert report.lines()[0] == f"endpoint {NAME}: not found"


def test_status_does_not_hide_access_errors(sm: Stubbed) -> None:
    sm.stub.add_client_error(
        "describe_endpoint",
        service_error_code="AccessDeniedException",
        service_message="not authorized",
        http_status_code=400,
        expected_params={"EndpointName": NAME},
    )

    with pytest.raises(ClientError, match="AccessDenied"):
        status(sm.client, NAME)


def test_landed_instance_type_prefers_the_pool_with_an_instance() -> None:
    described = pools(("ml.g6.xlarge", 0), ("ml.g6e.xlarge", 1), ("ml.g5.xlarge", 0))

    assert landed_instance_type(described) == "ml.g6e.xlarge"


def test_landed_instance_type_falls_back_to_a_variant_level_type() -> None:
    described = {"ProductionVariants": [{"VariantName": "AllTraffic", "CurrentInstanceType": "ml.g6.xlarge"}]}

    assert landed_instance_type(described) == "ml.g6.xlarge"


def test_landed_instance_type_is_none_while_nothing_runs() -> None:
    assert landed_instance_type(pools(("ml.g6.xlarge", 0))) is None
    assert landed_instance_type({}) is None
