"""What a deployment asks for, validated before any AWS call is made.

A SageMaker endpoint bills by the second from the moment it starts provisioning, and a
bad parameter found by the service only after the model and endpoint config exist leaves
resources to clean up. So everything checkable offline is checked here: the instance
pools, the execution role (placeholders copied from a README are the usual mistake), the
endpoint name against SageMaker's own pattern, and the container environment.

The image is speakwire's own by default (built by ``speakwire sagemaker build`` when ECR
lacks it), the vLLM-Omni DLC with ``--image dlc``, or any URI. The engine picks the rest:
Piper runs the CPU image on CPU pools (ml.c7i → ml.m7i → ml.c6i ...) with no inference
AMI; Qwen3-TTS runs the CUDA image on the GPU pools with the inference AMI whose driver the
bidirectional stream needs.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from speakwire.voices.s3 import BUCKET_OWNER_ENV, VOICES_URL_ENV, S3Location

Engine = Literal["piper", "qwen3"]
ImageSource = Literal["speakwire", "dlc", "uri"]
ENGINES: tuple[Engine, ...] = ("piper", "qwen3")
IMAGE_SOURCES: tuple[str, ...] = ("speakwire", "dlc")

DEFAULT_INSTANCE_TYPES = ("ml.g6.xlarge", "ml.g6e.xlarge", "ml.g5.xlarge", "ml.g4dn.xlarge")
GPU_INSTANCE_TYPES = DEFAULT_INSTANCE_TYPES
# Piper is CPU-bound (one ONNX session per worker): compute-optimised first, then general purpose.
CPU_INSTANCE_TYPES = ("ml.c7i.xlarge", "ml.m7i.xlarge", "ml.c6i.xlarge", "ml.m6i.xlarge", "ml.c5.xlarge")
DEFAULT_ENGINE: Engine = "qwen3"
IMAGE_VARIANT: dict[Engine, Literal["cpu", "cuda"]] = {"piper": "cpu", "qwen3": "cuda"}
_GPU_FAMILY = re.compile(r"ml\.(g|p)\d")
DEFAULT_MODEL_ID = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"
DEFAULT_AMI_VERSION = "al2023-ami-sagemaker-inference-gpu-4-1"
DEFAULT_PROVISION_TIMEOUT_S = 1200
DEFAULT_REGION = "us-east-1"
# The autoscaling target as a share of the streams the image says one instance admits (/ready
# capacity.streams): at 70 % a new instance is asked for while the busy one still has room,
# since a GPU instance takes minutes to arrive.
DEFAULT_TARGET_SHARE = 0.7
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
    """Target tracking on concurrent requests (open streams) per instance for the ``AllTraffic`` variant.

    ``target_streams`` None means: ``target_share`` of the capacity the running image reports.
    """

    min_instances: int
    max_instances: int
    target_streams: float | None = None
    target_share: float = DEFAULT_TARGET_SHARE

    def target_for(self, reported_streams: int | None) -> float:
        """The policy's TargetValue: the explicit target, else the share of the reported capacity (at least 1).

        Raises:
            ValueError: No explicit target and no capacity reported.
        """
        if self.target_streams is not None:
            return self.target_streams
        if reported_streams is None:
            raise ValueError("the image reported no capacity; pass --target-streams")
        return max(1.0, round(self.target_share * reported_streams, 1))


@dataclass(frozen=True, slots=True)
class DeploySettings:
    """Everything one deployment needs; the model, endpoint config and endpoint share ``endpoint_name``."""

    endpoint_name: str
    region: str
    role_arn: str
    image_uri: str  # "" while speakwire's image is still to be found or built (see with_image)
    instance_types: tuple[str, ...] = DEFAULT_INSTANCE_TYPES
    model_id: str | None = DEFAULT_MODEL_ID  # SM_VLLM_MODEL; None for Piper's embedded voice
    gpu_memory_utilization: float | None = None
    extra_environment: Mapping[str, str] = field(default_factory=dict)
    provision_timeout_s: int = DEFAULT_PROVISION_TIMEOUT_S
    ami_version: str | None = DEFAULT_AMI_VERSION  # None: not set (CPU instances)
    keep_endpoint: bool = False
    autoscaling: AutoscalingSettings | None = None
    engine: Engine = DEFAULT_ENGINE
    image: ImageSource = "uri"
    voice_library: bool = True
    """Give the endpoint a voice library in S3 shared by its instances (``voice_library``); not for the DLC."""
    voices_url: str | None = None
    """``--voices-url``; None: the default bucket, the endpoint's name as the prefix."""
    voices_environment: Mapping[str, str] = field(default_factory=dict)
    """The container variables naming the library, once its bucket is checked (``with_voice_library``)."""

    @property
    def variant(self) -> Literal["cpu", "cuda"]:
        """Which of speakwire's images the engine needs."""
        return IMAGE_VARIANT[self.engine]

    def with_image(self, image_uri: str) -> DeploySettings:
        """These settings with the image resolved (speakwire's image, once found or built)."""
        return replace(self, image_uri=image_uri)

    def with_voice_library(self, environment: Mapping[str, str]) -> DeploySettings:
        """These settings with the voice library's bucket checked: its variables go to the container."""
        return replace(self, voices_environment=dict(environment))


