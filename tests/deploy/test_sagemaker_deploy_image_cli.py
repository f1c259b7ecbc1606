"""``speakwire sagemaker deploy`` with our own image: found (or built) first, then deployed on the engine's pools.

Every AWS client is a real boto3 client behind a Stubber, and one list records the calls
across all of them, so the order — image lookup, create, wait, capacity probe, scaling,
smoke test — is asserted whole. Only the bidirectional smoke test is replaced (its client
needs Python 3.12; it has its own tests).
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber
from sagemaker_stubs import ACCOUNT, FAST_WAITER, NAME, REGION, ROLE, arn, endpoint_description, pools

from speakwire.cli import sagemaker as cli
from speakwire.deploy.sagemaker import bidi
from speakwire.deploy.sagemaker import deploy as deploy_module
from speakwire.deploy.sagemaker.build_context import collect, dockerfile_path, mirrored_base_images
from speakwire.deploy.sagemaker.smoke import SmokeResult

REPO = Path(__file__).parents[2]
SERVICES = ("sts", "ecr", "s3", "codebuild", "logs", "sagemaker", "sagemaker-runtime", "application-autoscaling")
PASSED = SmokeResult(ok=True, reason="", pcm_bytes=48_000, sample_rate=24000)
LIBRARY_BUCKET = f"speakwire-voices-{ACCOUNT}-{REGION}"


class FakeBoto3:
    """The boto3 module as the CLI uses it: ``Session(region_name=...)`` → Stubber-backed real clients."""

    def __init__(self) -> None:
        real = boto3.session.Session(region_name=REGION, aws_access_key_id="t", aws_secret_access_key="t")
        self.clients = {name: real.client(name) for name in SERVICES}
        self.stubs = {name: Stubber(client) for name, client in self.clients.items()}
        self.calls: list[str] = []
        for client in self.clients.values():
            client.meta.events.register("before-call.*.*", self._record)
        for stub in self.stubs.values():
            stub.activate()

    def _record(self, model: Any, **_: Any) -> None:
        self.calls.append(model.name)

    def Session(self, region_name: str) -> FakeBoto3:
        assert region_name == REGION
        return self

    def client(self, service: str) -> Any:
        return self.clients[service]

    def get_credentials(self) -> object:
        return object()

    def assert_all_used(self) -> None:
        for stub in self.stubs.values():
            stub.assert_no_pending_responses()


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> FakeBoto3:
    fake = FakeBoto3()
    monkeypatch.setattr(cli, "_boto3", lambda: fake)
    monkeypatch.setattr(bidi, "load_bidi_sdk", lambda: None)
    monkeypatch.setattr(deploy_module, "DEFAULT_WAITER_CONFIG", FAST_WAITER)
    monkeypatch.delenv("SPEAKWIRE_CODEBUILD_ROLE_ARN", raising=False)
    return fake


@pytest.fixture
def smoked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def endpoint_smoke(args: argparse.Namespace, region: str) -> Any:
        def smoke(name: str) -> SmokeResult:
            calls.append(f"{name} voice={args.voice}")
            return PASSED

        return smoke

    monkeypatch.setattr(cli, "_endpoint_smoke", endpoint_smoke)
    return calls


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="speakwire")
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["sagemaker", "deploy", "--endpoint-name", NAME, "--region", REGION, "--role", ROLE,
                              "--context-dir", str(REPO), *argv])  # fmt: skip


def tag(variant: str) -> str:
    """The tag the CLI computes: the checkout's context, with any official base image taken from ECR Public."""
    dockerfile = (REPO / dockerfile_path(variant)).read_text()  # type: ignore[arg-type]
    return collect(REPO, variant, build_args=mirrored_base_images(dockerfile, {})).tag  # type: ignore[arg-type]


def image_uri(variant: str) -> str:
    return f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/speakwire:{tag(variant)}"


