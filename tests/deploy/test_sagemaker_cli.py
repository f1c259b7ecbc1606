"""``speakwire sagemaker``: flags, exit codes, and no AWS call when the options are wrong."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import pytest
from sagemaker_stubs import ACCOUNT, FAST_WAITER, NAME, REGION, WHEN, Stubbed, arn, queue_delete_all

from speakwire.cli import sagemaker as cli
from speakwire.deploy.sagemaker import delete as delete_module
from speakwire.deploy.sagemaker.voice_library import (
    VoiceLibraryError,
    VoiceLibraryPlan,
    delete_library,
    plan_voice_library,
)
from speakwire.voices.s3 import S3Location


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="speakwire")
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["sagemaker", *argv])


class FakeBoto3:
    """Stands in for the boto3 module: every client it makes is a Stubber-backed real client."""

    def __init__(self, **clients: Any) -> None:
        self.clients = clients
        self.regions: list[str] = []

    def Session(self, region_name: str) -> FakeBoto3:  # mirrors boto3.Session
        self.regions.append(region_name)
        return self

    def client(self, service: str) -> Any:
        return self.clients[service]

    def get_credentials(self) -> object:
        return object()


@pytest.fixture(autouse=True)
def fast_deletion_waiter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delete_module, "DEFAULT_DELETE_WAITER_CONFIG", FAST_WAITER)


def test_deploy_flags_default_to_the_aws_samples_choices() -> None:
    args = parse("deploy")

    # Pools, model and AMI follow the engine (settings.build_settings): none is fixed by the parser.
    assert (args.instance_types, args.model_id, args.ami_version, args.engine) == (None, None, None, None)
    assert args.image == "speakwire" and args.image_uri is None
    assert args.provision_timeout == 1200
    assert args.voice == "Vivian"
    assert str(args.output) == "validation-output.wav"
    assert args.keep_endpoint is False
    assert args.env == []


def test_deploy_collects_repeated_env_flags_and_instance_types() -> None:
    args = parse("deploy", "--instance-types", "ml.g5.xlarge", "ml.g6.xlarge", "--env", "SPEAKWIRE_A=1", "--env", "B=2")

    assert args.instance_types == ["ml.g5.xlarge", "ml.g6.xlarge"]
    assert args.env == ["SPEAKWIRE_A=1", "B=2"]


def test_a_placeholder_role_exits_2_before_any_aws_call(
    sm: Stubbed, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The Stubber has nothing queued: any SageMaker call would raise instead of returning.
    monkeypatch.setattr(cli, "_boto3", lambda: FakeBoto3(sagemaker=sm.client))
    args = parse("deploy", "--role", "arn:aws:iam::123456789012:role/SageMakerRole")

    assert args.func(args) == 2
    assert "placeholder" in capsys.readouterr().err


@pytest.mark.parametrize("types", [["ml.g6.xlarge", "ml.g6.xlarge"], ["g6.xlarge"]])
def test_invalid_instance_types_exit_2_before_any_aws_call(
    sm: Stubbed, monkeypatch: pytest.MonkeyPatch, types: list[str]
) -> None:
    monkeypatch.setattr(cli, "_boto3", lambda: FakeBoto3(sagemaker=sm.client))
    args = parse("deploy", "--role", "arn:aws:iam::210987654321:role/R", "--instance-types", *types)

    assert args.func(args) == 2


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="on 3.12+ the bidirectional client can be installed")
def test_deploy_on_python_311_refuses_before_creating_an_endpoint_it_could_not_test(
    sm: Stubbed, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "_boto3", lambda: FakeBoto3(sagemaker=sm.client))
    args = parse("deploy", "--role", "arn:aws:iam::210987654321:role/R")

    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "Python >= 3.12" in err and "nothing was created" in err


def test_delete_exits_0_when_everything_is_gone(sm: Stubbed, monkeypatch: pytest.MonkeyPatch) -> None:
    queue_delete_all(sm.stub)
    boto3 = FakeBoto3(sagemaker=sm.client)
    monkeypatch.setattr(cli, "_boto3", lambda: boto3)
    args = parse("delete", "--endpoint-name", NAME, "--region", REGION)

    assert args.func(args) == 0
    assert boto3.regions == [REGION]


def test_delete_exits_1_and_names_what_is_left(
    sm: Stubbed, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sm.stub.add_response("delete_endpoint", {}, {"EndpointName": NAME})
    sm.stub.add_client_error(
        "describe_endpoint",
        service_error_code="ThrottlingException",
        service_message="slow down",
        http_status_code=400,
        expected_params={"EndpointName": NAME},
    )
    sm.stub.add_response("delete_endpoint_config", {}, {"EndpointConfigName": NAME})
    sm.stub.add_response("delete_model", {}, {"ModelName": NAME})
    monkeypatch.setattr(cli, "_boto3", lambda: FakeBoto3(sagemaker=sm.client))
    args = parse("delete", "--endpoint-name", NAME, "--region", REGION)

    assert args.func(args) == 1
    assert "NOT deleted, check the console or rerun: endpoint" in capsys.readouterr().out


LIBRARY = "s3://speakwire-voices-210987654321-us-west-2/speakwire-test/"


def queue_model_with_library(sm: Stubbed, environment: dict[str, str]) -> None:
    sm.stub.add_response("describe_model", {
        "ModelName": NAME, "ModelArn": arn("model"), "CreationTime": WHEN,
        "PrimaryContainer": {"Image": "image", "Environment": environment},
    }, {"ModelName": NAME})  # fmt: skip


def test_delete_keeps_the_voice_library_unless_asked_and_then_deletes_it_after_the_endpoint(
    sm: Stubbed, s3: Stubbed, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    boto3 = FakeBoto3(sagemaker=sm.client, s3=s3.client)
    monkeypatch.setattr(cli, "_boto3", lambda: boto3)
    queue_delete_all(sm.stub)  # plain delete: no S3 call at all (the Stubber has none queued)
    assert cli.run_delete(parse("delete", "--endpoint-name", NAME, "--region", REGION)) == 0

    queue_model_with_library(sm, {"SPEAKWIRE_VOICES_URL": LIBRARY, "SPEAKWIRE_VOICES_BUCKET_OWNER": ACCOUNT})
    queue_delete_all(sm.stub)
    bucket, owner = "speakwire-voices-210987654321-us-west-2", {"ExpectedBucketOwner": ACCOUNT}
    # Only the library's folders are listed and deleted (anything else under the prefix is not the library's).
    item = "speakwire-test/items/abc/"
    for folder, keys in (("voices/", ["speakwire-test/voices/jane.json"]),
                         ("items/", [f"{item}audio.flac", f"{item}prompt.pt"])):  # fmt: skip
        s3.stub.add_response("list_objects_v2", {"Contents": [{"Key": k} for k in keys], "IsTruncated": False},
                             {"Bucket": bucket, "Prefix": f"speakwire-test/{folder}", **owner})  # fmt: skip
        s3.stub.add_response("delete_objects", {}, {"Bucket": bucket, "Delete": {
            "Objects": [{"Key": k} for k in keys], "Quiet": True}, **owner})  # fmt: skip
    assert cli.run_delete(parse("delete", "--endpoint-name", NAME, "--region", REGION, "--delete-voices")) == 0
    assert f"voice library {LIBRARY}: deleted (3 objects)" in capsys.readouterr().out
    s3.stub.assert_no_pending_responses()


def test_a_library_at_a_buckets_root_is_refused_by_deploy_and_by_delete() -> None:
    with pytest.raises(VoiceLibraryError, match="needs a prefix"):
        plan_voice_library(ACCOUNT, REGION, NAME, "s3://some-bucket")
    with pytest.raises(VoiceLibraryError, match="bucket's root"):
        delete_library(object(), VoiceLibraryPlan(S3Location.parse("s3://some-bucket/"), ACCOUNT))


def test_delete_voices_keeps_the_library_while_the_endpoint_is_not_gone(
    sm: Stubbed, s3: Stubbed, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "_boto3", lambda: FakeBoto3(sagemaker=sm.client, s3=s3.client))
    queue_model_with_library(sm, {"SPEAKWIRE_VOICES_URL": LIBRARY, "SPEAKWIRE_VOICES_BUCKET_OWNER": ACCOUNT})
    sm.stub.add_client_error("delete_endpoint", service_error_code="ThrottlingException", http_status_code=400,
                             expected_params={"EndpointName": NAME})  # fmt: skip
    sm.stub.add_response("delete_endpoint_config", {}, {"EndpointConfigName": NAME})
    sm.stub.add_response("delete_model", {}, {"ModelName": NAME})
    assert cli.run_delete(parse("delete", "--endpoint-name", NAME, "--region", REGION, "--delete-voices")) == 1
    assert f"the voice library {LIBRARY} was kept" in capsys.readouterr().err  # and no S3 call was made


def test_status_exits_1_when_there_is_no_endpoint(sm: Stubbed, monkeypatch: pytest.MonkeyPatch) -> None:
    for operation, params in (
        ("describe_endpoint", {"EndpointName": NAME}),
        ("describe_endpoint_config", {"EndpointConfigName": NAME}),
        ("describe_model", {"ModelName": NAME}),
    ):
        sm.stub.add_client_error(
            operation,
            service_error_code="ValidationException",
            service_message="Could not find it.",
            http_status_code=400,
            expected_params=params,
        )
    monkeypatch.setattr(cli, "_boto3", lambda: FakeBoto3(sagemaker=sm.client))
    args = parse("status", "--endpoint-name", NAME, "--region", REGION)

    assert args.func(args) == 1


def test_a_missing_boto3_is_reported_with_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)  # makes `import boto3` fail
    args = parse("status", "--endpoint-name", NAME, "--region", REGION)

    assert args.func(args) == 2
    assert 'pip install "speakwire[sagemaker]"' in capsys.readouterr().err


def test_an_unreadable_reference_clip_exits_2_before_any_aws_call(
    sm: Stubbed, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    class Runtime(FakeBoto3):
        def client(self, service: str, endpoint_url: str | None = None) -> Any:
            return sm.client  # nothing queued: a call would raise

    clip = tmp_path / "clip.wav"
    clip.write_bytes(b"not audio at all")
    monkeypatch.setattr(cli, "_boto3", lambda: Runtime())
    args = parse("invoke", "--endpoint-name", NAME, "--region", REGION, "--text", "Hi.", "--ref-audio", str(clip),
                 "--output", str(tmp_path / "out.wav"))  # fmt: skip

    assert args.func(args) == 2  # a ReferenceAudioError is a ValueError too, yet the caller's to fix: not 1
    assert "could not be decoded as audio" in capsys.readouterr().err
