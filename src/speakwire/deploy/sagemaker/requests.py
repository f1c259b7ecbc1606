"""The exact SageMaker and Application Auto Scaling request dicts for a deployment.

Pure functions of :class:`~speakwire.deploy.sagemaker.settings.DeploySettings`, so the
requests can be read, printed and asserted without a client. The shapes follow the AWS
sample that introduced instance pools; the traps it documents are kept in comments.
"""

from __future__ import annotations

from typing import Any

from speakwire.deploy.sagemaker.settings import (
    GPU_MEMORY_ENV,
    MODEL_ENV,
    AutoscalingSettings,
    DeploySettings,
)

VARIANT_NAME = "AllTraffic"
SERVICE_NAMESPACE = "sagemaker"
SCALABLE_DIMENSION = "sagemaker:variant:DesiredInstanceCount"
# Requests in flight per model container, sampled every 10 s: an open stream counts until its
# last byte, so this tracks open streams, which is what a speakwire instance's capacity limits
# (invocations per minute would count a 30-second stream and a 1-second one the same).
SCALING_METRIC = "SageMakerVariantConcurrentRequestsPerModelHighResolution"
# GPU instances take minutes to provision and the model minutes to warm up: scale out no
# more than every 5 minutes and scale in slowly, so a burst does not thrash capacity.
SCALE_OUT_COOLDOWN_S = 300
SCALE_IN_COOLDOWN_S = 600

Request = dict[str, Any]


def container_environment(settings: DeploySettings) -> dict[str, str]:
    """The container's environment: ``SM_VLLM_MODEL`` (Qwen3), GPU memory when set, the voice library
    (``SPEAKWIRE_VOICES_URL`` and its bucket's owner, once checked), then ``--env`` extras.

    The vLLM-Omni DLC turns every ``SM_VLLM_*`` variable into a ``vllm serve`` flag;
    speakwire's image reads ``SM_VLLM_MODEL`` the same way and its own ``SPEAKWIRE_*``
    variables, so one environment serves either image. Piper gets no ``SM_VLLM_MODEL``:
    speakwire would take it as a Qwen3 model to load.
    """
    environment: dict[str, str] = {}
    if settings.model_id is not None:
        environment[MODEL_ENV] = settings.model_id
    if settings.gpu_memory_utilization is not None:
        environment[GPU_MEMORY_ENV] = f"{settings.gpu_memory_utilization:g}"
    environment.update(settings.voices_environment)
    environment.update(settings.extra_environment)
    return environment


def create_model_request(settings: DeploySettings) -> Request:
    """``CreateModel``: one container, the image and its environment, and the execution role.

    Raises:
        ValueError: The image is not resolved yet (speakwire's image before it is found or built).
    """
    if not settings.image_uri:
        raise ValueError("the image URI is not resolved yet; find or build speakwire's image first")
    return {
        "ModelName": settings.endpoint_name,
        "PrimaryContainer": {
            "Image": settings.image_uri,
            "Environment": container_environment(settings),
        },
        "ExecutionRoleArn": settings.role_arn,
    }


def create_endpoint_config_request(settings: DeploySettings) -> Request:
    """``CreateEndpointConfig`` with instance pools in priority order.

    ``InstancePools`` replaces ``InstanceType`` (giving both is rejected); Priority 1 is
    tried first and the next pool only on insufficient capacity. One instance is
    provisioned in total, not one per pool. Needs botocore ≥ 1.43.1: older models reject
    ``InstancePools`` client-side. ``InferenceAmiVersion`` only when set: the inference
    AMIs are GPU images (their driver is what the bidirectional stream needs on GPUs), and
    CPU variants run on SageMaker's default host image.
    """
    variant: Request = {
        "VariantName": VARIANT_NAME,
        "ModelName": settings.endpoint_name,
        "InitialInstanceCount": 1,
        "InstancePools": [
            {"InstanceType": instance_type, "Priority": priority}
            for priority, instance_type in enumerate(settings.instance_types, start=1)
        ],
        "VariantInstanceProvisionTimeoutInSeconds": settings.provision_timeout_s,
    }
    if settings.ami_version is not None:
        variant["InferenceAmiVersion"] = settings.ami_version
    return {"EndpointConfigName": settings.endpoint_name, "ProductionVariants": [variant]}


def create_endpoint_request(settings: DeploySettings) -> Request:
    """``CreateEndpoint``: the endpoint takes the config of the same name."""
    return {"EndpointName": settings.endpoint_name, "EndpointConfigName": settings.endpoint_name}


def scalable_resource_id(endpoint_name: str) -> str:
    """Application Auto Scaling's id for the variant: ``endpoint/NAME/variant/AllTraffic``."""
    return f"endpoint/{endpoint_name}/variant/{VARIANT_NAME}"


def scaling_policy_name(endpoint_name: str) -> str:
    """One target-tracking policy per endpoint, named after it so it is easy to find."""
    return f"{endpoint_name}-concurrent-streams"


def register_scalable_target_request(endpoint_name: str, autoscaling: AutoscalingSettings) -> Request:
    """``RegisterScalableTarget`` on the variant's desired instance count."""
    return {
        "ServiceNamespace": SERVICE_NAMESPACE,
        "ResourceId": scalable_resource_id(endpoint_name),
        "ScalableDimension": SCALABLE_DIMENSION,
        "MinCapacity": autoscaling.min_instances,
        "MaxCapacity": autoscaling.max_instances,
    }


def put_scaling_policy_request(endpoint_name: str, target_value: float) -> Request:
    """``PutScalingPolicy``: target tracking on concurrent requests per model container.

    ``target_value`` comes from :meth:`AutoscalingSettings.target_for` (the explicit
    ``--target-streams``, or a share of the capacity the running image reports).
    """
    return {
        "PolicyName": scaling_policy_name(endpoint_name),
        "ServiceNamespace": SERVICE_NAMESPACE,
        "ResourceId": scalable_resource_id(endpoint_name),
        "ScalableDimension": SCALABLE_DIMENSION,
        "PolicyType": "TargetTrackingScaling",
        "TargetTrackingScalingPolicyConfiguration": {
            "TargetValue": target_value,
            "PredefinedMetricSpecification": {"PredefinedMetricType": SCALING_METRIC},
            "ScaleOutCooldown": SCALE_OUT_COOLDOWN_S,
            "ScaleInCooldown": SCALE_IN_COOLDOWN_S,
        },
    }


def deregister_scalable_target_request(endpoint_name: str) -> Request:
    """``DeregisterScalableTarget``; it also deletes the target's scaling policies."""
    return {
        "ServiceNamespace": SERVICE_NAMESPACE,
        "ResourceId": scalable_resource_id(endpoint_name),
        "ScalableDimension": SCALABLE_DIMENSION,
    }
