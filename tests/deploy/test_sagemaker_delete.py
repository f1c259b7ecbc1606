"""delete(): every resource is attempted, missing ones count as done, and what is left is reported."""

from __future__ import annotations

from sagemaker_stubs import FAST_WAITER, NAME, Stubbed, endpoint_description, not_found, queue_delete_all

from speakwire.deploy.sagemaker.delete import delete


def test_deleting_everything_reports_three_deletions_in_order(sm: Stubbed) -> None:
    queue_delete_all(sm.stub)
    lines: list[str] = []

    result = delete(sm.client, NAME, waiter_config=FAST_WAITER, log=lines.append)

    assert result.ok
    assert [(d.resource, d.outcome) for d in result.deletions] == [
        ("endpoint", "deleted"),
        ("endpoint config", "deleted"),
        ("model", "deleted"),
    ]
    assert f"endpoint {NAME}: deleted" in lines
    assert f"endpoint config {NAME}: deleted" in lines
    assert f"model {NAME}: deleted" in lines


def test_a_missing_endpoint_is_skipped_and_the_rest_still_deleted(sm: Stubbed) -> None:
    not_found(sm.stub, "delete_endpoint", "endpoint", {"EndpointName": NAME})
    sm.stub.add_response("delete_endpoint_config", {}, {"EndpointConfigName": NAME})
    sm.stub.add_response("delete_model", {}, {"ModelName": NAME})

    result = delete(sm.client, NAME, waiter_config=FAST_WAITER, log=lambda _: None)

    assert result.ok
    assert [d.outcome for d in result.deletions] == ["not found", "deleted", "deleted"]


def test_a_missing_model_is_not_a_failure(sm: Stubbed) -> None:
    sm.stub.add_response("delete_endpoint", {}, {"EndpointName": NAME})
    not_found(sm.stub, "describe_endpoint", "endpoint", {"EndpointName": NAME})
    sm.stub.add_response("delete_endpoint_config", {}, {"EndpointConfigName": NAME})
    not_found(sm.stub, "delete_model", "model", {"ModelName": NAME})

    result = delete(sm.client, NAME, waiter_config=FAST_WAITER, log=lambda _: None)

    assert result.ok
    assert result.deletions[-1].outcome == "not found"


def test_a_failed_deletion_waiter_still_deletes_config_and_model_and_reports_the_endpoint(
    sm: Stubbed,
) -> None:
    sm.stub.add_response("delete_endpoint", {}, {"EndpointName": NAME})
    sm.stub.add_response(
        "describe_endpoint",
        endpoint_description("Failed", FailureReason="delete failed"),
        {"EndpointName": NAME},
    )
    sm.stub.add_response("delete_endpoint_config", {}, {"EndpointConfigName": NAME})
    sm.stub.add_response("delete_model", {}, {"ModelName": NAME})
    lines: list[str] = []

    result = delete(sm.client, NAME, waiter_config=FAST_WAITER, log=lines.append)

    assert not result.ok
    assert [(d.resource, d.outcome) for d in result.left] == [("endpoint", "unconfirmed")]
    assert [d.outcome for d in result.deletions[1:]] == ["deleted", "deleted"]
    assert any(line.startswith("NOT deleted") and "endpoint" in line for line in lines)


def test_an_access_denied_endpoint_is_left_and_named_but_the_others_are_deleted(sm: Stubbed) -> None:
    sm.stub.add_client_error(
        "delete_endpoint",
        service_error_code="AccessDeniedException",
        service_message="not authorized to perform: sagemaker:DeleteEndpoint",
        http_status_code=400,
        expected_params={"EndpointName": NAME},
    )
    sm.stub.add_response("delete_endpoint_config", {}, {"EndpointConfigName": NAME})
    sm.stub.add_response("delete_model", {}, {"ModelName": NAME})

    result = delete(sm.client, NAME, waiter_config=FAST_WAITER, log=lambda _: None)

    assert [(d.resource, d.outcome) for d in result.left] == [("endpoint", "failed")]
    assert "sagemaker:DeleteEndpoint" in result.left[0].detail


def test_a_validation_error_that_is_not_about_a_missing_resource_is_a_failure(sm: Stubbed) -> None:
    sm.stub.add_response("delete_endpoint", {}, {"EndpointName": NAME})
    not_found(sm.stub, "describe_endpoint", "endpoint", {"EndpointName": NAME})
    sm.stub.add_client_error(
        "delete_endpoint_config",
        service_error_code="ValidationException",
        service_message="Rate exceeded while deleting",
        http_status_code=400,
        expected_params={"EndpointConfigName": NAME},
    )
    sm.stub.add_response("delete_model", {}, {"ModelName": NAME})

    result = delete(sm.client, NAME, waiter_config=FAST_WAITER, log=lambda _: None)

    assert [(d.resource, d.outcome) for d in result.left] == [("endpoint config", "failed")]
