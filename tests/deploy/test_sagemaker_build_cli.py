"""``speakwire sagemaker build``: options checked before any AWS call, the URI printed, exit codes."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from sagemaker_stubs import ACCOUNT, REGION

from speakwire.cli import sagemaker as cli
from speakwire.deploy.sagemaker.build_context import collect, mirrored_base_images

REPO = Path(__file__).parents[2]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="speakwire")
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["sagemaker", *argv])


class FakeSession:
    """Stands in for ``boto3.Session``: real clients, each behind a Stubber with nothing queued unless a test does."""

    def __init__(self) -> None:
        real = boto3.session.Session(region_name=REGION, aws_access_key_id="t", aws_secret_access_key="t")
        self.clients = {name: real.client(name) for name in ("sts", "ecr", "s3", "codebuild", "logs")}
        self.stubs = {name: Stubber(client) for name, client in self.clients.items()}
        for stub in self.stubs.values():
            stub.activate()

    def Session(self, region_name: str) -> FakeSession:  # the boto3 module's constructor
        assert region_name == REGION
        return self

    def client(self, service: str) -> Any:
        return self.clients[service]

    def get_credentials(self) -> object:
        return object()


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> FakeSession:
    fake = FakeSession()
    monkeypatch.setattr(cli, "_boto3", lambda: fake)
    monkeypatch.delenv("SPEAKWIRE_CODEBUILD_ROLE_ARN", raising=False)
    return fake


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--repository", "Speakwire"], "invalid ECR repository name"),
        (["--bucket", "my_bucket"], "invalid S3 bucket name"),
        (["--codebuild-role-arn", "CodeBuildRole"], "not an IAM role ARN"),
        (["--build-arg", "BASE_IMAGE"], "KEY=VALUE"),
        (["--context-dir", "/"], "Dockerfile"),
    ],
)
def test_invalid_build_options_exit_2_before_any_aws_call(
    session: FakeSession, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    args = parse("build", "--region", REGION, *flags)

    assert args.func(args) == 2  # any AWS call would have raised: nothing is queued
    assert message in capsys.readouterr().err


def test_build_prints_the_uri_of_an_image_already_in_ecr(
    session: FakeSession, capsys: pytest.CaptureFixture[str]
) -> None:
    dockerfile = (REPO / "deploy/sagemaker/Dockerfile.cuda").read_text()
    tag = collect(REPO, "cuda", build_args=mirrored_base_images(dockerfile, {})).tag
    session.stubs["sts"].add_response("get_caller_identity", {"Account": ACCOUNT}, {})
    session.stubs["ecr"].add_response(
        "describe_images",
        {"imageDetails": [{"imageDigest": "sha256:" + "0" * 64}]},
        {"repositoryName": "speakwire", "imageIds": [{"imageTag": tag}]},
    )
    args = parse("build", "--region", REGION, "--variant", "cuda", "--context-dir", str(REPO))

    assert args.func(args) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/speakwire:{tag}"


def test_build_without_a_role_when_ecr_lacks_the_tag_exits_1_naming_the_option(
    session: FakeSession, capsys: pytest.CaptureFixture[str]
) -> None:
    session.stubs["sts"].add_response("get_caller_identity", {"Account": ACCOUNT}, {})
    session.stubs["ecr"].add_client_error("describe_images", service_error_code="RepositoryNotFoundException")
    args = parse("build", "--region", REGION, "--context-dir", str(REPO))

    assert args.func(args) == 1
    assert "--codebuild-role-arn" in capsys.readouterr().err


def test_an_official_base_image_given_by_arg_comes_from_ecr_public_unless_asked_not_to(
    session: FakeSession, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = tmp_path / "checkout"
    (root / "deploy" / "sagemaker").mkdir(parents=True)
    (root / "deploy" / "sagemaker" / "Dockerfile.cpu").write_text(
        "ARG BASE_IMAGE=python:3.11-slim\nFROM ${BASE_IMAGE}\n"
    )

    _, context = cli._build_inputs(parse("build", "--context-dir", str(root)), REGION, "cpu")
    assert context.build_args == (("BASE_IMAGE", "public.ecr.aws/docker/library/python:3.11-slim"),)
    assert "ECR Public" in capsys.readouterr().out

    _, hub = cli._build_inputs(parse("build", "--context-dir", str(root), "--no-base-mirror"), REGION, "cpu")
    assert hub.build_args == () and hub.tag != context.tag
    _, own = cli._build_inputs(
        parse("build", "--context-dir", str(root), "--build-arg", "BASE_IMAGE=mine"), REGION, "cpu"
    )
    assert own.build_args == (("BASE_IMAGE", "mine"),)


def test_a_dry_run_prints_files_tag_and_buildspec_the_same_way_twice_and_calls_nothing(
    session: FakeSession, capsys: pytest.CaptureFixture[str]
) -> None:
    args = parse("build", "--region", REGION, "--context-dir", str(REPO), "--dry-run")

    assert args.func(args) == 0
    first = capsys.readouterr().out
    assert args.func(args) == 0
    assert capsys.readouterr().out == first  # same tree, same context, same tag
    entrypoint = next(line for line in first.splitlines() if line.endswith(" deploy/sagemaker/entrypoint.sh"))
    assert entrypoint.startswith("755 ")  # the mode the zip keeps and the buildspec restores
    assert f"image <account>.dkr.ecr.{REGION}.amazonaws.com/speakwire:cpu-" in first
    assert "docker build --platform linux/amd64 -f deploy/sagemaker/Dockerfile.cpu" in first


def test_build_without_credentials_exits_2_before_any_aws_call(
    session: FakeSession, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session, "get_credentials", lambda: None)
    args = parse("build", "--region", REGION, "--context-dir", str(REPO))

    assert args.func(args) == 2  # nothing is queued: any call would have raised
    assert "no AWS credentials found" in capsys.readouterr().err


def test_ctrl_c_during_a_build_exits_130(
    session: FakeSession, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupt(**_: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(session.clients["sts"], "get_caller_identity", interrupt)
    args = parse("build", "--region", REGION, "--context-dir", str(REPO))

    assert args.func(args) == 130
    assert "interrupted; the build was stopped" in capsys.readouterr().err
