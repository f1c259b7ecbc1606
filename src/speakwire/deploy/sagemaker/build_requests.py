"""The CodeBuild, ECR and S3 requests of one image build, and the inline buildspec they carry.

Pure functions of a :class:`BuildPlan`, so every request is read and asserted without a
client (the Stubber tests compare them call by call). The build runs on CodeBuild's
Amazon Linux standard image in privileged mode (Docker needs it), logs in to ECR with
the service role, builds for ``linux/amd64`` (what SageMaker's x86 instances run) and
pushes one tag. The digest is read back from ECR afterwards rather than parsed from a
log, so what is printed is what the registry holds.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from speakwire.deploy.sagemaker.build_context import BuildContext, Variant

CODEBUILD_IMAGE = "aws/codebuild/amazonlinux-x86_64-standard:5.0"
# The CUDA image installs torch (2+ GB of wheels): give it the larger machine.
COMPUTE_TYPES: dict[Variant, str] = {"cpu": "BUILD_GENERAL1_MEDIUM", "cuda": "BUILD_GENERAL1_LARGE"}
BUILD_TIMEOUT_MINUTES = 60
LOG_GROUP = "/aws/codebuild/speakwire-build"
DEFAULT_REPOSITORY = "speakwire"
PROJECT_PREFIX = "speakwire-build"
CODEBUILD_ROLE_ENV = "SPEAKWIRE_CODEBUILD_ROLE_ARN"

_REPOSITORY = re.compile(r"(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/[a-zA-Z0-9+=,.@_/-]+")

Request = dict[str, Any]


class BuildSettingsError(ValueError):
    """A build option is invalid; raised before any AWS call."""


@dataclass(frozen=True, slots=True)
class BuildRequest:
    """What the user asked for (the context itself is read separately, by ``build_context.collect``)."""

    region: str
    repository: str = DEFAULT_REPOSITORY
    role_arn: str | None = None  # needed only when ECR lacks the tag
    bucket: str | None = None  # None: the default bucket, created when missing


def build_request(
    region: str,
    *,
    repository: str = DEFAULT_REPOSITORY,
    bucket: str | None = None,
    role_arn: str | None = None,
    environ: Mapping[str, str],
) -> BuildRequest:
    """Validate the build options; the role defaults to ``$SPEAKWIRE_CODEBUILD_ROLE_ARN``.

    Raises:
        BuildSettingsError: A malformed repository, bucket or role ARN.
    """
    role = role_arn or environ.get(CODEBUILD_ROLE_ENV) or None
    if role is not None and not _ROLE_ARN.fullmatch(role):
        raise BuildSettingsError(f"CodeBuild service role {role!r} is not an IAM role ARN")
    return BuildRequest(
        region=region,
        repository=validate_repository(repository),
        role_arn=role,
        bucket=None if bucket is None else validate_bucket(bucket),
    )


@dataclass(frozen=True, slots=True)
class BuildPlan:
    """Everything one build names: where the context goes, which project runs it, what it pushes."""

    region: str
    account: str
    repository: str
    tag: str
    variant: Variant
    dockerfile: str
    bucket: str
    key: str
    project_name: str
    role_arn: str
    executables: tuple[str, ...] = ()
    build_args: tuple[tuple[str, str], ...] = ()

    @property
    def registry(self) -> str:
        return f"{self.account}.dkr.ecr.{self.region}.amazonaws.com"

    @property
    def image_uri(self) -> str:
        return f"{self.registry}/{self.repository}:{self.tag}"


def make_plan(context: BuildContext, request: BuildRequest, *, account: str, started: int) -> BuildPlan:
    """Where this build's context goes, which project runs it and what it pushes (pure)."""
    project = project_name(context.tag, started)
    return BuildPlan(
        region=request.region,
        account=account,
        repository=request.repository,
        tag=context.tag,
        variant=context.variant,
        dockerfile=context.dockerfile,
        bucket=request.bucket or default_bucket(account, request.region),
        key=context_key(project),
        project_name=project,
        role_arn=request.role_arn or "",
        executables=context.executables,
        build_args=context.build_args,
    )


def validate_repository(name: str) -> str:
    """ECR's repository-name pattern (lowercase, 2–256 characters), checked before any call."""
    if not 2 <= len(name) <= 256 or not _REPOSITORY.fullmatch(name):
        raise BuildSettingsError(f"invalid ECR repository name {name!r}: lowercase letters, digits, . _ - and /")
    return name


