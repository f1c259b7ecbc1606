"""Deploy options are resolved and validated offline, before any AWS call."""

from __future__ import annotations

from typing import Any

import pytest
from sagemaker_stubs import ROLE

from speakwire.deploy.sagemaker.settings import (
    AutoscalingSettings,
    DeploySettings,
    DeploySettingsError,
    build_settings,
    parse_env_assignments,
    validate_instance_types,
    validate_role_arn,
)


def _build(**overrides: Any) -> DeploySettings:
    options: dict[str, Any] = {"role_arn": ROLE, "environ": {}, "now": lambda: 1_764_400_000.0}
    options.update(overrides)
    return build_settings(**options)


def test_defaults_follow_the_aws_sample_with_our_own_image() -> None:
    settings = build_settings(role_arn=ROLE, environ={}, now=lambda: 1_764_400_000.9)

    assert settings.endpoint_name == "speakwire-1764400000"
    assert settings.region == "us-east-1"
    assert (settings.image, settings.image_uri, settings.engine, settings.variant) == ("speakwire", "", "qwen3", "cuda")
    assert settings.instance_types == ("ml.g6.xlarge", "ml.g6e.xlarge", "ml.g5.xlarge", "ml.g4dn.xlarge")
    assert settings.model_id == "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"
    assert settings.provision_timeout_s == 1200
    assert settings.ami_version == "al2023-ami-sagemaker-inference-gpu-4-1"
    assert settings.keep_endpoint is False
    assert settings.autoscaling is None


def test_region_comes_from_aws_region_and_picks_the_dlc_of_that_region() -> None:
    settings = build_settings(role_arn=ROLE, image="dlc", environ={"AWS_REGION": "eu-west-1"})

    assert settings.region == "eu-west-1"
    assert settings.image_uri.startswith("763104351884.dkr.ecr.eu-west-1.amazonaws.com/")


def test_explicit_region_and_image_win_over_the_environment() -> None:
    settings = build_settings(
        role_arn=ROLE,
        region="ap-northeast-1",
        image_uri="111122223333.dkr.ecr.ap-northeast-1.amazonaws.com/speakwire:cuda",
        environ={"AWS_REGION": "eu-west-1", "VLLM_OMNI_IMAGE_URI": "elsewhere/image:tag"},
    )

    assert settings.region == "ap-northeast-1"
    assert settings.image_uri == "111122223333.dkr.ecr.ap-northeast-1.amazonaws.com/speakwire:cuda"


def test_the_sample_image_variable_is_honoured_without_image_uri() -> None:
    settings = build_settings(role_arn=ROLE, image="dlc", environ={"VLLM_OMNI_IMAGE_URI": "mirror.example/vllm:omni"})

    assert settings.image_uri == "mirror.example/vllm:omni"
    assert build_settings(role_arn=ROLE, environ={"VLLM_OMNI_IMAGE_URI": "mirror.example/x"}).image_uri == ""


def test_piper_goes_to_the_cpu_pools_with_no_model_and_no_inference_ami() -> None:
    settings = _build(engine="piper")

    assert settings.variant == "cpu"
    assert settings.instance_types == (
        "ml.c7i.xlarge", "ml.m7i.xlarge", "ml.c6i.xlarge", "ml.m6i.xlarge", "ml.c5.xlarge"
    )  # fmt: skip
    assert settings.model_id is None and settings.ami_version is None
    assert _build(engine="piper", ami_version="custom-ami").ami_version == "custom-ami"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"engine": "piper", "model_id": "Qwen/x"}, "--model-id is a Qwen3 model"),
        ({"engine": "piper", "gpu_memory_utilization": 0.5}, "not Piper"),
        ({"engine": "piper", "image": "dlc"}, "Qwen3-TTS only"),
        ({"engine": "qwen3", "instance_types": ["ml.g6.xlarge", "ml.c7i.xlarge"]}, "ml.c7i.xlarge has none"),
        ({"engine": "kokoro"}, "unknown engine"),
        ({"image": "docker"}, "unknown image"),
        ({"image": "dlc", "max_instances": 2}, "DLC reports no stream capacity"),
        ({"max_instances": 2, "target_share": 1.5}, r"\(0, 1\]"),
    ],
)
def test_an_engine_image_or_pool_that_cannot_work_is_rejected(options: dict[str, object], message: str) -> None:
    with pytest.raises(DeploySettingsError, match=message):
        _build(**options)


def test_an_image_uri_wins_over_the_image_choice_and_keeps_the_engine() -> None:
    settings = _build(image="dlc", image_uri="111122223333.dkr.ecr.us-east-1.amazonaws.com/speakwire:cpu-1",
                      engine="piper")  # fmt: skip

    assert (settings.image, settings.engine) == ("uri", "piper")
    assert settings.with_image("x/y:z").image_uri == "x/y:z"


def test_role_is_read_from_the_environment_when_not_given() -> None:
    settings = build_settings(environ={"SAGEMAKER_EXECUTION_ROLE_ARN": ROLE})

    assert settings.role_arn == ROLE


def test_a_missing_role_names_both_ways_to_give_one() -> None:
    with pytest.raises(DeploySettingsError, match=r"--role or set SAGEMAKER_EXECUTION_ROLE_ARN"):
        build_settings(environ={})