def build_settings(
    *,
    endpoint_name: str | None = None,
    region: str | None = None,
    role_arn: str | None = None,
    image_uri: str | None = None,
    image: str = "speakwire",
    engine: str | None = None,
    instance_types: Sequence[str] | None = None,
    model_id: str | None = None,
    gpu_memory_utilization: float | None = None,
    env_assignments: Iterable[str] = (),
    provision_timeout_s: int = DEFAULT_PROVISION_TIMEOUT_S,
    ami_version: str | None = None,
    keep_endpoint: bool = False,
    min_instances: int | None = None,
    max_instances: int | None = None,
    target_streams: float | None = None,
    target_share: float | None = None,
    voices_url: str | None = None,
    voice_library: bool = True,
    environ: Mapping[str, str] | None = None,
    now: Callable[[], float] = time.time,
) -> DeploySettings:
    """Resolve defaults from the environment and validate every option.

    Args:
        endpoint_name: Name for the model, endpoint config and endpoint; default ``speakwire-<unix time>``.
        region: AWS region; default ``$AWS_REGION``, then ``us-east-1``.
        role_arn: SageMaker execution role; default ``$SAGEMAKER_EXECUTION_ROLE_ARN``.
        image_uri: Serving image; overrides ``image``.
        image: ``speakwire`` (default: our image for the engine, ``image_uri`` left "" until it is
            found or built) or ``dlc`` (``$VLLM_OMNI_IMAGE_URI``, then the vLLM-Omni DLC in ``region``).
        engine: ``qwen3`` (default; GPU pools, inference AMI) or ``piper`` (CPU pools, no AMI).
        instance_types: 1–5 unique ``ml.*`` types, highest priority first; default by engine.
        model_id: Hugging Face model id passed as ``SM_VLLM_MODEL`` (Qwen3; default the CustomVoice model).
        gpu_memory_utilization: Fraction in (0, 1] passed as ``SM_VLLM_GPU_MEMORY_UTILIZATION``.
        env_assignments: Extra container variables as ``KEY=VALUE`` strings (``SPEAKWIRE_*``, ``SM_VLLM_*``).
        provision_timeout_s: Per-pool provisioning timeout before SageMaker falls back to the next pool.
        ami_version: ``InferenceAmiVersion``; default the GPU inference AMI for Qwen3, none for Piper.
        keep_endpoint: Keep the endpoint after a passed smoke test instead of deleting it.
        min_instances: Autoscaling floor (default 1 once autoscaling is asked for).
        max_instances: Autoscaling ceiling; required for autoscaling.
        target_streams: Open streams per instance the policy keeps; default a share of the reported capacity.
        target_share: That share, in (0, 1] (default 0.7).
        voices_url: The voice library, ``s3://bucket/prefix``; default the account's and region's bucket.
        voice_library: False: no shared library (each instance keeps voices on its own disk).
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
    source, resolved_image, resolved_engine = _resolve_image(image, image_uri, engine, resolved_region, env)
    if resolved_engine == "piper":
        if model_id is not None:
            raise DeploySettingsError(
                "--model-id is a Qwen3 model; Piper serves its embedded voice (or a .onnx voice in /opt/ml/model)"
            )
        if gpu_memory_utilization is not None:
            raise DeploySettingsError("--gpu-memory-utilization is for Qwen3 on a GPU, not Piper")
    resolved_model = None if resolved_engine == "piper" else (model_id if model_id is not None else DEFAULT_MODEL_ID)
    if resolved_model is not None and not resolved_model.strip():
        raise DeploySettingsError("--model-id must not be empty")
    if gpu_memory_utilization is not None and not 0.0 < gpu_memory_utilization <= 1.0:
        raise DeploySettingsError(f"--gpu-memory-utilization must be in (0, 1], got {gpu_memory_utilization}")
    if not MIN_PROVISION_TIMEOUT_S <= provision_timeout_s <= MAX_PROVISION_TIMEOUT_S:
        raise DeploySettingsError(
            f"--provision-timeout must be {MIN_PROVISION_TIMEOUT_S}–{MAX_PROVISION_TIMEOUT_S} s, "
            f"got {provision_timeout_s}"
        )
    extra = parse_env_assignments(env_assignments)
    reserved = {MODEL_ENV: "--model-id"} if resolved_model is not None else {}
    if gpu_memory_utilization is not None:
        reserved[GPU_MEMORY_ENV] = "--gpu-memory-utilization"
    library = voice_library and source != "dlc"  # the vLLM-Omni DLC has no voice library of ours
    if voices_url is not None:
        if not library:
            raise DeploySettingsError(
                "--voices-url needs speakwire's image (the vLLM-Omni DLC has no voice library)"
                if voice_library
                else "--voices-url and --no-voice-library contradict each other"
            )
        try:
            S3Location.parse(voices_url)
        except ValueError as exc:
            raise DeploySettingsError(str(exc)) from None
    if library:
        reserved.update({VOICES_URL_ENV: "--voices-url", BUCKET_OWNER_ENV: "--voices-url"})
    for key, flag in reserved.items():
        if key in extra:
            raise DeploySettingsError(f"--env {key}=... conflicts with {flag}; use {flag}")
    if len(extra) + len(reserved) > MAX_ENVIRONMENT_ENTRIES:
        raise DeploySettingsError(f"at most {MAX_ENVIRONMENT_ENTRIES} container environment variables")
    types = validate_instance_types(
        instance_types or (CPU_INSTANCE_TYPES if resolved_engine == "piper" else GPU_INSTANCE_TYPES)
    )
    if resolved_engine == "qwen3":
        cpu_only = [t for t in types if not _GPU_FAMILY.match(t)]
        if cpu_only:
            raise DeploySettingsError(
                f"Qwen3-TTS needs a GPU instance; {', '.join(cpu_only)} has none (use ml.g*/ml.p*, or --engine piper)"
            )
    autoscaling = build_autoscaling(min_instances, max_instances, target_streams, target_share)
    if autoscaling is not None and autoscaling.target_streams is None and source == "dlc":
        raise DeploySettingsError("the vLLM-Omni DLC reports no stream capacity to scale on; pass --target-streams")
    return DeploySettings(
        endpoint_name=name,
        region=resolved_region,
        role_arn=resolved_role,
        image_uri=resolved_image,
        instance_types=types,
        model_id=resolved_model,
        gpu_memory_utilization=gpu_memory_utilization,
        extra_environment=extra,
        provision_timeout_s=provision_timeout_s,
        ami_version=ami_version or (DEFAULT_AMI_VERSION if resolved_engine == "qwen3" else None),
        keep_endpoint=keep_endpoint,
        autoscaling=autoscaling,
        engine=resolved_engine,
        image=source,
        voice_library=library,
        voices_url=voices_url,
    )


def _resolve_image(
    image: str, image_uri: str | None, engine: str | None, region: str, environ: Mapping[str, str]
) -> tuple[ImageSource, str, Engine]:
    """(source, URI or "" when speakwire's image is still to be built, engine)."""
    if engine is not None and engine not in ENGINES:
        raise DeploySettingsError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    if image not in IMAGE_SOURCES:
        raise DeploySettingsError(f"unknown image {image!r}; choose one of {', '.join(IMAGE_SOURCES)} or --image-uri")
    chosen: Engine = DEFAULT_ENGINE if engine is None else engine  # type: ignore[assignment]
    source: ImageSource
    if image_uri:
        source, uri = "uri", image_uri
    elif image == "dlc":
        if chosen != "qwen3":
            raise DeploySettingsError("the vLLM-Omni DLC serves Qwen3-TTS only; use --image speakwire for Piper")
        source, uri = "dlc", environ.get(IMAGE_ENV) or DLC_IMAGE_TEMPLATE.format(region=region)
    else:
        return "speakwire", "", chosen
    if not uri.strip() or any(c.isspace() for c in uri) or len(uri) > 255:
        raise DeploySettingsError(f"invalid image URI {uri!r}")
    return source, uri, chosen


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
        raise DeploySettingsError(f"at most {MAX_INSTANCE_POOLS} instance types (instance pools), got {len(types)}")
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
    min_instances: int | None,
    max_instances: int | None,
    target_streams: float | None = None,
    target_share: float | None = None,
) -> AutoscalingSettings | None:
    """Autoscaling is on when any of its options is given; ``--max-instances`` is then required."""
    if min_instances is None and max_instances is None and target_streams is None and target_share is None:
        return None
    if max_instances is None:
        raise DeploySettingsError("autoscaling needs --max-instances")
    floor = 1 if min_instances is None else min_instances
    # Real-time endpoints without inference components cannot scale to zero instances.
    if floor < 1:
        raise DeploySettingsError("--min-instances must be at least 1")
    if max_instances < floor:
        raise DeploySettingsError(f"--max-instances ({max_instances}) is below --min-instances ({floor})")
    if target_streams is not None and target_streams <= 0:
        raise DeploySettingsError("--target-streams must be positive")
    share = DEFAULT_TARGET_SHARE if target_share is None else target_share
    if not 0.0 < share <= 1.0:
        raise DeploySettingsError(f"--target-share must be in (0, 1], got {share}")
    return AutoscalingSettings(floor, max_instances, target_streams, share)
