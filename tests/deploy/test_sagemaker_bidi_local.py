"""The SageMaker bidirectional transport against our real server, through a local stand-in for SageMaker.

SageMaker relays each WebSocket frame of the container as one PayloadPart (UTF8 → text,
BINARY → binary; a large message as PARTIAL parts closed by COMPLETE) and reports the
container's Close frame as a ModelStreamError. The loopback relay (``tests/support/sagemaker_loopback.py``,
here with ``split_at``) does exactly that over a real WebSocket to a real speakwire, using the SDK's own
model classes, so the transport and the protocol client run unchanged. Python ≥ 3.12 only (the SDK's
requirement).
"""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.skipif(sys.version_info < (3, 12), reason="aws-sdk-sagemaker-runtime-http2 needs Python 3.12")

if sys.version_info >= (3, 12):
    from speakwire.client.stream import SpeechStreamClient
    from speakwire.client.transport import TransportClosed
    from speakwire.deploy.sagemaker.bidi import SageMakerBidiTransport
    from speakwire.deploy.sagemaker.smoke import run_smoke
    from support.live_server import LiveServer
    from support.sagemaker_loopback import RelayInput, open_relay


async def relay_transport(server: LiveServer, split_at: int = 1000) -> tuple[SageMakerBidiTransport, RelayInput]:
    stream = await open_relay(server.settings.port, split_at=split_at)
    return SageMakerBidiTransport(stream.input_stream, stream.receiver), stream.input_stream


async def test_protocol_client_works_through_the_sagemaker_transport(server: LiveServer) -> None:
    transport, sent = await relay_transport(server)
    async with SpeechStreamClient(transport) as client:
        await client.configure(response_format="pcm", stream_audio=True)
        result = await client.speak(["Hello through ", "SageMaker. ", "Fragments are reassembled."], piece_delay_s=0.05)
    assert result.time_to_first_audio_s is not None
    assert len(result.audio) > 24000
    assert [e["type"] for e in result.events].count("audio.done") >= 2
    assert all(p.data_type == "UTF8" and p.completion_state == "COMPLETE" for p in sent.sent)


async def test_smoke_test_passes_against_our_server(server: LiveServer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    transport, _ = await relay_transport(server, split_at=777)
    result = await run_smoke(
        transport,
        text="Smoke test over the bidirectional stream.",
        voice="alloy",
        language="English",
        output_path=tmp_path / "validation-output.wav",
        timeout_s=60,
    )
    assert result.ok, result
    assert (tmp_path / "validation-output.wav").stat().st_size > 2044


async def test_a_container_close_reaches_the_client_as_transport_closed(server: LiveServer) -> None:
    transport, _ = await relay_transport(server)
    async with SpeechStreamClient(transport) as client:
        await client.configure(response_format="wav", stream_audio=True)  # invalid: the server closes with 1008
        error = await client.receive()
        assert isinstance(error, dict) and error["type"] == "error"
        with pytest.raises(TransportClosed) as closed:
            await client.receive()
    assert closed.value.code == 1008
