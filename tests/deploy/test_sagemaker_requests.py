"""The request dicts: exact shapes, and accepted by the real service models."""

from __future__ import annotations

import dataclasses
from typing import Any

import botocore
import botocore.session
import pytest
from botocore.validate import validate_parameters
from sagemaker_stubs import NAME, REGION, ROLE

from speakwire.deploy.sagemaker.requests import (
    container_environment,
    create_endpoint_config_request,
    create_endpoint_request,
    create_model_request,
    deregister_scalable_target_request,
    put_scaling_policy_request,
    register_scalable_target_request,
)
from speakwire.deploy.sagemaker.settings import AutoscalingSettings, DeploySettings

DLC = f"763104351884.dkr.ecr.{REGION}.amazonaws.com/vllm:omni-sagemaker-cuda-v1.5"


def _validate(service: str, operation: str, request: dict[str, Any]) -> None:
    model = botocore.session.get_session().get_service_model(service)
    validate_parameters(request, model.operation_model(operation).input_shape)


def test_create_model_request_passes_the_model_id_as_sm_vllm_model(settings: DeploySettings) -> None:
    request = create_model_request(settings)

    assert request == {
        "ModelName": NAME,
        "PrimaryContainer": {
            "Image": DLC,
            "Environment": {"SM_VLLM_MODEL": "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"},
        },
        "ExecutionRoleArn": ROLE,
    }
    _validate("sagemaker", "CreateModel", request)


def test_container_environment_adds_gpu_memory_and_speakwire_variables_when_given() -> None:
    settings = DeploySettings(
        endpoint_name=NAME,
        region=REGION,
        role_arn=ROLE,
        image_uri="123.dkr.ecr.us-west-2.amazonaws.com/speakwire:cuda",
        gpu_memory_utilization=0.45,
        extra_environment={"SPEAKWIRE_MAX_STREAMS": "8", "SM_VLLM_MAX_NUM_SEQS": "4"},
    )

    assert container_environment(settings) == {
        "SM_VLLM_MODEL": "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice",
        "SM_VLLM_GPU_MEMORY_UTILIZATION": "0.45",
        "SPEAKWIRE_MAX_STREAMS": "8",
        "SM_VLLM_MAX_NUM_SEQS": "4",
    }


def test_endpoint_config_lists_instance_pools_in_priority_order_without_an_instance_type() -> None:
    settings = DeploySettings(
        endpoint_name=NAME,
        region=REGION,
        role_arn=ROLE,
        image_uri=DLC,
        instance_types=("ml.g6.xlarge", "ml.g6e.xlarge", "ml.g5.xlarge", "ml.g4dn.xlarge"),
    )

    request = create_endpoint_config_request(settings)

    assert request == {
        "EndpointConfigName": NAME,
        "ProductionVariants": [
            {
                "VariantName": "AllTraffic",
                "ModelName": NAME,
                "InitialInstanceCount": 1,
                "InstancePools": [
                    {"InstanceType": "ml.g6.xlarge", "Priority": 1},
                    {"InstanceType": "ml.g6e.xlarge", "Priority": 2},
                    {"InstanceType": "ml.g5.xlarge", "Priority": 3},
                    {"InstanceType": "ml.g4dn.xlarge", "Priority": 4},
                ],
                "VariantInstanceProvisionTimeoutInSeconds": 1200,
                "InferenceAmiVersion": "al2023-ami-sagemaker-inference-gpu-4-1",
            }
        ],
    }
    assert "InstanceType" not in request["ProductionVariants"][0]
    _validate("sagemaker", "CreateEndpointConfig", request)


def test_create_endpoint_request_uses_the_config_of_the_same_name(settings: DeploySettings) -> None:
    request = create_endpoint_request(settings)

    assert request == {"EndpointName": NAME, "EndpointConfigName": NAME}
    _validate("sagemaker", "CreateEndpoint", request)


def test_autoscaling_requests_target_the_variant_desired_instance_count() -> None:
    scaling = AutoscalingSettings(min_instances=1, max_instances=3)

    register = register_scalable_target_request(NAME, scaling)
    policy = put_scaling_policy_request(NAME, 9.8)
    deregister = deregister_scalable_target_request(NAME)

    assert register == {
        "ServiceNamespace": "sagemaker",
        "ResourceId": f"endpoint/{NAME}/variant/AllTraffic",
        "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
        "MinCapacity": 1,
        "MaxCapacity": 3,
    }
    assert policy["PolicyType"] == "TargetTrackingScaling"
    assert policy["ResourceId"] == f"endpoint/{NAME}/variant/AllTraffic"
    assert policy["PolicyName"] == f"{NAME}-concurrent-streams"
    assert policy["TargetTrackingScalingPolicyConfiguration"]["TargetValue"] == 9.8
    assert policy["TargetTrackingScalingPolicyConfiguration"]["PredefinedMetricSpecification"] == {
        "PredefinedMetricType": "SageMakerVariantConcurrentRequestsPerModelHighResolution"
    }
    assert deregister == {
        "ServiceNamespace": "sagemaker",
        "ResourceId": f"endpoint/{NAME}/variant/AllTraffic",
        "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
    }
    for operation, request in (
        ("RegisterScalableTarget", register),
        ("PutScalingPolicy", policy),
        ("DeregisterScalableTarget", deregister),
    ):
        _validate("application-autoscaling", operation, request)


def test_installed_botocore_knows_instance_pools() -> None:
    # botocore before 1.43.1 rejects InstancePools client-side; the [sagemaker] extra pins above it.
    shape = botocore.session.get_session().get_service_model("sagemaker").shape_for("ProductionVariant")

    assert "InstancePools" in shape.members, f"botocore {botocore.__version__} predates instance pools"


def test_a_piper_variant_names_no_model_and_no_inference_ami(settings: DeploySettings) -> None:
    piper = dataclasses.replace(
        settings, engine="piper", model_id=None, ami_version=None, instance_types=("ml.c7i.xlarge", "ml.m7i.xlarge")
    )

    model = create_model_request(piper)
    config = create_endpoint_config_request(piper)

    assert model["PrimaryContainer"]["Environment"] == {}
    assert "InferenceAmiVersion" not in config["ProductionVariants"][0]
    assert config["ProductionVariants"][0]["InstancePools"] == [
        {"InstanceType": "ml.c7i.xlarge", "Priority": 1},
        {"InstanceType": "ml.m7i.xlarge", "Priority": 2},
    ]
    _validate("sagemaker", "CreateModel", model)
    _validate("sagemaker", "CreateEndpointConfig", config)


def test_an_unresolved_image_never_reaches_create_model(settings: DeploySettings) -> None:
    with pytest.raises(ValueError, match="not resolved"):
        create_model_request(dataclasses.replace(settings, image_uri=""))


def test_the_default_target_is_a_share_of_the_reported_capacity() -> None:
    assert AutoscalingSettings(1, 4).target_for(14) == 9.8
    assert AutoscalingSettings(1, 4, target_share=0.5).target_for(1) == 1.0  # never below one stream
    assert AutoscalingSettings(1, 4, target_streams=3.0).target_for(None) == 3.0
    with pytest.raises(ValueError, match="--target-streams"):
        AutoscalingSettings(1, 4).target_for(None)
