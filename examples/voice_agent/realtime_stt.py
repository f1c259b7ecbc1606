"""A pipecat STT service for vLLM's realtime transcription API (Voxtral), over SageMaker's bidi stream or ws://.

vLLM's ``/v1/realtime`` (``vllm/entrypoints/openai/realtime/protocol.py``): the server greets with
``session.created``; the client sends ``session.update {model}``, then per utterance ``input_audio_buffer.commit``
(start), ``input_audio_buffer.append {audio: base64 PCM16 mono}`` as audio comes, ``input_audio_buffer.commit
{final: true}`` (its audio ended); the server answers ``transcription.delta {delta}`` as it decodes and
``transcription.done {text, usage}``, or ``error {error, code}``.

An utterance is what pipecat's VAD says it is: ``VADUserStartedSpeakingFrame`` starts one (with the last
``preroll_s`` of audio, which the VAD heard before it decided), ``VADUserStoppedSpeakingFrame`` ends it. Deltas
become ``InterimTranscriptionFrame`` s with the utterance's text so far, ``done`` a finalized
``TranscriptionFrame``. vLLM ignores a start while the previous utterance is still being decoded and then drops
the audio queued for it, so a new utterance waits (its audio held here) until the previous ``done``.

Two ways to reach the model, behind one small interface (``RealtimeConnection``): a SageMaker endpoint through
pipecat's ``SageMakerBidiClient`` (the AWS sample's Voxtral container: its bridge listens on SageMaker's default
path), or a ``ws://``/``wss://`` URL of a vLLM server. Errors and reconnects follow pipecat's NVIDIA SageMaker
STT: a session that cannot start is reported as permanent (``push_error``); an ``error`` event or a dropped
stream is reported and the session reopened (for an ``error``, once the user has stopped speaking, as pipecat's
``_request_reconnect`` does; a dropped stream at once, since there is no session left to spare).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections import deque
from collections.abc import AsyncGenerator
from typing import Any, Protocol

from loguru import logger
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    InterimTranscriptionFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessorSetup
from pipecat.services.settings import STTSettings
from pipecat.services.stt_service import STTService
from pipecat.transcriptions.language import Language
from pipecat.utils.time import time_now_iso8601
from pipecat.utils.tracing.service_decorators import traced_stt

VOXTRAL = "mistralai/Voxtral-Mini-4B-Realtime-2602"
RATE = 16_000
"""Voxtral's input rate: the service asks pipecat for 16 kHz audio."""


class RealtimeConnection(Protocol):
    """One realtime session's JSON events, whatever carries them."""

    async def send_event(self, event: dict[str, Any]) -> None: ...

    async def receive_event(self) -> dict[str, Any] | None:
        """The next event; None once the stream has ended."""
        ...

    async def close(self) -> None: ...


