"""What a deployment asks for, validated before any AWS call is made.

A SageMaker endpoint bills by the second from the moment it starts provisioning, and a
bad parameter found by the service only after the model and endpoint config exist leaves
resources to clean up. So everything checkable offline is checked here: the instance
pools, the execution role (placeholders copied from a README are the usual mistake), the
endpoint name against SageMaker's own pattern, and the container environment.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

DEFAULT_INSTANCE_TYPES = ("ml.g6.xlarge", "ml.g6e.xlarge", "ml.g5.xlarge", "ml.g4dn.xlarge")
DEFAULT_MODEL_ID = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"
DEFAULT_AMI_VERSION = "al2023-ami-sagemaker-inference-gpu-4-1"
DEFAULT_PROVISION_TIMEOUT_S = 1200
DEFAULT_REGION = "us-east-1"
DEFAULT_TARGET_INVOCATIONS = 10.0
# The vLLM-Omni SageMaker Deep Learning Container. Account 763104351884 hosts the DLCs in
# most commercial regions; opt-in regions use other accounts, so pass --image-uri there.
DLC_IMAGE_TEMPLATE = "763104351884.dkr.ecr.{region}.amazonaws.com/vllm:omni-sagemaker-cuda-v1.5"

ROLE_ENV = "SAGEMAKER_EXECUTION_ROLE_ARN"
IMAGE_ENV = "VLLM_OMNI_IMAGE_URI"  # the AWS sample's variable, honoured for drop-in use
REGION_ENV = "AWS_REGION"

MODEL_ENV = "SM_VLLM_MODEL"
GPU_MEMORY_ENV = "SM_VLLM_GPU_MEMORY_UTILIZATION"

MAX_INSTANCE_POOLS = 5  # ProductionVariant.InstancePools: min 1, max 5 in the service model
MIN_PROVISION_TIMEOUT_S = 300  # VariantInstanceProvisionTimeoutInSeconds bounds in the model
MAX_PROVISION_TIMEOUT_S = 3600
MAX_ENVIRONMENT_ENTRIES = 100  # EnvironmentMap max 100 entries, keys and values ≤ 1024 chars
MAX_ENVIRONMENT_LENGTH = 1024

# SageMaker's EndpointName pattern; model and endpoint-config names (which reuse the
# endpoint name here) accept the same set of strings.
_ENDPOINT_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
_ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/[a-zA-Z0-9+=,.@_/-]+")
_INSTANCE_TYPE = re.compile(r"ml\.[a-z0-9-]+\.[a-z0-9]+")
_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d+")
_ENV_KEY = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# Fragments of the placeholders that READMEs and samples use for a role ARN. The account
# field is already forced to 12 digits, so these catch "123456789012", "<ACCOUNT_ID>",
# "YOUR_ROLE", "xxxxxxxxxxxx" and friends that would otherwise reach CreateModel.
_ROLE_PLACEHOLDERS_EXACT_CASE = ("<", ">", "ACCOUNT", "YOUR", "REPLACE", "CHANGEME", "EXAMPLE")
_ROLE_PLACEHOLDERS_ANY_CASE = ("xxxx", "123456789012", "000000000000", "your_", "your-", "account_id")


class DeploySettingsError(ValueError):
    """A deploy option is invalid; raised before any AWS call is made."""


@dataclass(frozen=True, slots=True)
class AutoscalingSettings:
    """Target tracking on invocations per instance for the ``AllTraffic`` variant."""

    min_instances: int
    max_instances: int
    target_invocations_per_instance: float


@dataclass(frozen=True, slots=True)
class DeploySettings:
    """Everything one deployment needs; the model, endpoint config and endpoint share ``endpoint_name``."""

    endpoint_name: str
    region: str
    role_arn: str
    image_uri: str
    instance_types: tuple[str, ...] = DEFAULT_INSTANCE_TYPES
    model_id: str = DEFAULT_MODEL_ID
    gpu_memory_utilization: float | None = None
    extra_environment: Mapping[str, str] = field(default_factory=dict)
    provision_timeout_s: int = DEFAULT_PROVISION_TIMEOUT_S
    ami_version: str = DEFAULT_AMI_VERSION
    keep_endpoint: bool = False
    autoscaling: AutoscalingSettings | None = None


def build_settings(
    *,
    endpoint_name: str | None = None,
    region: str | None = None,
    role_arn: str | None = None,
    image_uri: str | None = None,
    instance_types: Sequence[str] = DEFAULT_INSTANCE_TYPES,
    model_id: str = DEFAULT_MODEL_ID,
    gpu_memory_utilization: float | None = None,
    env_assignments: Iterable[str] = (),
    provision_timeout_s: int = DEFAULT_PROVISION_TIMEOUT_S,
    ami_version: str = DEFAULT_AMI_VERSION,
    keep_endpoint: bool = False,
    min_instances: int | None = None,
    max_instances: int | None = None,
    target_invocations: float | None = None,
    environ: Mapping[str, str] | None = None,
    now: Callable[[], float] = time.time,
) -> DeploySettings:
    """Resolve defaults from the environment and validate every option.

    Args:
        endpoint_name: Name for the model, endpoint config and endpoint; default ``speakwire-<unix time>``.
        region: AWS region; default ``$AWS_REGION``, then ``us-east-1``.
        role_arn: SageMaker execution role; default ``$SAGEMAKER_EXECUTION_ROLE_ARN``.
        image_uri: Serving image; default ``$VLLM_OMNI_IMAGE_URI``, then the vLLM-Omni DLC in ``region``.
        instance_types: 1–5 unique ``ml.*`` types, highest priority first.
        model_id: Hugging Face model id passed as ``SM_VLLM_MODEL``.
        gpu_memory_utilization: Fraction in (0, 1] passed as ``SM_VLLM_GPU_MEMORY_UTILIZATION``.
        env_assignments: Extra container variables as ``KEY=VALUE`` strings (``SPEAKWIRE_*``, ``SM_VLLM_*``).
        provision_timeout_s: Per-pool provisioning timeout before SageMaker falls back to the next pool.
        ami_version: ``InferenceAmiVersion`` of the hosting instances.
        keep_endpoint: Keep the endpoint after a passed smoke test instead of deleting it.
        min_instances: Autoscaling floor (default 1 once autoscaling is asked for).
        max_instances: Autoscaling ceiling; required for autoscaling.
        target_invocations: Target invocations per instance per minute (default 10).
        environ: Environment to read defaults from; ``os.environ`` when omitted.
        now: Clock for the default endpoint name.

    Raises:
        DeploySettingsError: An option is missing or invalid.
    """
    env = os.environ if environ is None else environ
    resolved_region = resolve_region(region, env)
    name = endpoint_name if endpoint_name is not None else f"speakwire-{int(now())}"
    validate_endpoint_name(name)
    resolved_role = role_arn if role_arn is not None else env.get(ROLE_ENV, "")
    validate_role_arn(resolved_role)
    resolved_image = image_uri or env.get(IMAGE_ENV) or DLC_IMAGE_TEMPLATE.format(region=resolved_region)
    if not resolved_image.strip() or any(c.isspace() for c in resolved_image) or len(resolved_image) > 255:
        raise DeploySettingsError(f"invalid image URI {resolved_image!r}")
    if not model_id.strip():
        raise DeploySettingsError("--model-id must not be empty")
    if gpu_memory_utilization is not None and not 0.0 < gpu_memory_utilization <= 1.0:
        raise DeploySettingsError(f"--gpu-memory-utilization must be in (0, 1], got {gpu_memory_utilization}")
    if not MIN_PROVISION_TIMEOUT_S <= provision_timeout_s <= MAX_PROVISION_TIMEOUT_S:
        raise DeploySettingsError(
            f"--provision-timeout must be {MIN_PROVISION_TIMEOUT_S}–{MAX_PROVISION_TIMEOUT_S} s, "
            f"got {provision_timeout_s}"
        )
    extra = parse_env_assignments(env_assignments)
    reserved = {MODEL_ENV: "--model-id"}
    if gpu_memory_utilization is not None:
        reserved[GPU_MEMORY_ENV] = "--gpu-memory-utilization"
    for key, flag in reserved.items():
        if key in extra:
            raise DeploySettingsError(f"--env {key}=... conflicts with {flag}; use {flag}")
    if len(extra) + len(reserved) > MAX_ENVIRONMENT_ENTRIES:
        raise DeploySettingsError(f"at most {MAX_ENVIRONMENT_ENTRIES} container environment variables")
    return DeploySettings(
        endpoint_name=name,
        region=resolved_region,
        role_arn=resolved_role,
        image_uri=resolved_image,
        instance_types=validate_instance_types(instance_types),
        model_id=model_id,
        gpu_memory_utilization=gpu_memory_utilization,
        extra_environment=extra,
        provision_timeout_s=provision_timeout_s,
        ami_version=ami_version,
        keep_endpoint=keep_endpoint,
        autoscaling=build_autoscaling(min_instances, max_instances, target_invocations),
    )


def resolve_region(region: str | None, environ: Mapping[str, str]) -> str:
    """``region``, else ``$AWS_REGION``, else ``us-east-1`` — the order the AWS sample uses."""
    resolved = region or environ.get(REGION_ENV) or DEFAULT_REGION
    if not _REGION.fullmatch(resolved):
        raise DeploySettingsError(f"invalid AWS region {resolved!r}")
    return resolved


def validate_endpoint_name(name: str) -> None:
    """Reject names SageMaker would refuse, before the model is created under that name."""
    if not _ENDPOINT_NAME.fullmatch(name):
        raise DeploySettingsError(
            f"invalid endpoint name {name!r}: 1–63 letters, digits and hyphens, "
            "starting and ending with a letter or digit"
        )


def validate_role_arn(role_arn: str) -> None:
    """Require a real-looking IAM role ARN; placeholders fail here rather than in CreateModel."""
    if not role_arn:
        raise DeploySettingsError(f"an execution role is required: pass --role or set {ROLE_ENV}")
    lowered = role_arn.lower()
    placeholder = next((p for p in _ROLE_PLACEHOLDERS_EXACT_CASE if p in role_arn), None) or next(
        (p for p in _ROLE_PLACEHOLDERS_ANY_CASE if p in lowered), None
    )
    if placeholder is not None:
        raise DeploySettingsError(
            f"execution role {role_arn!r} looks like a placeholder (contains {placeholder!r}); "
            f"pass the ARN of a real role with --role or {ROLE_ENV}"
        )
    if not _ROLE_ARN.fullmatch(role_arn):
        raise DeploySettingsError(
            f"execution role {role_arn!r} is not an IAM role ARN (arn:aws:iam::<12 digits>:role/<name>)"
        )


def validate_instance_types(instance_types: Sequence[str]) -> tuple[str, ...]:
    """1–5 unique ``ml.*`` instance types, order kept: the order is the pool priority."""
    types = tuple(instance_types)
    if not types:
        raise DeploySettingsError("at least one instance type is required")
    if len(types) > MAX_INSTANCE_POOLS:
        raise DeploySettingsError(
            f"at most {MAX_INSTANCE_POOLS} instance types (instance pools), got {len(types)}"
        )
    seen: set[str] = set()
    for instance_type in types:
        if not _INSTANCE_TYPE.fullmatch(instance_type):
            raise DeploySettingsError(
                f"invalid instance type {instance_type!r}: SageMaker types look like ml.g6.xlarge"
            )
        if instance_type in seen:
            raise DeploySettingsError(f"instance type {instance_type} is listed twice")
        seen.add(instance_type)
    return types


def parse_env_assignments(assignments: Iterable[str]) -> dict[str, str]:
    """Parse repeated ``--env KEY=VALUE`` flags into the container environment.

    Raises:
        DeploySettingsError: A malformed, invalid or repeated key, or an over-long value.
    """
    parsed: dict[str, str] = {}
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep:
            raise DeploySettingsError(f"--env expects KEY=VALUE, got {assignment!r}")
        if not _ENV_KEY.fullmatch(key) or len(key) > MAX_ENVIRONMENT_LENGTH:
            raise DeploySettingsError(f"invalid environment variable name {key!r}")
        if len(value) > MAX_ENVIRONMENT_LENGTH:
            raise DeploySettingsError(f"value of {key} is over {MAX_ENVIRONMENT_LENGTH} characters")
        if key in parsed:
            raise DeploySettingsError(f"--env {key} is given twice")
        parsed[key] = value
    return parsed


def build_autoscaling(
    min_instances: int | None, max_instances: int | None, target_invocations: float | None
) -> AutoscalingSettings | None:
    """Autoscaling is on when any of its three options is given; ``--max-instances`` is then required."""
    if min_instances is None and max_instances is None and target_invocations is None:
        return None
    if max_instances is None:
        raise DeploySettingsError("autoscaling needs --max-instances")
    floor = 1 if min_instances is None else min_instances
    # Real-time endpoints without inference components cannot scale to zero instances.
    if floor < 1:
        raise DeploySettingsError("--min-instances must be at least 1")
    if max_instances < floor:
        raise DeploySettingsError(f"--max-instances ({max_instances}) is below --min-instances ({floor})")
    target = DEFAULT_TARGET_INVOCATIONS if target_invocations is None else target_invocations
    if target <= 0:
        raise DeploySettingsError("--target-invocations must be positive")
    return AutoscalingSettings(floor, max_instances, target)