def validate_bucket(name: str) -> str:
    """S3's bucket-name rules (3–63 lowercase letters, digits, dots, hyphens)."""
    if not _BUCKET.fullmatch(name) or ".." in name:
        raise BuildSettingsError(f"invalid S3 bucket name {name!r}")
    return name


def default_bucket(account: str, region: str) -> str:
    """``speakwire-build-<account>-<region>``: one bucket per account and region, created on first use."""
    return f"speakwire-build-{account}-{region}"


def project_name(tag: str, started: int) -> str:
    """A temporary project per build, named after the tag and the start time so builds never collide."""
    return f"{PROJECT_PREFIX}-{tag}-{started}"


def context_key(project: str) -> str:
    return f"speakwire/build-contexts/{project}.zip"


def buildspec(plan: BuildPlan) -> str:
    """The inline buildspec (YAML): ECR login, ``docker build --platform linux/amd64``, push.

    Build and push share the ``build`` phase, so a failed build never reaches the push.
    Executables are re-marked after CodeBuild unzips the source (the mode bits in a zip are
    not always kept), because the entrypoint must be executable in the image.
    """
    uri = shlex.quote(plan.image_uri)
    build_args = "".join(f" --build-arg {shlex.quote(f'{k}={v}')}" for k, v in plan.build_args)
    pre_build = [
        f"aws ecr get-login-password --region {plan.region} "
        f"| docker login --username AWS --password-stdin {plan.registry}",
    ]
    if plan.executables:
        pre_build.insert(0, "chmod 0755 " + " ".join(shlex.quote(p) for p in plan.executables))
    build = [
        f"docker build --platform linux/amd64 -f {shlex.quote(plan.dockerfile)}{build_args} -t {uri} .",
        f"docker push {uri}",
    ]
    lines = ["version: 0.2", "phases:", "  pre_build:", "    commands:"]
    lines += [f"      - {_yaml_string(command)}" for command in pre_build]
    lines += ["  build:", "    commands:"]
    lines += [f"      - {_yaml_string(command)}" for command in build]
    return "\n".join(lines) + "\n"


def _yaml_string(value: str) -> str:
    """A double-quoted YAML scalar (JSON string escapes are valid YAML)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def describe_images_request(plan: BuildPlan) -> Request:
    return {"repositoryName": plan.repository, "imageIds": [{"imageTag": plan.tag}]}


def create_repository_request(plan: BuildPlan) -> Request:
    """A private repository; images are scanned on push (free basic scanning)."""
    return {
        "repositoryName": plan.repository,
        "imageScanningConfiguration": {"scanOnPush": True},
        "tags": [{"Key": "created-by", "Value": "speakwire"}],
    }


def create_bucket_request(bucket: str, region: str) -> Request:
    """us-east-1 takes no LocationConstraint; every other region must name itself."""
    request: Request = {"Bucket": bucket}
    if region != "us-east-1":
        request["CreateBucketConfiguration"] = {"LocationConstraint": region}
    return request


def put_context_request(plan: BuildPlan, body: bytes) -> Request:
    # ExpectedBucketOwner: a bucket of that name in someone else's account must not receive our source.
    return {
        "Bucket": plan.bucket,
        "Key": plan.key,
        "Body": body,
        "ContentType": "application/zip",
        "ExpectedBucketOwner": plan.account,
    }


def delete_context_request(plan: BuildPlan) -> Request:
    return {"Bucket": plan.bucket, "Key": plan.key, "ExpectedBucketOwner": plan.account}


def create_project_request(plan: BuildPlan) -> Request:
    """``CreateProject``: S3 source with the inline buildspec, no artifacts, privileged Linux container."""
    return {
        "name": plan.project_name,
        "description": f"speakwire {plan.variant} image build (temporary; deleted when the build ends)",
        "source": {"type": "S3", "location": f"{plan.bucket}/{plan.key}", "buildspec": buildspec(plan)},
        "artifacts": {"type": "NO_ARTIFACTS"},
        "environment": {
            "type": "LINUX_CONTAINER",
            "image": CODEBUILD_IMAGE,
            "computeType": COMPUTE_TYPES[plan.variant],
            "privilegedMode": True,
        },
        "serviceRole": plan.role_arn,
        "timeoutInMinutes": BUILD_TIMEOUT_MINUTES,
        "logsConfig": {"cloudWatchLogs": {"status": "ENABLED", "groupName": LOG_GROUP}},
        "tags": [{"key": "created-by", "value": "speakwire"}],
    }
