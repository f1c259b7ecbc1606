"""SageMakerBidiTransport against the real ``aws-sdk-sagemaker-runtime-http2`` 0.4.0 (Python ≥ 3.12).

No AWS endpoint is reachable, so the transport is driven through the SDK's own event-stream
machinery over an in-memory pipe: requests go through the real ``AWSEventPublisher`` and are
decoded back with the real event decoder; responses are serialized by the SDK's event
serializer and read by the real ``AWSEventReceiver`` (which raises modeled stream errors).
The client itself is built for real and sent to a closed local port, proving that the
static credentials are accepted and the request is signed before the transport fails.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import sys
from typing import Any

import pytest

from speakwire.client.transport import TransportClosed
from speakwire.deploy.sagemaker.bidi import (
    AwsCredentials,
    BidiClientUnavailableError,
    SageMakerBidiTransport,
    build_client,
    load_bidi_sdk,
    runtime_endpoint_uri,
)
from speakwire.deploy.sagemaker.smoke import run_smoke

CREDENTIALS = AwsCredentials("AKIDTESTTESTTESTTEST", "secret", "token")

needs_312 = pytest.mark.skipif(sys.version_info < (3, 12), reason="aws-sdk-sagemaker-runtime-http2 needs Python 3.12+")


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="checks the message shown on Python 3.11")
def test_on_python_311_the_sdk_is_refused_with_the_install_hint() -> None:
    load_bidi_sdk.cache_clear()

    with pytest.raises(BidiClientUnavailableError, match=r"Python >= 3\.12.*speakwire\[sagemaker-bidi\]"):
        load_bidi_sdk()


# Everything below runs only where the SDK can be installed.


@pytest.fixture
def sdk() -> Any:
    if sys.version_info < (3, 12):
        pytest.skip("aws-sdk-sagemaker-runtime-http2 needs Python 3.12+")
    pytest.importorskip("aws_sdk_sagemaker_runtime_http2", reason='pip install "speakwire[sagemaker-bidi]"')
    return load_bidi_sdk()


class Sink:
    """An AsyncWriter collecting what the publisher writes."""

    def __init__(self) -> None:
        self.data = bytearray()

    async def write(self, data: bytes) -> None:
        self.data.extend(data)


def _codec() -> Any:
    from aws_sdk_sagemaker_runtime_http2.config import Config

    return Config().protocol.payload_codec


async def _response_bytes(*events: Any) -> bytes:
    """Serialize response events exactly as the service side of the SDK would."""
    from smithy_aws_event_stream.aio import AWSEventPublisher

    sink = Sink()
    publisher = AWSEventPublisher[Any](payload_codec=_codec(), async_writer=sink, is_client_mode=False)
    for event in events:
        await publisher.send(event)
    return bytes(sink.data)


async def _transport(*response_events: Any) -> tuple[SageMakerBidiTransport, Sink]:
    from aws_sdk_sagemaker_runtime_http2.models import _ResponseStreamEventDeserializer
    from smithy_aws_event_stream.aio import AWSEventPublisher, AWSEventReceiver
    from smithy_core.aio.types import AsyncBytesReader

    requests = Sink()
    publisher = AWSEventPublisher[Any](payload_codec=_codec(), async_writer=requests)
    receiver = AWSEventReceiver[Any](
        payload_codec=_codec(),
        source=AsyncBytesReader(await _response_bytes(*response_events)),
        deserializer=_ResponseStreamEventDeserializer().deserialize,
    )
    return SageMakerBidiTransport(publisher, receiver), requests


def _part(sdk: Any, data: bytes, data_type: str, state: str = "COMPLETE") -> Any:
    from aws_sdk_sagemaker_runtime_http2.models import ResponsePayloadPart

    return sdk.PayloadPartEvent(value=ResponsePayloadPart(bytes_=data, data_type=data_type, completion_state=state))


@needs_312
def test_the_client_is_configured_for_the_8443_runtime_endpoint_with_sigv4_for_sagemaker(sdk: Any) -> None:
    client = build_client("us-west-2", CREDENTIALS)
    config = client._config

    assert config.endpoint_uri == "https://runtime.sagemaker.us-west-2.amazonaws.com:8443"
    assert runtime_endpoint_uri("us-west-2") == config.endpoint_uri
    assert config.region == "us-west-2"
    assert (config.aws_access_key_id, config.aws_secret_access_key, config.aws_session_token) == (
        "AKIDTESTTESTTESTTEST",
        "secret",
        "token",
    )
    scheme = next(iter(config.auth_schemes.values()))
    assert scheme._service == "sagemaker"
    assert type(config.aws_credentials_identity_resolver).__name__ == "StaticCredentialsResolver"


@needs_312
def test_the_request_models_take_the_fields_the_transport_sends(sdk: Any) -> None:
    request = sdk.Input(endpoint_name="ep", model_invocation_path="v1/audio/speech/stream")
    part = sdk.RequestPayloadPart(bytes_=b"{}", data_type="UTF8", completion_state="COMPLETE")
    event = sdk.RequestPayloadPartEvent(value=part)

    assert (request.endpoint_name, request.model_invocation_path) == ("ep", "v1/audio/speech/stream")
    assert event.value.bytes_ == b"{}"


@needs_312
async def test_sent_messages_are_complete_payload_parts_typed_utf8_or_binary(sdk: Any) -> None:
    from smithy_aws_event_stream.events import Event
    from smithy_core.aio.types import AsyncBytesReader

    transport, requests = await _transport()

    await transport.send_text('{"type":"input.done"}')
    await transport.send_bytes(b"\x00\x01")

    source = AsyncBytesReader(bytes(requests.data))
    first, second = await Event.decode_async(source), await Event.decode_async(source)
    assert first is not None and second is not None
    assert first.message.headers[":event-type"] == "PayloadPart"
    assert (first.message.headers["DataType"], first.message.headers["CompletionState"]) == (
        "UTF8",
        "COMPLETE",
    )
    assert first.message.payload == b'{"type":"input.done"}'
    assert (second.message.headers["DataType"], second.message.payload) == ("BINARY", b"\x00\x01")


@needs_312
async def test_received_parts_become_text_and_binary_messages_and_partial_runs_are_joined(sdk: Any) -> None:
    transport, _ = await _transport(
        _part(sdk, b'{"type":"audio.', "UTF8", "PARTIAL"),
        _part(sdk, b'start"}', "UTF8", "COMPLETE"),
        _part(sdk, b"\x10\x00\x20\x00", "BINARY"),
    )

    assert await transport.receive() == '{"type":"audio.start"}'
    assert await transport.receive() == b"\x10\x00\x20\x00"
    with pytest.raises(TransportClosed, match="stream ended"):
        await transport.receive()


@needs_312
async def test_a_model_stream_error_closes_the_transport_with_its_message(sdk: Any) -> None:
    from aws_sdk_sagemaker_runtime_http2.models import ModelStreamError

    transport, _ = await _transport(
        _part(sdk, b"{}", "UTF8"),
        sdk.ModelStreamErrorEvent(value=ModelStreamError(message="WebSocket closed: 1008", error_code="1008")),
    )

    assert await transport.receive() == "{}"
    with pytest.raises(TransportClosed, match="WebSocket closed: 1008") as closed:
        await transport.receive()
    assert closed.value.code == 1008
    with pytest.raises(TransportClosed):
        await transport.send_text("{}")  # closed stays closed
    await transport.aclose()
    await transport.aclose()  # twice is fine


@needs_312
async def test_the_smoke_test_runs_over_the_sdk_streams(sdk: Any, tmp_path: Any) -> None:
    pcm = b"\x01\x00" * 3000
    transport, requests = await _transport(
        _part(sdk, b'{"type":"audio.start","sample_rate":24000,"format":"pcm"}', "UTF8"),
        _part(sdk, pcm[:1001], "BINARY"),
        _part(sdk, pcm[1001:], "BINARY"),
        _part(sdk, b'{"type":"audio.done","error":false}', "UTF8"),
        _part(sdk, b'{"type":"session.done"}', "UTF8"),
    )

    result = await run_smoke(transport, output_path=tmp_path / "v.wav", timeout_s=5)

    assert result.ok, result.reason
    assert result.pcm_bytes == len(pcm)
    assert b"session.config" in requests.data


@needs_312
async def test_static_credentials_sign_the_request_and_only_the_network_fails(sdk: Any) -> None:
    with socket.socket() as probe:  # a local port that nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    with pytest.raises(TransportClosed) as closed:
        await SageMakerBidiTransport.connect(
            "speakwire-test",
            region="us-west-2",
            model_invocation_path="/v1/audio/speech/stream",
            credentials=CREDENTIALS,
            endpoint_uri=f"https://127.0.0.1:{port}",
            timeout_s=10,
        )

    assert "CONNECTION_REFUSED" in closed.value.reason.upper()
    assert "credential" not in closed.value.reason.lower()


@needs_312
# awscrt completes its connect future from a native thread after the deadline cancelled it and
# reports that as an unraisable InvalidStateError; it is noise from the SDK, not a failure here.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_connecting_gives_up_at_its_deadline(sdk: Any) -> None:
    # A listener that accepts TCP but never answers TLS: the SDK alone would wait forever.
    accepted: list[asyncio.StreamWriter] = []
    server = await asyncio.start_server(lambda _, writer: accepted.append(writer), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(TransportClosed, match=r"did not open within 0\.5 s"):
            await SageMakerBidiTransport.connect(
                "speakwire-test",
                region="us-west-2",
                credentials=CREDENTIALS,
                endpoint_uri=f"https://127.0.0.1:{port}",
                timeout_s=0.5,
            )
    finally:
        for writer in accepted:
            writer.close()
        server.close()
        await asyncio.sleep(0.3)  # let the native callback fire inside this test
        gc.collect()
