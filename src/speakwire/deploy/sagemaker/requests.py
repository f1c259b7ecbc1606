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
SCALING_METRIC = "SageMakerVariantInvocationsPerInstance"
# GPU instances take minutes to provision and the model minutes to warm up: scale out no
# more than every 5 minutes and scale in slowly, so a burst does not thrash capacity.
SCALE_OUT_COOLDOWN_S = 300
SCALE_IN_COOLDOWN_S = 600

Request = dict[str, Any]


def container_environment(settings: DeploySettings) -> dict[str, str]:
    """The container's environment: ``SM_VLLM_MODEL`` always, GPU memory when set, then ``--env`` extras.

    The vLLM-Omni DLC turns every ``SM_VLLM_*`` variable into a ``vllm serve`` flag;
    speakwire's image reads ``SM_VLLM_MODEL`` the same way and its own ``SPEAKWIRE_*``
    variables, so one environment serves either image.
    """
    environment = {MODEL_ENV: settings.model_id}
    if settings.gpu_memory_utilization is not None:
        environment[GPU_MEMORY_ENV] = f"{settings.gpu_memory_utilization:g}"
    environment.update(settings.extra_environment)
    return environment


def create_model_request(settings: DeploySettings) -> Request:
    """``CreateModel``: one container, the image and its environment, and the execution role."""
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
    ``InstancePools`` client-side.
    """
    return {
        "EndpointConfigName": settings.endpoint_name,
        "ProductionVariants": [
            {
                "VariantName": VARIANT_NAME,
                "ModelName": settings.endpoint_name,
                "InitialInstanceCount": 1,
                "InstancePools": [
                    {"InstanceType": instance_type, "Priority": priority}
                    for priority, instance_type in enumerate(settings.instance_types, start=1)
                ],
                "VariantInstanceProvisionTimeoutInSeconds": settings.provision_timeout_s,
                "InferenceAmiVersion": settings.ami_version,
            }
        ],
    }


def create_endpoint_request(settings: DeploySettings) -> Request:
    """``CreateEndpoint``: the endpoint takes the config of the same name."""
    return {"EndpointName": settings.endpoint_name, "EndpointConfigName": settings.endpoint_name}


def scalable_resource_id(endpoint_name: str) -> str:
    """Application Auto Scaling's id for the variant: ``endpoint/NAME/variant/AllTraffic``."""
    return f"endpoint/{endpoint_name}/variant/{VARIANT_NAME}"


def scaling_policy_name(endpoint_name: str) -> str:
    """One target-tracking policy per endpoint, named after it so it is easy to find."""
    return f"{endpoint_name}-invocations-per-instance"


def register_scalable_target_request(endpoint_name: str, autoscaling: AutoscalingSettings) -> Request:
    """``RegisterScalableTarget`` on the variant's desired instance count."""
    return {
        "ServiceNamespace": SERVICE_NAMESPACE,
        "ResourceId": scalable_resource_id(endpoint_name),
        "ScalableDimension": SCALABLE_DIMENSION,
        "MinCapacity": autoscaling.min_instances,
        "MaxCapacity": autoscaling.max_instances,
    }


def put_scaling_policy_request(endpoint_name: str, autoscaling: AutoscalingSettings) -> Request:
    """``PutScalingPolicy``: target tracking on invocations per instance (per minute)."""
    return {
        "PolicyName": scaling_policy_name(endpoint_name),
        "ServiceNamespace": SERVICE_NAMESPACE,
        "ResourceId": scalable_resource_id(endpoint_name),
        "ScalableDimension": SCALABLE_DIMENSION,
        "PolicyType": "TargetTrackingScaling",
        "TargetTrackingScalingPolicyConfiguration": {
            "TargetValue": autoscaling.target_invocations_per_instance,
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
