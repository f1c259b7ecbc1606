"""reported_capacity(): the capacity /ready reports, read the only way SageMaker allows — InvokeEndpoint, route=/ready.

The first test is end to end with nothing stubbed: boto3's real ``sagemaker-runtime`` client →
the local SageMaker runtime → a real speakwire server in SageMaker mode; the others stub the
runtime to show what an image without the report (the vLLM-Omni DLC) does.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.response import StreamingBody
from sagemaker_stubs import NAME, Stubbed

from speakwire.deploy.sagemaker.capacity_probe import CapacityProbeError, reported_capacity
from speakwire.deploy.sagemaker.local_runtime import LocalRuntime, LocalRuntimeConfig
from speakwire.engines.piper import PiperEngine
from speakwire.server.sagemaker.config import resolve_sagemaker_settings
from support.live_server import LiveServer, start_server

PROBE = {
    "EndpointName": NAME,
    "ContentType": "application/json",
    "Accept": "application/json",
    "CustomAttributes": "route=/ready",
    "Body": b"{}",
}


@pytest.fixture(scope="module")
def sagemaker_server(piper_engine: PiperEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    settings = resolve_sagemaker_settings({}, model_dir=tmp_path_factory.mktemp("nothing-mounted")).settings
    live = start_server(settings, engine=piper_engine)
    yield live
    live.stop()


def test_the_capacity_comes_back_through_invoke_endpoint_as_ready_reports_it(sagemaker_server: LiveServer) -> None:
    ready = httpx.get(f"{sagemaker_server.url}/ready").json()
    with LocalRuntime(LocalRuntimeConfig(container_url=sagemaker_server.url)) as runtime:
        client = boto3.session.Session(
            region_name="us-west-2", aws_access_key_id="testing", aws_secret_access_key="testing"
        ).client("sagemaker-runtime", endpoint_url=runtime.url, config=Config(retries={"total_max_attempts": 1}))

        capacity = reported_capacity(client, NAME)

    assert capacity.streams == ready["capacity"]["streams"] >= 1
    assert capacity.source == ready["capacity"]["source"]


def _body(payload: bytes) -> dict[str, Any]:
    return {"Body": StreamingBody(io.BytesIO(payload), len(payload)), "ContentType": "application/json"}


def test_a_ready_without_capacity_is_an_error_naming_what_came_back(runtime: Stubbed) -> None:
    runtime.stub.add_response("invoke_endpoint", _body(json.dumps({"status": "ready"}).encode()), PROBE)

    with pytest.raises(CapacityProbeError, match=r"no capacity\.streams"):
        reported_capacity(runtime.client, NAME)


def test_an_image_that_refuses_the_route_is_an_error_with_the_containers_message(runtime: Stubbed) -> None:
    runtime.stub.add_client_error(
        "invoke_endpoint",
        service_error_code="ModelError",
        service_message='Received client error (404) from primary with message "Not Found".',
        http_status_code=424,
        expected_params=PROBE,
    )

    with pytest.raises(CapacityProbeError, match=r"route=/ready failed: Received client error \(404\)"):
        reported_capacity(runtime.client, NAME)