def queue_image(aws: FakeBoto3, variant: str, *, found: bool) -> None:
    aws.stubs["sts"].add_response("get_caller_identity", {"Account": ACCOUNT}, {})
    request = {"repositoryName": "speakwire", "imageIds": [{"imageTag": tag(variant)}]}
    if found:
        aws.stubs["ecr"].add_response("describe_images", {"imageDetails": [{"imageDigest": "sha256:" + "1" * 64}]},
                                      request)  # fmt: skip
    else:
        aws.stubs["ecr"].add_client_error("describe_images", service_error_code="ImageNotFoundException",
                                          expected_params=request)  # fmt: skip


def queue_library(aws: FakeBoto3, bucket: str = LIBRARY_BUCKET, *, exists: bool = True) -> None:
    """The voice library's bucket check (and creation): the account, then HeadBucket with ExpectedBucketOwner."""
    aws.stubs["sts"].add_response("get_caller_identity", {"Account": ACCOUNT}, {})
    owned = {"Bucket": bucket, "ExpectedBucketOwner": ACCOUNT}
    if exists:
        aws.stubs["s3"].add_response("head_bucket", {}, owned)
        return
    aws.stubs["s3"].add_client_error("head_bucket", service_error_code="404", http_status_code=404,
                                     expected_params=owned)  # fmt: skip
    aws.stubs["s3"].add_response("create_bucket", {"Location": f"/{bucket}"}, {
        "Bucket": bucket, "CreateBucketConfiguration": {"LocationConstraint": REGION},
        "ObjectOwnership": "BucketOwnerEnforced",
    })  # fmt: skip
    aws.stubs["s3"].add_response("put_public_access_block", {}, {**owned, "PublicAccessBlockConfiguration": {
        "BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True, "RestrictPublicBuckets": True,
    }})  # fmt: skip


def library_environment(url: str = f"s3://{LIBRARY_BUCKET}/{NAME}/") -> dict[str, str]:
    return {"SPEAKWIRE_VOICES_URL": url, "SPEAKWIRE_VOICES_BUCKET_OWNER": ACCOUNT}


