"""The one HTTP audio path: a response body that owns its utterance's admission and streams its output.

Every HTTP route that speaks (OpenAI, SageMaker's ``/invocations``, ElevenLabs, Cartesia, Deepgram) builds
its body from ``AudioOut`` parts and hands it here, so the slot is given back however the response ends
(done, failed, the client gone, a stalled reader let go) and a failed segment ends the body the same way.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping

from speakwire.output import AudioOut, AudioPart, SegmentEnd, UtteranceEnd
from speakwire.server.admission import Admitted
from speakwire.server.flow import StallingResponse, WriteStall

logger = logging.getLogger(__name__)


_CARRY_BYTES = (AudioPart, UtteranceEnd)
"""The parts whose ``data`` the body sends (a tuple built once: ``AudioPart | UtteranceEnd`` in the loop built a
union object per part)."""


class StreamAborted(Exception):
    """Raised inside a streamed body so the server drops the connection: the client must not take a
    truncated body for complete audio."""


def streamed_response(
    admitted: Admitted,
    body: AsyncIterator[bytes],
    stall: WriteStall,
    *,
    media_type: str,
    headers: Mapping[str, str] | None = None,
) -> StallingResponse:
    """``body`` as a streamed response; the admission is released however the response ends."""

    async def owning() -> AsyncIterator[bytes]:
        async with admitted:
            async for data in body:
                yield data

    return StallingResponse(owning(), stall, media_type=media_type, headers=headers, release=admitted.close)


def streamed_audio(
    admitted: Admitted,
    out: AudioOut,
    stall: WriteStall,
    *,
    media_type: str,
    headers: Mapping[str, str] | None = None,
) -> StallingResponse:
    """The encoded stream of ``out`` as a streamed response that owns its admission (``audio_bytes``)."""
    return StallingResponse(
        audio_bytes(out, admitted), stall, media_type=media_type, headers=headers, release=admitted.close
    )


async def audio_bytes(out: AudioOut, admitted: Admitted) -> AsyncIterator[bytes]:
    """The encoded stream as it is made, the admission released however it ends; a failed segment aborts the
    body (``StreamAborted``). One generator does both (not ``streamed_response`` around another): every
    layer of async generators costs the event loop a resumption per audio chunk."""
    async with admitted, contextlib.aclosing(out.all_parts(admitted.utterance, words=False)) as parts:
        async for part in parts:
            if isinstance(part, _CARRY_BYTES):
                if part.data:
                    yield part.data
            elif isinstance(part, SegmentEnd) and part.error is not None:
                logger.error("aborting the %s audio stream: %s", admitted.protocol, part.error.message)
                raise StreamAborted(part.error.message)


async def whole_file(out: AudioOut, admitted: Admitted) -> bytes:
    """The utterance as one file (``out`` with ``file`` framing); a failed segment raises its error."""
    async with admitted, contextlib.aclosing(out.all_parts(admitted.utterance, words=False)) as parts:
        async for part in parts:
            if isinstance(part, SegmentEnd) and part.error is not None:
                raise part.error
            if isinstance(part, UtteranceEnd):
                return part.data
    return b""
