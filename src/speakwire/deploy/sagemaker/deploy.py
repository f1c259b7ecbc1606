"""Create a SageMaker endpoint, prove it speaks, then keep it or clean up everything.

The order is the AWS sample's — model, endpoint config, endpoint, wait for InService,
report the pool that landed, autoscaling (its target a share of the capacity the image
reports, read through ``/invocations``), smoke test — with one rule added: nothing this run created
outlives it unless the user asked to keep the endpoint *and* the smoke test passed. A
failed waiter, a failed smoke test, any exception after the model exists, and Ctrl-C
during the 5–20 minute wait all lead to the same cleanup, limited to what was created.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ReadTimeoutError,
    WaiterError,
)

from speakwire.deploy.sagemaker.aws_errors import error_message, is_not_found
from speakwire.deploy.sagemaker.capacity_probe import CapacityProbeError, reported_capacity
from speakwire.deploy.sagemaker.delete import DeleteResult, Resource, delete
from speakwire.deploy.sagemaker.progress import report_endpoint_polls
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
from speakwire.deploy.sagemaker.status import landed_instance_type

DEFAULT_WAITER_CONFIG: Mapping[str, int] = {"Delay": 30, "MaxAttempts": 80}  # up to 40 minutes

_MAYBE_SENT = (ReadTimeoutError, ConnectionClosedError, KeyboardInterrupt)

Log = Callable[[str], None]
Smoke = Callable[[str], SmokeResult]


@dataclass(frozen=True, slots=True)
class DeployResult:
    """How a deployment ended.

    ``ok`` means InService and a passed smoke test; ``kept`` that the endpoint is still
    running; ``cleanup`` lists the deletions when it was not kept.
    """

    endpoint_name: str
    ok: bool
    kept: bool
    reason: str = ""
    instance_type: str | None = None
    smoke: SmokeResult | None = None
    cleanup: DeleteResult | None = None


def deploy(
    sm_client: Any,
    settings: DeploySettings,
    *,
    smoke: Smoke,
    waiter_config: Mapping[str, int] | None = None,
    delete_waiter_config: Mapping[str, int] | None = None,
    autoscaling_client: Any = None,
    runtime_client: Any = None,
    log: Log = print,
) -> DeployResult:
    """Deploy, smoke-test, and keep or delete the endpoint.

    Args:
        sm_client: A boto3 SageMaker client in ``settings.region``.
        settings: Validated settings (see :func:`~speakwire.deploy.sagemaker.settings.build_settings`).
        smoke: Called with the endpoint name once it is InService; returns a :class:`SmokeResult`.
            An exception from it counts as a failed smoke test.
        waiter_config: ``WaiterConfig`` for ``endpoint_in_service`` (default Delay 30, MaxAttempts 80).
        delete_waiter_config: ``WaiterConfig`` for ``endpoint_deleted`` during cleanup.
        autoscaling_client: A boto3 ``application-autoscaling`` client; required when
            ``settings.autoscaling`` is set.
        runtime_client: A boto3 ``sagemaker-runtime`` client; required when the autoscaling
            target is to be derived from the capacity the image reports (no ``target_streams``).
        log: Where progress goes.

    Returns:
        A :class:`DeployResult`. A failed waiter or smoke test is a result, not an exception.

    Raises:
        ValueError: Autoscaling asked for without the clients it needs, or the image is not
            resolved yet (before any call).
        botocore.exceptions.ClientError: A create call failed; whatever was created before
            it has been deleted first.
    """
    if settings.autoscaling is not None and autoscaling_client is None:
        raise ValueError("settings.autoscaling is set but no autoscaling_client was given")
    if settings.autoscaling is not None and settings.autoscaling.target_streams is None and runtime_client is None:
        raise ValueError("the autoscaling target comes from the image's capacity, but no runtime_client was given")
    if not settings.image_uri:
        raise ValueError("settings.image_uri is not resolved; find or build speakwire's image first")
    name = settings.endpoint_name
    created: list[Resource] = []
    scaling_registered = False

    def clean_up(reason: str) -> DeleteResult:
        log(f"cleaning up ({reason})")
        if scaling_registered:
            _deregister_scaling(autoscaling_client, name, log)
        return delete(sm_client, name, waiter_config=delete_waiter_config, log=log, resources=tuple(created))

    def create(resource: Resource, call: Callable[[], object]) -> None:
        try:
            call()
        except _MAYBE_SENT:
            # The request may have reached SageMaker without its answer reaching us: the
            # resource may exist, so clean it up too ("not found" is fine). Any other error
            # (a refusal, no credentials, no connection) means it was not created.
            created.append(resource)
            raise
        created.append(resource)
        log(f"created {resource} {name}")

    _log_plan(settings, log)
    try:
        create("model", lambda: sm_client.create_model(**create_model_request(settings)))
        create(
            "endpoint config",
            lambda: sm_client.create_endpoint_config(**create_endpoint_config_request(settings)),
        )
        create("endpoint", lambda: sm_client.create_endpoint(**create_endpoint_request(settings)))
        log(f"waiting for endpoint {name} to be InService (typically 5–20 minutes)")

        try:
            with report_endpoint_polls(sm_client, name, log):
                sm_client.get_waiter("endpoint_in_service").wait(
                    EndpointName=name, WaiterConfig=dict(waiter_config or DEFAULT_WAITER_CONFIG)
                )
        except WaiterError as exc:
            last = exc.last_response or {}
            why = last.get("FailureReason") or error_message(exc)
            reason = f"endpoint did not reach InService: {why}"
            return DeployResult(name, ok=False, kept=False, reason=reason, cleanup=clean_up(reason))

        instance_type = landed_instance_type(sm_client.describe_endpoint(EndpointName=name))
        log(f"endpoint {name} is InService on {instance_type or 'an unreported instance type'}")

        if settings.autoscaling is not None:
            try:
                target = _scaling_target(settings.autoscaling, runtime_client, name, log)
            except CapacityProbeError as exc:
                reason = f"autoscaling needs a target: {exc}; pass --target-streams"
                return DeployResult(name, ok=False, kept=False, reason=reason, instance_type=instance_type,
                                    cleanup=clean_up(reason))  # fmt: skip
            autoscaling_client.register_scalable_target(**register_scalable_target_request(name, settings.autoscaling))
            scaling_registered = True
            autoscaling_client.put_scaling_policy(**put_scaling_policy_request(name, target))
            log(
                f"autoscaling: {settings.autoscaling.min_instances}–{settings.autoscaling.max_instances} "
                f"instances, target {target:g} concurrent requests (open streams) per instance"
            )

        log("running the smoke test")
        try:
            result = smoke(name)
        except Exception as exc:  # a smoke test that crashes has failed, and must not leak the endpoint
            result = SmokeResult(ok=False, reason=f"{type(exc).__name__}: {exc}", pcm_bytes=0, sample_rate=0)
        log(result.summary())
    except BaseException as exc:
        # Includes KeyboardInterrupt during the long wait: the endpoint bills until deleted.
        if created:
            clean_up(f"{type(exc).__name__}: {exc}")
        raise

    if not result.ok or not settings.keep_endpoint:
        reason = f"smoke test failed: {result.reason}" if not result.ok else "--keep-endpoint not given"
        return DeployResult(name, result.ok, False, reason, instance_type, smoke=result, cleanup=clean_up(reason))
    _log_kept(settings, instance_type, log)
    return DeployResult(name, ok=True, kept=True, instance_type=instance_type, smoke=result)


def _scaling_target(autoscaling: AutoscalingSettings, runtime_client: Any, name: str, log: Log) -> float:
    """The explicit target, or the configured share of the capacity the running image reports in /ready."""
    if autoscaling.target_streams is not None:
        return autoscaling.target_streams
    capacity = reported_capacity(runtime_client, name)
    target = autoscaling.target_for(capacity.streams)
    log(
        f"the image reports {capacity.streams} stream(s) per instance ({capacity.source}); "
        f"scaling target {autoscaling.target_share:.0%} of that = {target:g}"
    )
    return target


def _deregister_scaling(autoscaling_client: Any, name: str, log: Log) -> None:
    # Deleting an endpoint deregisters its scalable target only when the caller may call
    # DeregisterScalableTarget; doing it explicitly reports a missing permission here.
    try:
        autoscaling_client.deregister_scalable_target(**deregister_scalable_target_request(name))
        log(f"autoscaling target for {name}: deregistered")
    except ClientError as exc:
        if not is_not_found(exc):
            log(f"autoscaling target for {name}: could not deregister ({error_message(exc)})")
    except BotoCoreError as exc:
        log(f"autoscaling target for {name}: could not deregister ({exc})")


def _log_plan(settings: DeploySettings, log: Log) -> None:
    log(f"deploying {settings.endpoint_name} in {settings.region}")
    log(f"  image: {settings.image_uri} ({settings.image})")
    log(f"  engine: {settings.engine}" + (f", model {settings.model_id}" if settings.model_id else ", embedded voice"))
    if settings.ami_version:
        log(f"  inference AMI: {settings.ami_version}")
    log("  instance pools (priority order, one instance in total): " + ", ".join(settings.instance_types))
    log("  billing starts now and lasts until the endpoint is deleted")


def _log_kept(settings: DeploySettings, instance_type: str | None, log: Log) -> None:
    name, region = settings.endpoint_name, settings.region
    running_on = instance_type or "an unreported instance type"
    log(f"endpoint {name} kept, running on {running_on} — it bills by the hour until deleted")
    log("  stream:  " + f"speakwire sagemaker smoke --endpoint-name {name} --region {region}")
    log(
        "  invoke:  "
        + f"speakwire sagemaker invoke --endpoint-name {name} --region {region} "
        + "--text 'Hello.' --output hello.wav"
    )
    log("  status:  " + f"speakwire sagemaker status --endpoint-name {name} --region {region}")
    log("  delete:  " + f"speakwire sagemaker delete --endpoint-name {name} --region {region}")