def test_piper_deploys_our_cpu_image_on_cpu_pools_and_scales_on_70_percent_of_its_reported_capacity(
    aws: FakeBoto3, smoked: list[str]
) -> None:
    queue_library(aws)
    queue_image(aws, "cpu", found=True)
    sm = aws.stubs["sagemaker"]
    sm.add_response("create_model", {"ModelArn": arn("model")}, {
        "ModelName": NAME, "PrimaryContainer": {"Image": image_uri("cpu"), "Environment": library_environment()},
        "ExecutionRoleArn": ROLE,
    })  # fmt: skip
    cpu_pools = ["ml.c7i.xlarge", "ml.m7i.xlarge", "ml.c6i.xlarge", "ml.m6i.xlarge", "ml.c5.xlarge"]
    sm.add_response("create_endpoint_config", {"EndpointConfigArn": arn("endpoint-config")}, {
        "EndpointConfigName": NAME,
        "ProductionVariants": [{
            "VariantName": "AllTraffic", "ModelName": NAME, "InitialInstanceCount": 1,
            "InstancePools": [{"InstanceType": t, "Priority": i} for i, t in enumerate(cpu_pools, 1)],
            "VariantInstanceProvisionTimeoutInSeconds": 1200,  # and no InferenceAmiVersion: CPU hosts
        }],
    })  # fmt: skip
    sm.add_response("create_endpoint", {"EndpointArn": arn("endpoint")}, {"EndpointName": NAME,
                                                                        "EndpointConfigName": NAME})  # fmt: skip
    sm.add_response("describe_endpoint", endpoint_description("InService"), {"EndpointName": NAME})
    sm.add_response("describe_endpoint", endpoint_description("InService", **pools(("ml.c7i.xlarge", 1))),
                    {"EndpointName": NAME})  # fmt: skip
    ready = json.dumps({"status": "ready", "capacity": {"streams": 12, "source": "measured"}}).encode()
    aws.stubs["sagemaker-runtime"].add_response(
        "invoke_endpoint", {"Body": StreamingBody(io.BytesIO(ready), len(ready))},
        {"EndpointName": NAME, "ContentType": "application/json", "Accept": "application/json",
         "CustomAttributes": "route=/ready", "Body": b"{}"},
    )  # fmt: skip
    scaling = aws.stubs["application-autoscaling"]
    target = {"ServiceNamespace": "sagemaker", "ResourceId": f"endpoint/{NAME}/variant/AllTraffic",
              "ScalableDimension": "sagemaker:variant:DesiredInstanceCount"}  # fmt: skip
    scaling.add_response("register_scalable_target", {}, {**target, "MinCapacity": 1, "MaxCapacity": 3})
    scaling.add_response("put_scaling_policy", {"PolicyARN": "arn:p"}, {
        "PolicyName": f"{NAME}-concurrent-streams", **target, "PolicyType": "TargetTrackingScaling",
        "TargetTrackingScalingPolicyConfiguration": {
            "TargetValue": 8.4,  # 70 % of 12
            "PredefinedMetricSpecification": {
                "PredefinedMetricType": "SageMakerVariantConcurrentRequestsPerModelHighResolution"},
            "ScaleOutCooldown": 300, "ScaleInCooldown": 600,
        },
    })  # fmt: skip
    args = parse("--engine", "piper", "--keep-endpoint", "--max-instances", "3")

    assert args.func(args) == 0
    aws.assert_all_used()
    assert aws.calls == [
        "GetCallerIdentity", "HeadBucket", "GetCallerIdentity", "DescribeImages", "CreateModel",
        "CreateEndpointConfig", "CreateEndpoint",
        "DescribeEndpoint", "DescribeEndpoint", "InvokeEndpoint", "RegisterScalableTarget", "PutScalingPolicy",
    ]  # fmt: skip
    assert smoked == [f"{NAME} voice=None"]  # Piper speaks with its own voice, not Qwen3's Vivian


