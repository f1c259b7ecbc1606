"""Serve one speech request over the shared pipeline, in the delivery the client asked for."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator

from starlette.responses import Response

from speakwire.audio.chunk import Float32Array
from speakwire.encoders.off_loop import open_encoder
from speakwire.encoders.registry import CONTENT_TYPES, create_encoder, encode_file
from speakwire.server.flow import StallingResponse, file_response, write_stall
from speakwire.server.options import resolve_speech
from speakwire.server.speech.input_check import InputErrors, check_input
from speakwire.server.speech.protocol import SpeechRequest
from speakwire.server.state import ServerState
from speakwire.server.stream.protocol import sentence_timestamps
from speakwire.server.turns import close_utterance, open_utterance
from speakwire.synthesis import AudioReady, SegmentFinished, Usage, Utterance, UtteranceFinished

logger = logging.getLogger(__name__)

INPUT_ERRORS = InputErrors(
    param="input",
    empty="Input text cannot be empty.",
    unspeakable="Input has nothing to speak: no letters or digits once control characters, invisible "
    "formatting characters and invalid (surrogate) code points are removed.",
    too_long="Input is {length} characters; the limit is {limit}. Split the text, or stream it over "
    "the WebSocket /v1/audio/speech/stream.",
)


def audio_headers(sample_rate: int) -> dict[str, str]:
    return {"X-Audio-Sample-Rate": str(sample_rate), "X-Audio-Channels": "1", "Cache-Control": "no-store"}


def usage_body(usage: Usage) -> dict[str, object]:
    """OpenAI's usage object (input tokens = characters, output tokens = 12.5 Hz audio frames) plus our timings."""
    output_tokens = round(usage.audio_s * 12.5)
    return {
        "input_tokens": usage.characters,
        "output_tokens": output_tokens,
        "total_tokens": usage.characters + output_tokens,
        **usage.to_dict(),
    }


_logged_ignored: set[str] = set()


def _note_ignored(fields: list[str]) -> None:
    """Log each unknown field name once per process: enough to notice a client's habit, not a flood."""
    new = [name for name in fields if name not in _logged_ignored]
    if new:
        _logged_ignored.update(new)
        logger.info("ignoring request fields this server does not use: %s", ", ".join(new))


async def create_speech(
    state: ServerState, body: SpeechRequest, *, protocol: str = "http", accept: str = ""
) -> Response:
    engine, _, _ = state.require_ready()
    text = body.input
    check_input(text, state.settings.max_input_chars, INPUT_ERRORS)
    resolved = await resolve_speech(state, engine, body.options())
    fmt, rate = resolved.response_format, resolved.output_rate
    # The text is already checked against max_input_chars, which an operator may set above the
    # utterance's default buffer; left at the default, feed() would refuse it after admission.
    utterance = open_utterance(state, resolved, protocol=protocol, max_buffer_chars=state.settings.max_input_chars)
    try:
        utterance.feed(text)
        utterance.finish()
    except BaseException:
        close_utterance(state, utterance, protocol)  # no response will close it: give the slot back now
        raise
    headers = audio_headers(rate)
    delivery = body.delivery(accept)
    words = bool(body.word_timestamps) and delivery == "sse"
    ignored = body.ignored_fields + (["word_timestamps"] if body.word_timestamps and not words else [])
    if ignored:
        _note_ignored(ignored)
        headers["X-Ignored-Fields"] = ", ".join(ignored)
    stall = write_stall(state, protocol)
    if delivery == "file":
        try:
            data = await _whole_file(utterance, fmt, rate)
        finally:
            close_utterance(state, utterance, protocol)
        return file_response(data, stall, media_type=CONTENT_TYPES[fmt], headers=headers)
    stream = _raw_stream(utterance, fmt, rate) if delivery == "audio" else _sse_stream(utterance, fmt, rate, words)
    return StallingResponse(
        _closing(state, utterance, protocol, stream), stall,
        media_type="text/event-stream" if delivery == "sse" else CONTENT_TYPES[fmt], headers=headers,
    )  # fmt: skip


async def _closing(
    state: ServerState, utterance: Utterance, protocol: str, stream: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    """Close the utterance however the response ends: done, failed, or the client went away (cancel)."""
    try:
        async for data in stream:
            yield data
    finally:
        close_utterance(state, utterance, protocol)


async def _whole_file(utterance: Utterance, fmt: str, rate: int) -> bytes:
    parts: list[Float32Array] = []
    async for event in utterance.events():
        if isinstance(event, AudioReady):
            parts.append(event.samples)
        elif isinstance(event, SegmentFinished) and event.error is not None:
            raise event.error
    return await asyncio.to_thread(encode_file, fmt, rate, parts)


class StreamAborted(Exception):
    """Raised inside a raw audio stream so the server drops the connection: the client must not take a
    truncated body for complete audio."""


async def _raw_stream(utterance: Utterance, fmt: str, rate: int) -> AsyncIterator[bytes]:
    encoder = await open_encoder(fmt, lambda: create_encoder(fmt, rate, streaming=True))
    pending = encoder.header()  # sent together with the first audio, so the first byte is audio
    async for event in utterance.events():
        if isinstance(event, AudioReady):
            data = pending + await encoder.encode(event.samples)
            pending = b""
            if data:
                yield data
        elif isinstance(event, SegmentFinished) and event.error is not None:
            logger.error("aborting audio stream: %s", event.error.message)
            raise StreamAborted(event.error.message)
    yield pending + await encoder.finish()


def _sse(event: dict[str, object]) -> bytes:
    return f"data: {json.dumps(event, separators=(',', ':'))}\n\n".encode()


async def _sse_stream(utterance: Utterance, fmt: str, rate: int, words: bool = False) -> AsyncIterator[bytes]:
    """SSE deltas; with ``words``, a ``speech.audio.words`` event after the delta of the audio they start in."""
    encoder = await open_encoder(fmt, lambda: create_encoder(fmt, rate, streaming=True))
    pending = encoder.header()
    async for event in utterance.events():
        if isinstance(event, AudioReady):
            data = pending + await encoder.encode(event.samples)
            pending = b""
            if data:
                yield _sse({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()})
            if words and event.words:
                yield _sse({"type": "speech.audio.words", "words": sentence_timestamps(event.words, 0.0, 0)})
        elif isinstance(event, SegmentFinished) and event.error is not None:
            yield _sse({"type": "speech.audio.error", "error": event.error.to_dict()})
            return
        elif isinstance(event, UtteranceFinished):
            tail = pending + await encoder.finish()
            if tail:
                yield _sse({"type": "speech.audio.delta", "audio": base64.b64encode(tail).decode()})
            yield _sse({"type": "speech.audio.done", "usage": usage_body(event.usage)})