@pytest.mark.parametrize(
    "role",
    [
        "arn:aws:iam::123456789012:role/SageMakerRole",
        "arn:aws:iam::<ACCOUNT_ID>:role/SageMakerRole",
        "arn:aws:iam::ACCOUNT_ID:role/SageMakerRole",
        "arn:aws:iam::xxxxxxxxxxxx:role/SageMakerRole",
        "arn:aws:iam::210987654321:role/YOUR_ROLE_NAME",
        "arn:aws:iam::210987654321:role/<role-name>",
        "arn:aws:iam::000000000000:role/SageMakerRole",
    ],
)
def test_placeholder_roles_are_rejected(role: str) -> None:
    with pytest.raises(DeploySettingsError, match="placeholder"):
        validate_role_arn(role)


@pytest.mark.parametrize(
    "role",
    [
        "arn:aws:iam::21098765432:role/TooFewDigits",
        "arn:aws:iam::210987654321:user/NotARole",
        "SageMakerRole",
    ],
)
def test_strings_that_are_not_role_arns_are_rejected(role: str) -> None:
    with pytest.raises(DeploySettingsError, match="not an IAM role ARN"):
        validate_role_arn(role)


def test_real_looking_roles_with_paths_and_partitions_are_accepted() -> None:
    validate_role_arn("arn:aws:iam::210987654321:role/service-role/AmazonSageMaker-ExecutionRole-2026")
    validate_role_arn("arn:aws-cn:iam::210987654321:role/SageMaker")
    validate_role_arn("arn:aws-us-gov:iam::210987654321:role/SageMaker")


def test_instance_types_keep_their_order() -> None:
    assert validate_instance_types(["ml.g5.xlarge", "ml.g6.xlarge"]) == ("ml.g5.xlarge", "ml.g6.xlarge")


@pytest.mark.parametrize(
    ("types", "message"),
    [
        ([], "at least one"),
        (
            [
                "ml.g6.xlarge",
                "ml.g6e.xlarge",
                "ml.g5.xlarge",
                "ml.g4dn.xlarge",
                "ml.g5.2xlarge",
                "ml.g6.2xlarge",
            ],
            "at most 5",
        ),
        (["ml.g6.xlarge", "ml.g5.xlarge", "ml.g6.xlarge"], "listed twice"),
        (["g6.xlarge"], "invalid instance type"),
        (["ml.g6.xlarge", "ML.G5.XLARGE"], "invalid instance type"),
    ],
)
def test_invalid_instance_type_lists_are_rejected(types: list[str], message: str) -> None:
    with pytest.raises(DeploySettingsError, match=message):
        validate_instance_types(types)


@pytest.mark.parametrize("name", ["-leading-hyphen", "trailing-", "under_score", "x" * 64, ""])
def test_endpoint_names_sagemaker_would_refuse_are_rejected(name: str) -> None:
    with pytest.raises(DeploySettingsError, match="invalid endpoint name"):
        _build(endpoint_name=name)


def test_env_assignments_parse_and_keep_equals_signs_in_values() -> None:
    assert parse_env_assignments(["SPEAKWIRE_API_KEY=a=b", "SM_VLLM_MAX_NUM_SEQS=4"]) == {
        "SPEAKWIRE_API_KEY": "a=b",
        "SM_VLLM_MAX_NUM_SEQS": "4",
    }


@pytest.mark.parametrize(
    ("assignments", "message"),
    [
        (["NO_EQUALS"], "KEY=VALUE"),
        (["1BAD=x"], "invalid environment variable name"),
        (["A=1", "A=2"], "given twice"),
    ],
)
def test_malformed_env_assignments_are_rejected(assignments: list[str], message: str) -> None:
    with pytest.raises(DeploySettingsError, match=message):
        parse_env_assignments(assignments)


def test_env_cannot_override_the_model_id_behind_the_flags_back() -> None:
    with pytest.raises(DeploySettingsError, match="use --model-id"):
        _build(env_assignments=["SM_VLLM_MODEL=other/model"])


def test_gpu_memory_utilization_must_be_a_fraction() -> None:
    with pytest.raises(DeploySettingsError, match=r"\(0, 1\]"):
        _build(gpu_memory_utilization=1.5)


def test_provision_timeout_must_be_within_the_service_bounds() -> None:
    with pytest.raises(DeploySettingsError, match="300–3600"):
        _build(provision_timeout_s=60)


def test_autoscaling_is_off_unless_asked_for_and_defaults_its_floor_and_target() -> None:
    assert _build().autoscaling is None
    assert _build(max_instances=4).autoscaling == AutoscalingSettings(1, 4, None, 0.7)
    assert _build(max_instances=4, target_streams=5.0).autoscaling == AutoscalingSettings(1, 4, 5.0, 0.7)
    assert _build(image="dlc", max_instances=4, target_streams=5.0).autoscaling is not None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min_instances": 2}, "needs --max-instances"),
        ({"min_instances": 0, "max_instances": 2}, "at least 1"),
        ({"min_instances": 3, "max_instances": 2}, "below --min-instances"),
        ({"max_instances": 2, "target_streams": 0.0}, "positive"),
    ],
)
def test_inconsistent_autoscaling_options_are_rejected(options: dict[str, object], message: str) -> None:
    with pytest.raises(DeploySettingsError, match=message):
        _build(**options)
