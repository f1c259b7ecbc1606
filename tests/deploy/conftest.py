"""Real boto3 clients with botocore Stubbers for the SageMaker deploy tests.

Stubber checks every queued response against the real SageMaker / Application Auto
Scaling models and every call's operation and parameters against what the test queued,
in order; ``assert_no_pending_responses`` at teardown proves no expected call was skipped.
No credentials or network are involved: a Stubber answers before anything is signed or sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from sagemaker_stubs import NAME, REGION, ROLE, Stubbed

from speakwire.deploy.sagemaker.settings import DeploySettings


def _client(service: str) -> Any:
    return boto3.session.Session(
        region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    ).client(service)


@pytest.fixture
def sm() -> Iterator[Stubbed]:
    """A SageMaker client whose every call must have been queued on ``sm.stub``."""
    client = _client("sagemaker")
    with Stubber(client) as stub:
        yield Stubbed(client, stub)
        stub.assert_no_pending_responses()


@pytest.fixture
def autoscaling() -> Iterator[Stubbed]:
    client = _client("application-autoscaling")
    with Stubber(client) as stub:
        yield Stubbed(client, stub)
        stub.assert_no_pending_responses()


@pytest.fixture
def runtime() -> Iterator[Stubbed]:
    client = _client("sagemaker-runtime")
    with Stubber(client) as stub:
        yield Stubbed(client, stub)
        stub.assert_no_pending_responses()


@pytest.fixture
def s3() -> Iterator[Stubbed]:
    """An S3 client (the voice library's bucket) whose every call must have been queued."""
    client = _client("s3")
    with Stubber(client) as stub:
        yield Stubbed(client, stub)
        stub.assert_no_pending_responses()


@pytest.fixture
def settings() -> DeploySettings:
    return DeploySettings(
        endpoint_name=NAME,
        region=REGION,
        role_arn=ROLE,
        image_uri=f"763104351884.dkr.ecr.{REGION}.amazonaws.com/vllm:omni-sagemaker-cuda-v1.5",
        instance_types=("ml.g6.xlarge", "ml.g5.xlarge"),
    )