class WebSocketConnection:
    """vLLM's realtime API at a ``ws://``/``wss://`` URL (``.../v1/realtime``)."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws

    @classmethod
    async def open(cls, url: str) -> WebSocketConnection:
        from websockets.asyncio.client import connect

        return cls(await connect(url, max_size=None))

    async def send_event(self, event: dict[str, Any]) -> None:
        await self._ws.send(json.dumps(event))

    async def receive_event(self) -> dict[str, Any] | None:
        from websockets.exceptions import ConnectionClosedOK

        try:
            frame = await self._ws.recv()
        except ConnectionClosedOK:
            return None
        return dict(json.loads(frame))

    async def close(self) -> None:
        await self._ws.close()


class SageMakerConnection:
    """The realtime API on a SageMaker endpoint, through pipecat's ``SageMakerBidiClient``.

    Events go as UTF8 payload parts (text frames in the container, as the AWS sample's client sends them); a
    container frame may come back in PARTIAL parts closed by a COMPLETE one, which are joined.
    """

    def __init__(self, client: Any) -> None:
        self._client = client

    @classmethod
    async def open(cls, endpoint_name: str, region: str, invocation_path: str | None) -> SageMakerConnection:
        from pipecat.services.aws.sagemaker.bidi_client import SageMakerBidiClient

        client = SageMakerBidiClient(
            endpoint_name=endpoint_name,
            region=region,
            model_invocation_path=invocation_path,
            model_query_string=None,
        )
        await client.start_session()
        return cls(client)

    async def send_event(self, event: dict[str, Any]) -> None:
        await self._client.send_json(event)

    async def receive_event(self) -> dict[str, Any] | None:
        from aws_sdk_sagemaker_runtime_http2.models import ResponseStreamEventPayloadPart

        data = b""
        while True:
            result = await self._client.receive_response()
            if result is None:
                return None
            if not isinstance(result, ResponseStreamEventPayloadPart):
                error = getattr(result, "value", result)
                raise ConnectionError(f"SageMaker stream error: {getattr(error, 'message', error)}")
            data += result.value.bytes_ or b""
            if result.value.completion_state != "PARTIAL" and data:
                return dict(json.loads(data.decode("utf-8")))

    async def close(self) -> None:
        await self._client.close_session()


class VLLMRealtimeSTTService(STTService):
    """Speech-to-text with vLLM's realtime API (Voxtral Mini 4B Realtime), on SageMaker or at a URL.

    Example::

        stt = VLLMRealtimeSTTService(endpoint_name="voxtral-realtime", region="us-east-1")
        stt = VLLMRealtimeSTTService(url="ws://gpu-box:8000/v1/realtime")
    """

    def __init__(
        self,
        *,
        url: str | None = None,
        endpoint_name: str | None = None,
        region: str = "us-east-1",
        invocation_path: str | None = None,
        model: str = VOXTRAL,
        language: Language = Language.EN,
        preroll_s: float = 0.6,
        **kwargs: Any,
    ) -> None:
        """Reach the model at ``url``, or on SageMaker endpoint ``endpoint_name`` in ``region``.

        Args:
            url: A vLLM server's realtime URL (``ws://host:8000/v1/realtime``).
            endpoint_name: A SageMaker endpoint serving the realtime API on its bidirectional stream.
            region: The endpoint's AWS region.
            invocation_path: The path SageMaker opens in the container; None for its default path, where the
                AWS sample's bridge listens (``v1/realtime`` for a container serving vLLM directly).
            model: The model name ``session.update`` sends (vLLM's served model name).
            language: Reported on the transcription frames (Voxtral detects the language itself).
            preroll_s: Audio kept from before the VAD's start, sent with the utterance.
            **kwargs: Passed to pipecat's ``STTService``.
        """
        if (url is None) == (endpoint_name is None):
            raise ValueError("give either url or endpoint_name")
        kwargs.setdefault("sample_rate", RATE)
        super().__init__(settings=STTSettings(model=model, language=language), **kwargs)
        self._url = url
        self._endpoint_name = endpoint_name
        self._region = region
        self._invocation_path = invocation_path
        self._model = model
        self._language = language
        self._preroll_s = preroll_s

        self._connection: RealtimeConnection | None = None
        self._session_open = asyncio.Event()
        self._receive_task: asyncio.Task[None] | None = None
        self._closing = False
        self._speaking = False
        """Between the VAD's start and stop: audio belongs to an utterance."""
        self._started = False
        """The utterance's start commit was sent (its audio goes straight out)."""
        self._awaiting_done = False
        """A final commit was sent and its ``transcription.done`` has not come."""
        self._held: deque[bytes] = deque()
        """Audio not sent yet: the pre-roll between utterances, or an utterance waiting for the previous done."""
        self._held_bytes = 0
        self._text = ""
        self._warned_no_session = False

    def can_generate_metrics(self) -> bool:
        return True

    # ── Lifecycle ────────────────────────────────────────────────────────────

    async def setup(self, setup: FrameProcessorSetup) -> None:
        await super().setup(setup)
        await self._connect()

    async def stop(self, frame: EndFrame) -> None:
        await super().stop(frame)
        await self._disconnect()

    async def cancel(self, frame: CancelFrame) -> None:
        await super().cancel(frame)
        await self._disconnect()

    async def cleanup(self) -> None:
        await super().cleanup()
        await self._disconnect()

    # ── Audio and VAD ────────────────────────────────────────────────────────

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame | None, None]:
        """Send an utterance's audio as it comes; keep the rest as pre-roll. Results come from the receiver."""
        if self._connection is None:
            if not self._warned_no_session:
                self._warned_no_session = True
                logger.warning(f"{self}: no realtime session, audio is being dropped")
            yield None
            return
        try:
            if self._started:
                await self._append(audio)
            else:
                self._hold(audio)
        except Exception as e:
            # The stream is gone: the receiver reports that once and reconnects.
            logger.warning(f"{self}: sending audio failed: {e}")
        yield None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        try:
            if isinstance(frame, VADUserStartedSpeakingFrame):
                self._speaking = True
                await self._start_utterance()
            elif isinstance(frame, VADUserStoppedSpeakingFrame):
                self._speaking = False
                await self._end_utterance()
        except Exception as e:
            await self.push_error(error_msg=f"{self}: {e}", exception=e)

    def _hold(self, audio: bytes) -> None:
        self._held.append(audio)
        self._held_bytes += len(audio)
        if self._speaking:
            return  # an utterance waiting for the previous done: keep all of it
        limit = int(self._preroll_s * self.sample_rate) * 2
        while self._held_bytes - len(self._held[0]) >= limit:
            self._held_bytes -= len(self._held.popleft())

    async def _append(self, audio: bytes) -> None:
        assert self._connection is not None
        await self._connection.send_event(
            {"type": "input_audio_buffer.append", "audio": base64.b64encode(audio).decode("ascii")}
        )

    async def _start_utterance(self) -> None:
        """Commit (start) and send the held audio, unless the previous utterance's done is still to come."""
        if self._connection is None or self._started or self._awaiting_done or not self._speaking:
            return
        await self._connection.send_event({"type": "input_audio_buffer.commit"})
        self._started = True
        self._text = ""
        while self._held:
            await self._append(self._held.popleft())
        self._held_bytes = 0

    async def _end_utterance(self) -> None:
        if self._connection is None or not self._started:
            return
        await self._connection.send_event({"type": "input_audio_buffer.commit", "final": True})
        self._started = False
        self._awaiting_done = True

    # ── Connection ───────────────────────────────────────────────────────────

    async def _open_session(self) -> None:
        if self._url is not None:
            connection: RealtimeConnection = await WebSocketConnection.open(self._url)
        else:
            assert self._endpoint_name is not None
            connection = await SageMakerConnection.open(self._endpoint_name, self._region, self._invocation_path)
        await connection.send_event({"type": "session.update", "model": self._model})
        self._connection = connection
        self._session_open.set()
        self._started = self._awaiting_done = False
        self._warned_no_session = False
        await self._start_utterance()  # the user was speaking when the session was reopened

    async def _close_session(self) -> None:
        connection, self._connection = self._connection, None
        self._session_open.clear()
        if connection is not None:
            try:
                await connection.close()
            except Exception as e:
                logger.warning(f"{self}: closing the realtime session: {e}")

    async def _connect(self) -> None:
        self._closing = False
        try:
            await self._open_session()
        except Exception as e:
            # Nothing reconnects a session that never started: this call cannot be transcribed.
            await self.push_error(
                error_msg=f"{self}: cannot open the realtime session: {e}",
                exception=e,
                force_treat_as_permanent=True,
            )
            await self._call_event_handler("on_connection_error", str(e))
            return
        self._receive_task = self.create_task(self._receive_events())
        await self._call_event_handler("on_connected")

    async def _disconnect(self) -> None:
        self._closing = True
        if self._receive_task is not None:
            await self.cancel_task(self._receive_task)
            self._receive_task = None
        if self._connection is not None:
            await self._close_session()
            await self._call_event_handler("on_disconnected")

    async def _do_reconnect(self) -> None:
        """pipecat's reconnect cycle (``STTService._reconnect``) calls this; the receiver reads the new session."""
        await self._close_session()
        await self._open_session()

    async def _receive_events(self) -> None:
        while not self._closing:
            connection = self._connection
            if connection is None:  # a reconnect deferred, or one that failed: wait for a session
                await self._session_open.wait()
                continue
            try:
                event = await connection.receive_event()
                if event is None:
                    raise ConnectionError("the realtime stream ended")
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if self._closing or connection is not self._connection:
                    continue  # closed on purpose, or already replaced by a reconnect
                await self.push_error(error_msg=f"{self}: realtime session lost: {e}", exception=e)
                # Not deferred until the user stops speaking (``_request_reconnect``): the stream is already
                # gone, and pipecat buffers the audio that arrives while the new one opens.
                await self._reconnect()
                continue
            await self._handle_event(event)

    async def _handle_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "transcription.delta":
            delta = str(event.get("delta", ""))
            if delta:
                self._text += delta
                await self.push_frame(
                    InterimTranscriptionFrame(
                        self._text.strip(), self._user_id, time_now_iso8601(), self._language, result=event
                    )
                )
        elif kind == "transcription.done":
            text = str(event.get("text", "")).strip()
            self._awaiting_done = False
            self._text = ""
            if text:
                await self.emit_stt_usage_metrics()
                await self.push_frame(
                    TranscriptionFrame(
                        text, self._user_id, time_now_iso8601(), self._language, result=event, finalized=True
                    )
                )
                await self._handle_transcription(text, True, self._language)
            await self._start_utterance()  # an utterance that began while this one was being decoded
        elif kind == "error":
            await self.push_error(error_msg=f"{self}: vLLM realtime error: {event.get('error')} ({event.get('code')})")
            await self._request_reconnect()
        else:
            logger.debug(f"{self}: {kind}")

    @traced_stt
    async def _handle_transcription(self, transcript: str, is_final: bool, language: Language | None = None) -> None:
        pass
