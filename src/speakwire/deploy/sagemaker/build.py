"""Build and push speakwire's image with AWS CodeBuild, so no Docker is needed where the user runs it.

The flow, on boto3 clients passed in (each call testable with botocore's ``Stubber``):

1. ``sts:GetCallerIdentity`` → the account, for the registry and the default bucket;
2. ``ecr:DescribeImages`` for the context's tag: found → nothing to build, the digest is printed;
3. the repository (``ecr:CreateRepository`` when missing) and the bucket (the default
   ``speakwire-build-<account>-<region>`` is created when missing; a bucket given must exist);
4. the context zip to S3, a temporary CodeBuild project with an inline buildspec, ``StartBuild``;
5. ``BatchGetBuilds`` until the build completes, each phase change and every log line shown;
6. ``ecr:DescribeImages`` again → the pushed digest.

Whatever happens after the upload — success, a failed build, an AWS error, Ctrl-C — the
``finally`` stops a build still running, deletes the project and deletes the context
object, and says so. A refused call is reported with the IAM action it needed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from speakwire.deploy.sagemaker.aws_errors import error_code, explain
from speakwire.deploy.sagemaker.build_context import BuildContext
from speakwire.deploy.sagemaker.build_progress import LogTail, PhaseReport, failure_reason
from speakwire.deploy.sagemaker.build_requests import (
    CODEBUILD_ROLE_ENV,
    BuildPlan,
    BuildRequest,
    create_bucket_request,
    create_project_request,
    create_repository_request,
    delete_context_request,
    describe_images_request,
    make_plan,
    put_context_request,
)

DEFAULT_POLL_S = 10.0
LOG_SETTLE_S = 3.0

Log = Callable[[str], None]


class BuildError(RuntimeError):
    """The image could not be found or built; the message says why (and which permission, if refused)."""


@dataclass(frozen=True, slots=True)
class BuildClients:
    """The boto3 clients one build uses, all in the build's region."""

    sts: Any
    ecr: Any
    s3: Any
    codebuild: Any
    logs: Any

    @classmethod
    def from_session(cls, session: Any) -> BuildClients:
        return cls(*(session.client(name) for name in ("sts", "ecr", "s3", "codebuild", "logs")))


@dataclass(frozen=True, slots=True)
class BuiltImage:
    """The image in ECR: URI by tag, its digest, and whether this run built it."""

    image_uri: str
    digest: str
    built: bool

    @property
    def uri_by_digest(self) -> str:
        return f"{self.image_uri.rsplit(':', 1)[0]}@{self.digest}"


def _call(client: Any, operation: str, **params: Any) -> Any:
    """One AWS call; an error becomes a :class:`BuildError` naming the refused permission."""
    try:
        return getattr(client, operation)(**params)
    except ClientError as exc:
        raise BuildError(f"{operation}: {explain(exc, client.meta.service_model.signing_name)}") from exc
    except BotoCoreError as exc:
        raise BuildError(f"{operation}: {exc}") from exc


def find_image(
    clients: BuildClients, context: BuildContext, request: BuildRequest, *, now: Callable[[], float] = time.time
) -> tuple[BuildPlan, str | None]:
    """The plan for ``context`` and the digest already in ECR under its tag (None when a build is needed)."""
    account = str(_call(clients.sts, "get_caller_identity")["Account"])
    plan = make_plan(context, request, account=account, started=int(now()))
    return plan, _existing_digest(clients.ecr, plan)


def _existing_digest(ecr: Any, plan: BuildPlan) -> str | None:
    try:
        details = ecr.describe_images(**describe_images_request(plan))["imageDetails"]
    except ClientError as exc:
        if error_code(exc) in ("ImageNotFoundException", "RepositoryNotFoundException"):
            return None
        raise BuildError(f"describe_images: {explain(exc, 'ecr')}") from exc
    except BotoCoreError as exc:
        raise BuildError(f"describe_images: {exc}") from exc
    return str(details[0]["imageDigest"]) if details else None


def build_image(
    clients: BuildClients,
    context: BuildContext,
    request: BuildRequest,
    *,
    log: Log = print,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    poll_s: float = DEFAULT_POLL_S,
    now: Callable[[], float] = time.time,
) -> BuiltImage:
    """Make sure ECR holds the image of ``context``; build and push it with CodeBuild when it does not.

    Args:
        clients: boto3 clients in ``request.region``.
        context: The build context (its tag names the image).
        request: Repository, bucket and CodeBuild service role.
        log: Where progress and the build's log lines go.
        sleep: Waits between polls (a no-op in tests).
        clock: Monotonic clock for the elapsed times shown.
        poll_s: Seconds between ``BatchGetBuilds`` polls.
        now: Wall clock, for the temporary project's name.

    Raises:
        BuildError: A call failed (the refused permission is named) or the build did not succeed;
            the temporary project and context object have been deleted by then.
    """
    plan, digest = find_image(clients, context, request, now=now)
    if digest is not None:
        log(f"{plan.image_uri} is already in ECR ({digest}); nothing to build")
        return BuiltImage(plan.image_uri, digest, built=False)
    if not plan.role_arn:
        raise BuildError(
            f"ECR has no {plan.image_uri}; building it needs a CodeBuild service role: "
            f"pass --codebuild-role-arn or set {CODEBUILD_ROLE_ENV}"
        )
    log(f"building {plan.image_uri} with CodeBuild (context {context.digest[:16]}, {len(context.files)} files)")
    _ensure_repository(clients.ecr, plan, log)
    _ensure_bucket(clients.s3, plan, own_bucket=request.bucket is None, log=log)
    body = context.zip_bytes()
    uploaded = False  # True once the context object may exist, so cleanup deletes it
    project_created = False
    build_id: str | None = None
    complete = False
    try:
        try:
            _call(clients.s3, "put_object", **put_context_request(plan, body))
        except BuildError as exc:
            uploaded = not isinstance(exc.__cause__, ClientError)  # refused: nothing arrived; a timeout may have
            raise
        except BaseException:  # Ctrl-C mid-upload: the object may exist
            uploaded = True
            raise
        uploaded = True
        log(f"uploaded the context ({len(body)} bytes) to s3://{plan.bucket}/{plan.key}")
        try:
            _call(clients.codebuild, "create_project", **create_project_request(plan))
        except BuildError as exc:
            if "sts:AssumeRole" in str(exc):  # CodeBuild tried the role and could not assume it
                raise BuildError(
                    f"{exc} — the service role's trust policy must allow codebuild.amazonaws.com "
                    "(a role created seconds ago may also need a minute before CodeBuild can assume it)"
                ) from exc
            raise
        project_created = True
        log(f"created CodeBuild project {plan.project_name}")
        build_id = str(_call(clients.codebuild, "start_build", projectName=plan.project_name)["build"]["id"])
        log(f"started build {build_id}")
        build = _follow(clients, build_id, log=log, sleep=sleep, clock=clock, poll_s=poll_s)
        complete = True
        if build.get("buildStatus") != "SUCCEEDED":
            raise BuildError(failure_reason(build))
        pushed = _existing_digest(clients.ecr, plan)
        if pushed is None:
            raise BuildError(f"the build succeeded but ECR has no {plan.image_uri}")
        log(f"pushed {plan.image_uri}")
        log(f"digest {pushed}")
        return BuiltImage(plan.image_uri, pushed, built=True)
    finally:
        _clean_up(clients, plan, build_id if not complete else None, project_created, uploaded, log)