def test_an_image_missing_from_ecr_without_a_codebuild_role_creates_no_endpoint(
    aws: FakeBoto3, smoked: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    queue_library(aws)
    queue_image(aws, "cuda", found=False)
    args = parse()

    assert args.func(args) == 1
    err = capsys.readouterr().err
    assert "--codebuild-role-arn" in err and "no endpoint was created" in err
    assert aws.calls == ["GetCallerIdentity", "HeadBucket", "GetCallerIdentity", "DescribeImages"] and smoked == []


def test_a_refused_create_model_names_the_permission(
    aws: FakeBoto3, smoked: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    aws.stubs["sagemaker"].add_client_error(
        "create_model", service_error_code="AccessDeniedException", service_message="Access denied",
        http_status_code=400,
    )  # fmt: skip
    args = parse("--image", "dlc")

    assert args.func(args) == 1
    assert "access denied: the caller needs sagemaker:CreateModel" in capsys.readouterr().err
    assert aws.calls == ["CreateModel"]  # the DLC needs no image lookup; nothing was created to clean up


def refuse_create_model(aws: FakeBoto3, environment: dict[str, str]) -> None:
    """CreateModel, checked for the container's environment, then refused: the run stops there."""
    aws.stubs["sagemaker"].add_client_error(
        "create_model", service_error_code="AccessDeniedException", service_message="Access denied",
        http_status_code=400, expected_params={
            "ModelName": NAME, "PrimaryContainer": {"Image": CUSTOM_IMAGE, "Environment": environment},
            "ExecutionRoleArn": ROLE,
        },
    )  # fmt: skip


CUSTOM_IMAGE = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/speakwire:custom"


def test_deploy_creates_the_default_voice_library_bucket_privately_and_passes_it_to_the_container(
    aws: FakeBoto3, smoked: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    queue_library(aws, exists=False)
    refuse_create_model(aws, library_environment())
    args = parse("--engine", "piper", "--image-uri", CUSTOM_IMAGE)

    assert args.func(args) == 1
    aws.assert_all_used()
    assert aws.calls == ["GetCallerIdentity", "HeadBucket", "CreateBucket", "PutPublicAccessBlock", "CreateModel"]
    out = capsys.readouterr().out
    assert f"voice library: s3://{LIBRARY_BUCKET}/{NAME}/" in out and "kept when the endpoint is deleted" in out
    assert f"aws s3 rm --recursive s3://{LIBRARY_BUCKET}/{NAME}/" in out
    assert f"arn:aws:s3:::{LIBRARY_BUCKET}/{NAME}/*" in out and "s3:ListBucket" in out  # the role's permissions


def test_a_library_bucket_of_another_account_stops_the_deploy_before_anything_is_created(
    aws: FakeBoto3, smoked: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    aws.stubs["sts"].add_response("get_caller_identity", {"Account": ACCOUNT}, {})
    owned = {"Bucket": LIBRARY_BUCKET, "ExpectedBucketOwner": ACCOUNT}
    aws.stubs["s3"].add_client_error("head_bucket", service_error_code="403", http_status_code=403,
                                     expected_params=owned)  # fmt: skip
    args = parse("--engine", "piper", "--image-uri", CUSTOM_IMAGE)

    assert args.func(args) == 1
    err = capsys.readouterr().err
    assert f"must be in account {ACCOUNT}" in err and "--voices-url" in err and "no endpoint was created" in err
    assert aws.calls == ["GetCallerIdentity", "HeadBucket"] and smoked == []  # no CreateBucket, no model


def test_voices_url_names_the_library_which_must_exist_already(
    aws: FakeBoto3, smoked: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    queue_library(aws, "team-voices")
    refuse_create_model(aws, library_environment("s3://team-voices/prod/"))
    args = parse("--engine", "piper", "--image-uri", CUSTOM_IMAGE, "--voices-url", "s3://team-voices/prod")
    assert args.func(args) == 1
    assert aws.calls == ["GetCallerIdentity", "HeadBucket", "CreateModel"]

    aws.calls.clear()
    aws.stubs["sts"].add_response("get_caller_identity", {"Account": ACCOUNT}, {})
    owned = {"Bucket": "gone-voices", "ExpectedBucketOwner": ACCOUNT}
    aws.stubs["s3"].add_client_error("head_bucket", service_error_code="404", http_status_code=404,
                                     expected_params=owned)  # fmt: skip
    args = parse("--engine", "piper", "--image-uri", CUSTOM_IMAGE, "--voices-url", "s3://gone-voices/prod")
    assert args.func(args) == 1
    assert "gone-voices (--voices-url) does not exist" in capsys.readouterr().err
    assert aws.calls == ["GetCallerIdentity", "HeadBucket"]
    aws.assert_all_used()


def test_no_voice_library_leaves_s3_alone_and_the_dlc_gets_none(aws: FakeBoto3, smoked: list[str]) -> None:
    refuse_create_model(aws, {})
    args = parse("--engine", "piper", "--image-uri", CUSTOM_IMAGE, "--no-voice-library")
    assert args.func(args) == 1
    assert aws.calls == ["CreateModel"]


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--env", "SPEAKWIRE_VOICES_URL=s3://a/b"), "use --voices-url"),
        (("--image", "dlc", "--voices-url", "s3://a/b"), "needs speakwire's image"),
        (("--voices-url", "s3://a/b", "--no-voice-library"), "contradict"),
        (("--voices-url", "https://a/b"), "s3://bucket/prefix"),
    ],
)
def test_contradictory_voice_library_flags_exit_2_before_any_aws_call(
    aws: FakeBoto3, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], says: str
) -> None:
    args = parse(*flags)
    assert args.func(args) == 2
    assert says in capsys.readouterr().err and aws.calls == []
