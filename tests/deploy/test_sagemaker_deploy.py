"""deploy(): the exact call sequence, and that nothing outlives a run unless it was kept on purpose."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import NoCredentialsError, ReadTimeoutError
from botocore.response import StreamingBody
from sagemaker_stubs import (
    FAST_WAITER,
    NAME,
    Stubbed,
    arn,
    endpoint_description,
    not_found,
    pools,
    queue_delete_all,
)

from speakwire.deploy.sagemaker.deploy import deploy
from speakwire.deploy.sagemaker.requests import (
    create_endpoint_config_request,
    create_endpoint_request,
    create_model_request,
    deregister_scalable_target_request,
    put_scaling_policy_request,
    register_scalable_target_request,
)
from speakwire.deploy.sagemaker.settings import AutoscalingSettings, DeploySettings
from speakwire.deploy.sagemaker.smoke import SmokeResult

PASSED = SmokeResult(ok=True, reason="", pcm_bytes=48_000, sample_rate=24000, output_path=Path("v.wav"))
FAILED = SmokeResult(ok=False, reason="no audio.done event", pcm_bytes=0, sample_rate=24000)


class SmokeSpy:
    """Stands in for the bidirectional-stream smoke test and records which endpoints it was run on."""

    def __init__(self, result: SmokeResult | Exception) -> None:
        self.result = result
        self.calls: list[str] = []

    def __call__(self, endpoint_name: str) -> SmokeResult:
        self.calls.append(endpoint_name)
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def queue_creates(sm: Stubbed, settings: DeploySettings) -> None:
    sm.stub.add_response("create_model", {"ModelArn": arn("model")}, create_model_request(settings))
    sm.stub.add_response(
        "create_endpoint_config",
        {"EndpointConfigArn": arn("endpoint-config")},
        create_endpoint_config_request(settings),
    )
    sm.stub.add_response("create_endpoint", {"EndpointArn": arn("endpoint")}, create_endpoint_request(settings))


def queue_in_service(sm: Stubbed) -> None:
    """Two polls (Creating, InService), then the describe that reports the landed pool."""
    for status in ("Creating", "InService"):
        sm.stub.add_response("describe_endpoint", endpoint_description(status), {"EndpointName": NAME})
    sm.stub.add_response(
        "describe_endpoint",
        endpoint_description("InService", **pools(("ml.g6.xlarge", 0), ("ml.g5.xlarge", 1))),
        {"EndpointName": NAME},
    )


def test_a_kept_endpoint_that_passed_its_smoke_test_is_left_running(sm: Stubbed, settings: DeploySettings) -> None:
    settings = dataclasses.replace(settings, keep_endpoint=True)
    queue_creates(sm, settings)
    queue_in_service(sm)
    smoke = SmokeSpy(PASSED)
    lines: list[str] = []

    result = deploy(sm.client, settings, smoke=smoke, waiter_config=FAST_WAITER, log=lines.append)

    assert result.ok and result.kept
    assert result.cleanup is None
    assert result.instance_type == "ml.g5.xlarge"
    assert smoke.calls == [NAME]
    text = "\n".join(lines)
    assert f"{NAME}: Creating" in text and f"{NAME}: InService" in text  # one line per poll
    assert "InService on ml.g5.xlarge" in text
    assert f"speakwire sagemaker delete --endpoint-name {NAME}" in text


def test_a_failed_smoke_test_deletes_endpoint_config_and_model_even_with_keep(
    sm: Stubbed, settings: DeploySettings
) -> None:
    settings = dataclasses.replace(settings, keep_endpoint=True)
    queue_creates(sm, settings)
    queue_in_service(sm)
    queue_delete_all(sm.stub)

    result = deploy(
        sm.client,
        settings,
        smoke=SmokeSpy(FAILED),
        waiter_config=FAST_WAITER,
        delete_waiter_config=FAST_WAITER,
        log=lambda _: None,
    )

    assert not result.ok and not result.kept
    assert "smoke test failed: no audio.done event" in result.reason
    assert result.cleanup is not None and result.cleanup.ok
    assert [d.resource for d in result.cleanup.deletions] == ["endpoint", "endpoint config", "model"]


def test_a_smoke_test_that_raises_counts_as_failed_and_cleans_up(sm: Stubbed, settings: DeploySettings) -> None:
    settings = dataclasses.replace(settings, keep_endpoint=True)
    queue_creates(sm, settings)
    queue_in_service(sm)
    queue_delete_all(sm.stub)

    result = deploy(
        sm.client,
        settings,
        smoke=SmokeSpy(ConnectionError("stream refused")),
        waiter_config=FAST_WAITER,
        delete_waiter_config=FAST_WAITER,
        log=lambda _: None,
    )

    assert not result.kept
    assert "ConnectionError: stream refused" in result.reason


def test_an_endpoint_that_fails_to_start_is_cleaned_up_without_a_smoke_test(
    sm: Stubbed, settings: DeploySettings
) -> None:
    queue_creates(sm, settings)
    sm.stub.add_response("describe_endpoint", endpoint_description("Creating"), {"EndpointName": NAME})
    sm.stub.add_response(
        "describe_endpoint",
        endpoint_description("Failed", FailureReason="Insufficient capacity for all instance pools."),
        {"EndpointName": NAME},
    )
    # A Failed endpoint still exists and must be deleted; it is gone at the first poll.
    sm.stub.add_response("delete_endpoint", {}, {"EndpointName": NAME})
    not_found(sm.stub, "describe_endpoint", "endpoint", {"EndpointName": NAME})
    sm.stub.add_response("delete_endpoint_config", {}, {"EndpointConfigName": NAME})
    sm.stub.add_response("delete_model", {}, {"ModelName": NAME})
    smoke = SmokeSpy(PASSED)

    result = deploy(
        sm.client,
        settings,
        smoke=smoke,
        waiter_config=FAST_WAITER,
        delete_waiter_config=FAST_WAITER,
        log=lambda _: None,
    )

    assert not result.ok
    assert "Insufficient capacity for all instance pools." in result.reason
    assert smoke.calls == []
    assert result.cleanup is not None and result.cleanup.ok


def test_without_keep_endpoint_a_passing_deployment_is_deleted_afterwards(
    sm: Stubbed, settings: DeploySettings
) -> None:
    queue_creates(sm, settings)
    queue_in_service(sm)
    queue_delete_all(sm.stub)

    result = deploy(
        sm.client,
        settings,
        smoke=SmokeSpy(PASSED),
        waiter_config=FAST_WAITER,
        delete_waiter_config=FAST_WAITER,
        log=lambda _: None,
    )

    assert result.ok and not result.kept
    assert result.smoke == PASSED
    assert result.cleanup is not None and result.cleanup.ok


def test_a_failed_create_call_deletes_only_what_was_created_and_reraises(sm: Stubbed, settings: DeploySettings) -> None:
    sm.stub.add_response("create_model", {"ModelArn": arn("model")}, create_model_request(settings))
    sm.stub.add_response(
        "create_endpoint_config",
        {"EndpointConfigArn": arn("endpoint-config")},
        create_endpoint_config_request(settings),
    )
    sm.stub.add_client_error(
        "create_endpoint",
        service_error_code="ResourceLimitExceeded",
        service_message="The account-level service limit 'ml.g6.xlarge for endpoint usage' is 0 Instances",
        http_status_code=400,
        expected_params=create_endpoint_request(settings),
    )
    sm.stub.add_response("delete_endpoint_config", {}, {"EndpointConfigName": NAME})
    sm.stub.add_response("delete_model", {}, {"ModelName": NAME})

    with pytest.raises(Exception, match="ResourceLimitExceeded"):
        deploy(sm.client, settings, smoke=SmokeSpy(PASSED), waiter_config=FAST_WAITER, log=lambda _: None)


class CreateEndpointTimesOut:
    """The stubbed client, except that CreateEndpoint gets no answer (the endpoint may or may not exist)."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def create_endpoint(self, **_: Any) -> None:
        raise ReadTimeoutError(endpoint_url="https://api.sagemaker.us-west-2.amazonaws.com/")