def _follow(
    clients: BuildClients,
    build_id: str,
    *,
    log: Log,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    poll_s: float,
) -> dict[str, Any]:
    """Poll until the build completes, showing phases and log lines; returns the last ``Build``."""
    start = clock()
    phases = PhaseReport()
    tail = LogTail(clients.logs, log)
    logs_on = True
    while True:
        builds = _call(clients.codebuild, "batch_get_builds", ids=[build_id])["builds"]
        if not builds:
            raise BuildError(f"CodeBuild no longer knows build {build_id}")
        build: dict[str, Any] = builds[0]
        logs_on = logs_on and _read_log(tail, build, log)
        for line in phases.lines(build, clock() - start):
            log(line)
        if build.get("buildComplete"):
            if logs_on and tail.stream:
                # CloudWatch makes the last lines readable a moment after the build ends, and they are the
                # ones that say why a command failed.
                sleep(LOG_SETTLE_S)
                _read_log(tail, build, log)
            return build
        sleep(poll_s)


def _read_log(tail: LogTail, build: dict[str, Any], log: Log) -> bool:
    """Show the new log lines; False (stop reading) when the log cannot be read."""
    try:
        tail.poll(build)
    except ClientError as exc:  # the log is a convenience: its refusal must not fail the build
        log(f"(build log unavailable: {explain(exc, 'logs')})")
        return False
    return True


def _ensure_repository(ecr: Any, plan: BuildPlan, log: Log) -> None:
    try:
        ecr.create_repository(**create_repository_request(plan))
    except ClientError as exc:
        if error_code(exc) == "RepositoryAlreadyExistsException":
            return
        raise BuildError(f"create_repository: {explain(exc, 'ecr')}") from exc
    except BotoCoreError as exc:
        raise BuildError(f"create_repository: {exc}") from exc
    log(f"created ECR repository {plan.repository}")


def _ensure_bucket(s3: Any, plan: BuildPlan, *, own_bucket: bool, log: Log) -> None:
    try:
        s3.head_bucket(Bucket=plan.bucket, ExpectedBucketOwner=plan.account)
        return
    except ClientError as exc:
        code = error_code(exc)
        if code not in ("404", "NoSuchBucket", "NotFound"):
            # 403 here: the bucket belongs to another account, or the caller lacks s3:ListBucket.
            raise BuildError(
                f"head_bucket {plan.bucket}: {explain(exc, 's3')}; if the bucket is another account's, "
                "pass --bucket with one of yours"
            ) from exc
        if not own_bucket:
            raise BuildError(f"S3 bucket {plan.bucket} does not exist; create it or omit --bucket") from exc
    except BotoCoreError as exc:
        raise BuildError(f"head_bucket {plan.bucket}: {exc}") from exc
    _call(s3, "create_bucket", **create_bucket_request(plan.bucket, plan.region))
    log(f"created S3 bucket {plan.bucket}")


def _clean_up(
    clients: BuildClients, plan: BuildPlan, running: str | None, project: bool, uploaded: bool, log: Log
) -> None:
    """Stop a build left running, delete the project and the context; report, never raise."""
    steps: list[tuple[str, str, str, Callable[[], object]]] = []
    if running is not None:
        steps.append((f"build {running}", "stopped", "codebuild", lambda: clients.codebuild.stop_build(id=running)))
    if project:
        steps.append(
            (
                f"CodeBuild project {plan.project_name}",
                "deleted",
                "codebuild",
                lambda: clients.codebuild.delete_project(name=plan.project_name),
            )
        )
    if uploaded:
        steps.append(
            (
                f"context s3://{plan.bucket}/{plan.key}",
                "deleted",
                "s3",
                lambda: clients.s3.delete_object(**delete_context_request(plan)),
            )
        )
    for what, done, service, step in steps:
        try:
            step()
        except ClientError as exc:
            log(f"{what}: NOT {done} ({explain(exc, service)})")
        except BotoCoreError as exc:
            log(f"{what}: NOT {done} ({exc})")
        else:
            log(f"{what}: {done}")
