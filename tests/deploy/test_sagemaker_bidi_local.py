"""The SageMaker bidirectional transport against our real server, through a local stand-in for SageMaker.

SageMaker relays each WebSocket frame of the container as one PayloadPart (UTF8 → text,
BINARY → binary; a fragmented message as PARTIAL parts closed by COMPLETE) and reports the
container's Close frame as a ModelStreamError. ``SageMakerRelay`` does exactly that over a
real WebSocket to a real speakwire, using the SDK's own model classes, so the transport and
the protocol client run unchanged. Python ≥ 3.12 only (the SDK's requirement).
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(sys.version_info < (3, 12), reason="aws-sdk-sagemaker-runtime-http2 needs Python 3.12")

if sys.version_info >= (3, 12):
    from websockets.asyncio.client import ClientConnection, connect
    from websockets.exceptions import ConnectionClosed

    from speakwire.client.stream import SpeechStreamClient
    from speakwire.client.transport import TransportClosed
    from speakwire.deploy.sagemaker.bidi import SageMakerBidiTransport
    from speakwire.deploy.sagemaker.smoke import run_smoke
    from support.live_server import LiveServer


class _RelayInput:
    """What the SDK's input stream is: request payload parts in → WebSocket frames to the container."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.parts: list[Any] = []

    async def send(self, event: Any) -> None:
        part = event.value
        self.parts.append(part)
        await self.ws.send(part.bytes_.decode() if part.data_type == "UTF8" else part.bytes_)

    async def close(self) -> None:
        await self.ws.close()


class _RelayReceiver:
    """What the SDK's receiver is: container frames → response payload parts (large ones split, as SageMaker may)."""

    def __init__(self, ws: ClientConnection, split_at: int) -> None:
        from aws_sdk_sagemaker_runtime_http2 import models

        self.models = models
        self.ws = ws
        self.split_at = split_at
        self.pending: list[Any] = []

    async def receive(self) -> Any:
        m = self.models
        if not self.pending:
            try:
                message = await self.ws.recv()
            except ConnectionClosed as exc:
                code = exc.rcvd.code if exc.rcvd else 1006
                raise m.ModelStreamError(message=f"container closed the stream ({code})", error_code=str(code)) from exc
            data, kind = (message.encode(), "UTF8") if isinstance(message, str) else (message, "BINARY")
            pieces = [data[i : i + self.split_at] for i in range(0, len(data), self.split_at)] or [b""]
            for n, piece in enumerate(pieces):
                state = "COMPLETE" if n == len(pieces) - 1 else "PARTIAL"
                self.pending.append(
                    m.ResponseStreamEventPayloadPart(
                        value=m.ResponsePayloadPart(bytes_=piece, data_type=kind, completion_state=state)
                    )
                )
        return self.pending.pop(0)

    async def close(self) -> None:
        await self.ws.close()


async def relay_transport(server: LiveServer, split_at: int = 1000) -> tuple[SageMakerBidiTransport, _RelayInput]:
    ws = await connect(f"ws://127.0.0.1:{server.settings.port}/invocations-bidirectional-stream")
    sent = _RelayInput(ws)
    return SageMakerBidiTransport(sent, _RelayReceiver(ws, split_at)), sent


async def test_protocol_client_works_through_the_sagemaker_transport(server: LiveServer) -> None:
    transport, sent = await relay_transport(server)
    async with SpeechStreamClient(transport) as client:
        await client.configure(response_format="pcm", stream_audio=True)
        result = await client.speak(["Hello through ", "SageMaker. ", "Fragments are reassembled."], piece_delay_s=0.05)
    assert result.time_to_first_audio_s is not None
    assert len(result.audio) > 24000
    assert [e["type"] for e in result.events].count("audio.done") >= 2
    assert all(p.data_type == "UTF8" and p.completion_state == "COMPLETE" for p in sent.parts)


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