def test_a_create_call_without_an_answer_is_cleaned_up_as_if_it_had_succeeded(
    sm: Stubbed, settings: DeploySettings
) -> None:
    sm.stub.add_response("create_model", {"ModelArn": arn("model")}, create_model_request(settings))
    sm.stub.add_response(
        "create_endpoint_config",
        {"EndpointConfigArn": arn("endpoint-config")},
        create_endpoint_config_request(settings),
    )
    not_found(sm.stub, "delete_endpoint", "endpoint", {"EndpointName": NAME})
    sm.stub.add_response("delete_endpoint_config", {}, {"EndpointConfigName": NAME})
    sm.stub.add_response("delete_model", {}, {"ModelName": NAME})

    with pytest.raises(ReadTimeoutError):
        deploy(CreateEndpointTimesOut(sm.client), settings, smoke=SmokeSpy(PASSED), log=lambda _: None)


class NoCredentials:
    """The stubbed client, except that signing the first call finds no credentials."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def create_model(self, **_: Any) -> None:
        raise NoCredentialsError()


def test_a_call_that_never_left_the_machine_needs_no_cleanup(sm: Stubbed, settings: DeploySettings) -> None:
    # Nothing is queued on the Stubber: a cleanup call would fail the test.
    with pytest.raises(NoCredentialsError):
        deploy(NoCredentials(sm.client), settings, smoke=SmokeSpy(PASSED), log=lambda _: None)


def test_ctrl_c_while_waiting_still_deletes_the_endpoint(sm: Stubbed, settings: DeploySettings) -> None:
    queue_creates(sm, settings)
    sm.stub.add_response("describe_endpoint", endpoint_description("Creating"), {"EndpointName": NAME})
    queue_delete_all(sm.stub)
    interrupted = False

    def log(line: str) -> None:
        nonlocal interrupted
        if line.endswith(f"{NAME}: Creating") and not interrupted:
            interrupted = True
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        deploy(
            sm.client,
            settings,
            smoke=SmokeSpy(PASSED),
            waiter_config=FAST_WAITER,
            delete_waiter_config=FAST_WAITER,
            log=log,
        )


def ready_probe() -> dict[str, Any]:
    return {"EndpointName": NAME, "ContentType": "application/json", "Accept": "application/json",
            "CustomAttributes": "route=/ready", "Body": b"{}"}  # fmt: skip


def queue_ready(runtime: Stubbed, ready: dict[str, Any]) -> None:
    body = json.dumps(ready).encode()
    runtime.stub.add_response("invoke_endpoint", {"Body": StreamingBody(io.BytesIO(body), len(body))}, ready_probe())


def test_autoscaling_is_registered_after_in_service_and_before_the_smoke_test(
    sm: Stubbed, autoscaling: Stubbed, runtime: Stubbed, settings: DeploySettings
) -> None:
    scaling = AutoscalingSettings(min_instances=1, max_instances=3)
    settings = dataclasses.replace(settings, keep_endpoint=True, autoscaling=scaling)
    queue_creates(sm, settings)
    queue_in_service(sm)
    queue_ready(runtime, {"status": "ready", "capacity": {"streams": 14, "source": "measured"}})
    autoscaling.stub.add_response("register_scalable_target", {}, register_scalable_target_request(NAME, scaling))
    autoscaling.stub.add_response(
        "put_scaling_policy",
        {"PolicyARN": "arn:aws:autoscaling:us-west-2:210987654321:scalingPolicy:1:resource/sagemaker/x"},
        put_scaling_policy_request(NAME, 9.8),  # 70 % of the 14 streams the image reports
    )

    def smoke(name: str) -> SmokeResult:
        autoscaling.stub.assert_no_pending_responses()  # scaling is in place before traffic arrives
        return PASSED

    lines: list[str] = []
    result = deploy(
        sm.client,
        settings,
        smoke=smoke,
        waiter_config=FAST_WAITER,
        autoscaling_client=autoscaling.client,
        runtime_client=runtime.client,
        log=lines.append,
    )

    assert result.kept
    assert "the image reports 14 stream(s) per instance (measured); scaling target 70% of that = 9.8" in lines
    assert any("target 9.8 concurrent requests (open streams) per instance" in line for line in lines)


def test_an_explicit_target_streams_skips_the_capacity_probe(
    sm: Stubbed, autoscaling: Stubbed, settings: DeploySettings
) -> None:
    scaling = AutoscalingSettings(min_instances=2, max_instances=4, target_streams=6.0)
    settings = dataclasses.replace(settings, keep_endpoint=True, autoscaling=scaling)
    queue_creates(sm, settings)
    queue_in_service(sm)
    autoscaling.stub.add_response("register_scalable_target", {}, register_scalable_target_request(NAME, scaling))
    autoscaling.stub.add_response("put_scaling_policy", {"PolicyARN": "arn:x"}, put_scaling_policy_request(NAME, 6.0))

    result = deploy(sm.client, settings, smoke=SmokeSpy(PASSED), waiter_config=FAST_WAITER,
                    autoscaling_client=autoscaling.client, log=lambda _: None)  # fmt: skip

    assert result.kept


def test_an_image_that_reports_no_capacity_fails_the_deploy_and_cleans_up_before_scaling(
    sm: Stubbed, autoscaling: Stubbed, runtime: Stubbed, settings: DeploySettings
) -> None:
    settings = dataclasses.replace(settings, autoscaling=AutoscalingSettings(1, 2))
    queue_creates(sm, settings)
    queue_in_service(sm)
    runtime.stub.add_client_error(
        "invoke_endpoint", service_error_code="ModelError", service_message="Received client error (404)",
        http_status_code=424, expected_params=ready_probe(),
    )  # fmt: skip
    queue_delete_all(sm.stub)  # nothing was registered, so nothing is deregistered
    smoke = SmokeSpy(PASSED)

    result = deploy(sm.client, settings, smoke=smoke, waiter_config=FAST_WAITER, delete_waiter_config=FAST_WAITER,
                    autoscaling_client=autoscaling.client, runtime_client=runtime.client,
                    log=lambda _: None)  # fmt: skip

    assert not result.ok and "pass --target-streams" in result.reason
    assert smoke.calls == []
    assert result.cleanup is not None and result.cleanup.ok


def test_cleanup_deregisters_autoscaling_before_deleting_the_endpoint(
    sm: Stubbed, autoscaling: Stubbed, settings: DeploySettings
) -> None:
    scaling = AutoscalingSettings(min_instances=1, max_instances=2, target_streams=10.0)
    settings = dataclasses.replace(settings, autoscaling=scaling)
    queue_creates(sm, settings)
    queue_in_service(sm)
    autoscaling.stub.add_response("register_scalable_target", {}, register_scalable_target_request(NAME, scaling))
    autoscaling.stub.add_response(
        "put_scaling_policy",
        {"PolicyARN": "arn:aws:autoscaling:us-west-2:210987654321:scalingPolicy:1:resource/sagemaker/x"},
        put_scaling_policy_request(NAME, 10.0),
    )
    autoscaling.stub.add_response("deregister_scalable_target", {}, deregister_scalable_target_request(NAME))
    queue_delete_all(sm.stub)

    result = deploy(
        sm.client,
        settings,
        smoke=SmokeSpy(FAILED),
        waiter_config=FAST_WAITER,
        delete_waiter_config=FAST_WAITER,
        autoscaling_client=autoscaling.client,
        log=lambda _: None,
    )

    assert result.cleanup is not None and result.cleanup.ok


def test_autoscaling_without_a_client_is_refused_before_any_call(sm: Stubbed, settings: DeploySettings) -> None:
    settings = dataclasses.replace(settings, autoscaling=AutoscalingSettings(1, 2, 10.0))

    with pytest.raises(ValueError, match="autoscaling_client"):
        deploy(sm.client, settings, smoke=SmokeSpy(PASSED), log=lambda _: None)


def test_a_derived_target_without_a_runtime_client_or_an_unresolved_image_is_refused_before_any_call(
    sm: Stubbed, autoscaling: Stubbed, settings: DeploySettings
) -> None:
    derived = dataclasses.replace(settings, autoscaling=AutoscalingSettings(1, 2))
    with pytest.raises(ValueError, match="runtime_client"):
        deploy(sm.client, derived, smoke=SmokeSpy(PASSED), autoscaling_client=autoscaling.client, log=print)
    with pytest.raises(ValueError, match="image_uri"):
        deploy(sm.client, dataclasses.replace(settings, image_uri=""), smoke=SmokeSpy(PASSED), log=print)
