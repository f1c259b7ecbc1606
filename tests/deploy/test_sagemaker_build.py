"""build_image(): every CodeBuild, ECR, S3, STS and CloudWatch Logs call in order, and cleanup however it ends."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import Stubber
from sagemaker_stubs import ACCOUNT, REGION

from speakwire.deploy.sagemaker.build import BuildClients, BuildError, build_image
from speakwire.deploy.sagemaker.build_context import BuildContext, ContextFile
from speakwire.deploy.sagemaker.build_requests import (
    BuildPlan,
    BuildRequest,
    buildspec,
    context_key,
    create_bucket_request,
    create_project_request,
    create_repository_request,
    delete_context_request,
    describe_images_request,
    put_context_request,
)

NOW = 1_790_000_000
CODEBUILD_ROLE = f"arn:aws:iam::{ACCOUNT}:role/SpeakwireCodeBuildRole"
DIGEST = "sha256:" + "ab" * 32
BUILD_ID = "speakwire-build-x:0c6f"
CONTEXT = BuildContext(
    variant="cpu",
    dockerfile="deploy/sagemaker/Dockerfile.cpu",
    files=(
        ContextFile("deploy/sagemaker/Dockerfile.cpu", False, b"FROM python:3.11-slim\n"),
        ContextFile("deploy/sagemaker/entrypoint.sh", True, b"#!/bin/sh\n"),
        ContextFile("pyproject.toml", False, b"[project]\n"),
    ),
)
PROJECT = f"speakwire-build-{CONTEXT.tag}-{NOW}"
BUCKET = f"speakwire-build-{ACCOUNT}-{REGION}"
PLAN = BuildPlan(
    region=REGION,
    account=ACCOUNT,
    repository="speakwire",
    tag=CONTEXT.tag,
    variant="cpu",
    dockerfile=CONTEXT.dockerfile,
    bucket=BUCKET,
    key=context_key(PROJECT),
    project_name=PROJECT,
    role_arn=CODEBUILD_ROLE,
    executables=("deploy/sagemaker/entrypoint.sh",),
)
REQUEST = BuildRequest(region=REGION, repository="speakwire", role_arn=CODEBUILD_ROLE)
LOGS = {"groupName": "/aws/codebuild/speakwire-build", "streamName": "0c6f"}


class Stubs:
    def __init__(self) -> None:
        session = boto3.session.Session(
            region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        self.clients = BuildClients.from_session(session)
        self.stubs = {name: Stubber(getattr(self.clients, name)) for name in ("sts", "ecr", "s3", "codebuild", "logs")}
        # One Stubber per client checks the order within a service; this list checks it across them.
        self.calls: list[str] = []
        for client in self.stubs:
            getattr(self.clients, client).meta.events.register("before-call.*.*", self._record)

    def _record(self, model: Any, **_: Any) -> None:
        self.calls.append(f"{model.service_model.signing_name}:{model.name}")

    def __getattr__(self, name: str) -> Stubber:
        return self.__dict__["stubs"][name]


@pytest.fixture
def aws() -> Iterator[Stubs]:
    stubs = Stubs()
    for stub in stubs.stubs.values():
        stub.activate()
    yield stubs
    for stub in stubs.stubs.values():
        stub.assert_no_pending_responses()
        stub.deactivate()


def run(aws: Stubs, lines: list[str], request: BuildRequest = REQUEST, sleep: Any = lambda _: None) -> Any:
    return build_image(aws.clients, CONTEXT, request, log=lines.append, sleep=sleep, clock=lambda: 0.0, now=lambda: NOW)


def queue_identity(aws: Stubs) -> None:
    aws.sts.add_response(
        "get_caller_identity",
        {"UserId": "AIDEXAMPLE", "Account": ACCOUNT, "Arn": f"arn:aws:iam::{ACCOUNT}:user/dev"},
        {},
    )


def queue_image_found(aws: Stubs) -> None:
    aws.ecr.add_response(
        "describe_images",
        {"imageDetails": [{"repositoryName": "speakwire", "imageDigest": DIGEST, "imageTags": [CONTEXT.tag]}]},
        describe_images_request(PLAN),
    )


BUILD_CALLS = ("describe_images", "create_repository", "head_bucket", "put_object", "create_project", "start_build")
"""build_image()'s calls after the caller's identity, in order, up to the started build."""
HEAD_BUCKET = {"Bucket": BUCKET, "ExpectedBucketOwner": ACCOUNT}


def refuse(stub: Stubber, call: str, code: str, params: Any, *, message: str = "no", status: int = 400) -> None:
    """Queue ``call`` answered with the service error ``code``, expecting ``params``."""
    stub.add_client_error(call, service_error_code=code, service_message=message, http_status_code=status,
                          expected_params=params)  # fmt: skip


def queue_build_calls(
    aws: Stubs, *, through: str = "start_build", repository_exists: bool = False, bucket_exists: bool = False
) -> None:
    """Queue the caller's identity, then each call of ``BUILD_CALLS`` up to and including ``through``.

    The image is missing from ECR; the repository and the bucket are created unless they exist already.
    A test that makes a later call fail queues the calls before it here, then that one itself.
    """
    queue_identity(aws)
    for call in BUILD_CALLS[: BUILD_CALLS.index(through) + 1]:
        match call:
            case "describe_images":
                missing = "ImageNotFoundException" if repository_exists else "RepositoryNotFoundException"
                refuse(aws.ecr, call, missing, describe_images_request(PLAN))
            case "create_repository" if repository_exists:
                refuse(aws.ecr, call, "RepositoryAlreadyExistsException", create_repository_request(PLAN))
            case "create_repository":
                created = {"repository": {"repositoryName": "speakwire"}}
                aws.ecr.add_response(call, created, create_repository_request(PLAN))
            case "head_bucket" if bucket_exists:
                aws.s3.add_response(call, {}, HEAD_BUCKET)
            case "head_bucket":
                refuse(aws.s3, call, "404", HEAD_BUCKET, message="Not Found", status=404)
                aws.s3.add_response("create_bucket", {"Location": f"/{BUCKET}"}, create_bucket_request(BUCKET, REGION))
            case "put_object":
                aws.s3.add_response(call, {"ETag": '"e"'}, put_context_request(PLAN, CONTEXT.zip_bytes()))
            case "create_project":
                aws.codebuild.add_response(call, {"project": {"name": PROJECT}}, create_project_request(PLAN))
            case "start_build":
                aws.codebuild.add_response(call, {"build": {"id": BUILD_ID}}, {"projectName": PROJECT})


def build_state(
    phase: str, *, status: str = "IN_PROGRESS", done: tuple[tuple[str, str], ...] = (), **extra: Any
) -> Any:
    phases = [{"phaseType": kind, "phaseStatus": st, "durationInSeconds": 3} for kind, st in done]
    return {
        "builds": [
            {
                "id": BUILD_ID,
                "currentPhase": phase,
                "buildStatus": status,
                "buildComplete": status != "IN_PROGRESS",
                "phases": phases,
                **extra,
            }
        ]
    }


def queue_poll(aws: Stubs, state: Any) -> None:
    aws.codebuild.add_response("batch_get_builds", state, {"ids": [BUILD_ID]})


def queue_log_page(aws: Stubs, token: str | None, messages: list[str], next_token: str) -> None:
    request: dict[str, Any] = {
        "logGroupName": LOGS["groupName"],
        "logStreamName": LOGS["streamName"],
        "startFromHead": True,
    }
    if token is not None:
        request["nextToken"] = token
    events = [{"timestamp": 1, "message": m, "ingestionTime": 2} for m in messages]
    aws.logs.add_response(
        "get_log_events", {"events": events, "nextForwardToken": next_token, "nextBackwardToken": "b"}, request
    )


def queue_cleanup(aws: Stubs, *, project: bool = True, stop: bool = False) -> None:
    if stop:
        aws.codebuild.add_response("stop_build", {"build": {"id": BUILD_ID}}, {"id": BUILD_ID})
    if project:
        aws.codebuild.add_response("delete_project", {}, {"name": PROJECT})
    aws.s3.add_response("delete_object", {}, delete_context_request(PLAN))


def test_an_image_already_in_ecr_under_the_context_tag_is_not_built_again(aws: Stubs) -> None:
    queue_identity(aws)
    queue_image_found(aws)
    lines: list[str] = []

    image = run(aws, lines, BuildRequest(region=REGION, repository="speakwire"))  # no role needed

    assert not image.built and image.digest == DIGEST
    assert image.image_uri == f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/speakwire:{CONTEXT.tag}"
    assert "nothing to build" in lines[-1]


def test_a_build_creates_repository_and_bucket_streams_phases_and_logs_prints_the_digest_and_cleans_up(
    aws: Stubs,
) -> None:
    queue_build_calls(aws)
    queue_poll(aws, build_state("PROVISIONING", done=(("SUBMITTED", "SUCCEEDED"), ("QUEUED", "SUCCEEDED"))))
    queue_poll(aws, build_state("BUILD", done=(("PROVISIONING", "SUCCEEDED"),), logs=LOGS))
    queue_log_page(aws, None, ["Step 1/12 : FROM python:3.11-slim\n", "Step 2/12 : WORKDIR /src\n"], "f/2")
    queue_log_page(aws, "f/2", [], "f/2")
    queue_poll(aws, build_state("COMPLETED", status="SUCCEEDED", done=(("BUILD", "SUCCEEDED"),), logs=LOGS))
    queue_log_page(aws, "f/2", ["pushed\n"], "f/3")
    queue_log_page(aws, "f/3", [], "f/3")
    queue_log_page(aws, "f/3", ["[Container] Phase complete: BUILD State: SUCCEEDED\n"], "f/4")  # after settling
    queue_log_page(aws, "f/4", [], "f/4")
    queue_image_found(aws)
    queue_cleanup(aws)
    lines: list[str] = []
    sleeps: list[float] = []

    image = run(aws, lines, sleep=sleeps.append)

    assert image.built and image.digest == DIGEST
    assert aws.calls == [
        "sts:GetCallerIdentity",
        "ecr:DescribeImages",
        "ecr:CreateRepository",
        "s3:HeadBucket",
        "s3:CreateBucket",
        "s3:PutObject",
        "codebuild:CreateProject",
        "codebuild:StartBuild",
        "codebuild:BatchGetBuilds",
        "codebuild:BatchGetBuilds",
        "logs:GetLogEvents",
        "logs:GetLogEvents",
        "codebuild:BatchGetBuilds",
        "logs:GetLogEvents",
        "logs:GetLogEvents",
        "logs:GetLogEvents",
        "logs:GetLogEvents",
        "ecr:DescribeImages",
        "codebuild:DeleteProject",
        "s3:DeleteObject",
    ]
    assert image.uri_by_digest == f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/speakwire@{DIGEST}"
    assert sleeps == [10.0, 10.0, 3.0]  # two polls, then the log's last lines settle
    text = "\n".join(lines)
    for expected in (
        "created ECR repository speakwire",
        f"created S3 bucket {BUCKET}",
        "[00:00] PROVISIONING ...",
        "[00:00] PROVISIONING: SUCCEEDED (3 s)",
        "[00:00] BUILD ...",
        "  | Step 1/12 : FROM python:3.11-slim",
        "  | pushed",
        "  | [Container] Phase complete: BUILD State: SUCCEEDED",
        f"digest {DIGEST}",
        f"CodeBuild project {PROJECT}: deleted",
        f"context s3://{BUCKET}/{PLAN.key}: deleted",
    ):
        assert expected in text, expected


def test_a_failed_build_deletes_project_and_context_and_says_which_phase_failed(aws: Stubs) -> None:
    queue_build_calls(aws, repository_exists=True, bucket_exists=True)
    failed = build_state("COMPLETED", status="FAILED", done=(("PROVISIONING", "SUCCEEDED"),))
    failed["builds"][0]["phases"].append(
        {
            "phaseType": "PRE_BUILD",
            "phaseStatus": "FAILED",
            "contexts": [
                {
                    "statusCode": "COMMAND_EXECUTION_ERROR",
                    "message": "Error while executing command: aws ecr get-login-password ... AccessDeniedException",
                }
            ],
        }
    )
    queue_poll(aws, failed)
    queue_cleanup(aws)
    lines: list[str] = []

    with pytest.raises(BuildError, match="build FAILED in phase PRE_BUILD") as caught:
        run(aws, lines)

    assert "service role may lack ecr:GetAuthorizationToken" in str(caught.value)
    assert f"CodeBuild project {PROJECT}: deleted" in lines
    assert "created S3 bucket" not in "\n".join(lines)


def test_a_refused_create_project_names_the_missing_permission_and_still_deletes_the_context(aws: Stubs) -> None:
    queue_build_calls(aws, through="put_object", repository_exists=True, bucket_exists=True)
    denied = (f"User: arn:aws:iam::{ACCOUNT}:user/dev is not authorized to perform: iam:PassRole "
              f"on resource: {CODEBUILD_ROLE}")  # fmt: skip
    refuse(aws.codebuild, "create_project", "AccessDeniedException", create_project_request(PLAN), message=denied)
    queue_cleanup(aws, project=False)
    lines: list[str] = []

    with pytest.raises(BuildError, match="access denied: the caller needs iam:PassRole"):
        run(aws, lines)

    assert lines[-1] == f"context s3://{BUCKET}/{PLAN.key}: deleted"


def test_an_s3_access_denied_without_an_action_in_its_message_is_named_from_the_operation(aws: Stubs) -> None:
    queue_build_calls(aws, through="head_bucket", bucket_exists=True)
    refuse(aws.s3, "put_object", "AccessDenied", put_context_request(PLAN, CONTEXT.zip_bytes()),
           message="Access Denied", status=403)  # fmt: skip

    with pytest.raises(BuildError, match=r"put_object: access denied: the caller needs s3:PutObject"):
        run(aws, [])


def test_ctrl_c_while_the_build_runs_stops_it_and_deletes_project_and_context(aws: Stubs) -> None:
    queue_build_calls(aws, repository_exists=True, bucket_exists=True)
    queue_poll(aws, build_state("PROVISIONING"))
    queue_cleanup(aws, stop=True)
    lines: list[str] = []

    def interrupt(_: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(aws, lines, sleep=interrupt)

    assert lines[-3:] == [
        f"build {BUILD_ID}: stopped",
        f"CodeBuild project {PROJECT}: deleted",
        f"context s3://{BUCKET}/{PLAN.key}: deleted",
    ]


def test_without_a_codebuild_role_a_missing_image_fails_before_anything_is_created(aws: Stubs) -> None:
    queue_build_calls(aws, through="describe_images", repository_exists=True)

    with pytest.raises(BuildError, match="SPEAKWIRE_CODEBUILD_ROLE_ARN"):
        run(aws, [], BuildRequest(region=REGION, repository="speakwire"))


def test_the_buildspec_logs_in_builds_for_amd64_with_the_variant_dockerfile_and_pushes(tmp_path: Path) -> None:
    plan = dataclasses.replace(PLAN, build_args=(("BASE", "a b"),))
    spec = yaml.safe_load(buildspec(plan))
    registry = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"

    assert spec["version"] == 0.2
    assert spec["phases"]["pre_build"]["commands"] == [
        "chmod 0755 deploy/sagemaker/entrypoint.sh",
        f"aws ecr get-login-password --region {REGION} | docker login --username AWS --password-stdin {registry}",
    ]
    assert spec["phases"]["build"]["commands"] == [
        f"docker build --platform linux/amd64 -f deploy/sagemaker/Dockerfile.cpu --build-arg 'BASE=a b' "
        f"-t {registry}/speakwire:{CONTEXT.tag} .",
        f"docker push {registry}/speakwire:{CONTEXT.tag}",
    ]
    project = create_project_request(PLAN)
    assert project["environment"]["privilegedMode"] is True
    assert project["source"] == {"type": "S3", "location": f"{BUCKET}/{PLAN.key}", "buildspec": buildspec(PLAN)}


def test_a_role_codebuild_cannot_assume_is_explained_as_a_trust_policy_problem(aws: Stubs) -> None:
    queue_build_calls(aws, through="put_object", repository_exists=True, bucket_exists=True)
    untrusted = f"CodeBuild is not authorized to perform: sts:AssumeRole on {CODEBUILD_ROLE}"
    refuse(aws.codebuild, "create_project", "InvalidInputException", create_project_request(PLAN), message=untrusted)
    queue_cleanup(aws, project=False)

    with pytest.raises(BuildError, match=r"trust policy must allow codebuild\.amazonaws\.com"):
        run(aws, [])


def test_ctrl_c_during_the_upload_still_deletes_the_context_object(aws: Stubs, monkeypatch: pytest.MonkeyPatch) -> None:
    queue_build_calls(aws, through="head_bucket", repository_exists=True, bucket_exists=True)
    aws.s3.add_response("delete_object", {}, delete_context_request(PLAN))

    def interrupt(**_: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(aws.clients.s3, "put_object", interrupt)
    lines: list[str] = []

    with pytest.raises(KeyboardInterrupt):
        run(aws, lines)

    assert lines[-1] == f"context s3://{BUCKET}/{PLAN.key}: deleted"  # the bytes may have arrived before Ctrl-C


def test_a_refused_build_log_is_said_once_and_the_build_goes_on(aws: Stubs) -> None:
    queue_build_calls(aws, repository_exists=True, bucket_exists=True)
    queue_poll(aws, build_state("BUILD", logs=LOGS))
    log_request = {"logGroupName": LOGS["groupName"], "logStreamName": LOGS["streamName"], "startFromHead": True}
    refuse(aws.logs, "get_log_events", "AccessDeniedException", log_request)
    queue_poll(aws, build_state("COMPLETED", status="SUCCEEDED", done=(("BUILD", "SUCCEEDED"),), logs=LOGS))
    queue_image_found(aws)
    queue_cleanup(aws)
    lines: list[str] = []

    assert run(aws, lines).built
    refused = [line for line in lines if "build log unavailable" in line]
    assert refused == ["(build log unavailable: access denied: the caller needs logs:GetLogEvents (no))"]
