"""Serve one speech request over the shared pipeline, in the delivery the client asked for."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator

from starlette.responses import Response

from speakwire.encoders.registry import CONTENT_TYPES
from speakwire.output import AudioOut, AudioPart, OutputSpec, SegmentEnd, UtteranceEnd, WordsPart
from speakwire.server.admission import Admitted, admit
from speakwire.server.audio_response import streamed_audio, streamed_response, whole_file
from speakwire.server.flow import file_response, write_stall
from speakwire.server.options import resolve_speech
from speakwire.server.speech.input_check import InputErrors, check_input
from speakwire.server.speech.protocol import SpeechRequest
from speakwire.server.state import ServerState
from speakwire.server.stream.protocol import sentence_timestamps
from speakwire.synthesis import Usage

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
    delivery = body.delivery(accept)
    # The text is already checked against max_input_chars, which an operator may set above the
    # utterance's default buffer; left at the default, feed() would refuse it after admission.
    admitted = admit(state, resolved, protocol=protocol, max_buffer_chars=state.settings.max_input_chars)
    admitted.say(text)
    # Opened once synthesis has started: an FFmpeg codec opens on the encode pool while the engine works.
    try:
        out = await AudioOut.open(OutputSpec(fmt, rate, "file" if delivery == "file" else "stream"))
    except BaseException:
        admitted.close()  # a rate the codec refuses: no response will own the slot
        raise
    headers = audio_headers(rate)
    words = bool(body.word_timestamps) and delivery == "sse"
    ignored = [*body.ignored_fields, *resolved.ignored_fields]
    ignored += ["word_timestamps"] if body.word_timestamps and not words else []
    if ignored:
        _note_ignored(ignored)
        headers["X-Ignored-Fields"] = ", ".join(ignored)
    stall = write_stall(state, protocol)
    if delivery == "file":
        data = await whole_file(out, admitted)
        return file_response(data, stall, media_type=CONTENT_TYPES[fmt], headers=headers)
    if delivery == "audio":
        return streamed_audio(admitted, out, stall, media_type=CONTENT_TYPES[fmt], headers=headers)
    return streamed_response(admitted, _sse_stream(out, admitted, words), stall, media_type="text/event-stream",
                             headers=headers)  # fmt: skip


def _sse(event: dict[str, object]) -> bytes:
    return f"data: {json.dumps(event, separators=(',', ':'))}\n\n".encode()


async def _sse_stream(out: AudioOut, admitted: Admitted, words: bool = False) -> AsyncIterator[bytes]:
    """SSE deltas; with ``words``, a ``speech.audio.words`` event after the delta of the audio they start in (an
    engine's), or as soon as a sentence's words are aligned (an aligner's: later audio may come first)."""
    async for part in out.parts(admitted.utterance):
        if isinstance(part, AudioPart):
            if part.data:
                yield _sse({"type": "speech.audio.delta", "audio": base64.b64encode(part.data).decode()})
            if words and part.words:
                yield _sse({"type": "speech.audio.words", "words": sentence_timestamps(part.words, 0.0, 0)})
        elif isinstance(part, WordsPart):
            if words and part.words:
                yield _sse({"type": "speech.audio.words", "words": sentence_timestamps(part.words, 0.0, 0)})
        elif isinstance(part, SegmentEnd) and part.error is not None:
            yield _sse({"type": "speech.audio.error", "error": part.error.to_dict()})
            return
        elif isinstance(part, UtteranceEnd):
            if part.data:
                yield _sse({"type": "speech.audio.delta", "audio": base64.b64encode(part.data).decode()})
            yield _sse({"type": "speech.audio.done", "usage": usage_body(part.usage)})
