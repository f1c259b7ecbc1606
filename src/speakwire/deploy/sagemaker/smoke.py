"""Smoke test: one short utterance over the streaming protocol, checked end to end.

Runs over any :class:`~speakwire.client.transport.StreamTransport` — the SageMaker
bidirectional stream in production, a local WebSocket or an in-test fake otherwise — and
checks what the AWS sample checks: an ``audio.start``, an ``audio.done`` without error,
and more than 2000 bytes of PCM (a tenth of a second would already be ~4800). The whole
exchange has one deadline, so a server that trickles a frame every few seconds cannot
stretch the test past it the way per-frame waits would.
"""

from __future__ import annotations

import asyncio
import json
import time
import wave
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from speakwire.client.transport import StreamTransport, TransportClosed

DEFAULT_TEXT = "Hello from speakwire on Amazon SageMaker. This sentence checks that streaming speech works."
DEFAULT_VOICE = "Vivian"
DEFAULT_LANGUAGE = "English"
DEFAULT_OUTPUT = Path("validation-output.wav")
DEFAULT_TIMEOUT_S = 180.0  # the DLC's first request compiles for ~67 s
DEFAULT_SAMPLE_RATE = 24000
MIN_PCM_BYTES = 2000


@dataclass(frozen=True, slots=True)
class SmokeResult:
    """Outcome of :func:`run_smoke`; ``reason`` says why it failed (empty when ``ok``)."""

    ok: bool
    reason: str
    pcm_bytes: int
    sample_rate: int
    events: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    output_path: Path | None = None
    first_audio_s: float | None = None
    elapsed_s: float = 0.0

    def summary(self) -> str:
        status = "passed" if self.ok else f"FAILED: {self.reason}"
        audio_s = self.pcm_bytes / 2 / self.sample_rate if self.sample_rate else 0.0
        text = f"smoke test {status}; {self.pcm_bytes} PCM bytes ({audio_s:.2f} s of audio)"
        if self.first_audio_s is not None:
            text += f", first audio after {self.first_audio_s:.2f} s"
        if self.output_path is not None:
            text += f", written to {self.output_path}"
        return text


@dataclass
class _Exchange:
    """What the server has sent so far."""

    pcm: bytearray = field(default_factory=bytearray)
    events: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    sample_rate: int = DEFAULT_SAMPLE_RATE
    first_audio_s: float | None = None
    closed: str | None = None


async def run_smoke(
    transport: StreamTransport,
    *,
    text: str = DEFAULT_TEXT,
    voice: str | None = DEFAULT_VOICE,
    language: str | None = DEFAULT_LANGUAGE,
    output_path: Path | None = DEFAULT_OUTPUT,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    clock: Callable[[], float] = time.monotonic,
) -> SmokeResult:
    """Speak ``text`` once over ``transport`` and check the reply; always closes the transport.

    Sends ``session.config`` (PCM, ``stream_audio``), ``input.text`` and ``input.done``,
    then reads until ``session.done`` or the server closes.

    Args:
        transport: An open stream to the server.
        text: What to say.
        voice: Speaker name (Qwen3-TTS CustomVoice speakers include Vivian, Ryan, Serena), or None for
            the server's default voice (Piper's embedded voice has no Vivian).
        language: Language name, or None to let the server decide.
        output_path: Where to write the audio as 16-bit mono WAV (when any arrived); None to skip.
        timeout_s: Deadline for the whole exchange.
        clock: Monotonic clock, for the latency figures.

    Returns:
        A :class:`SmokeResult`; transport errors and timeouts become a failed result, not exceptions.
    """
    start = clock()
    seen = _Exchange()
    config: dict[str, object] = {"type": "session.config", "response_format": "pcm", "stream_audio": True}
    if voice is not None:
        config["voice"] = voice
    if language is not None:
        config["language"] = language
    timed_out = False
    try:
        async with asyncio.timeout(timeout_s):
            for message in (config, {"type": "input.text", "text": text}, {"type": "input.done"}):
                await transport.send_text(json.dumps(message))
            await _read_until_done(transport, seen, start, clock)
    except TimeoutError:
        timed_out = True
    except TransportClosed as exc:  # closed while we were still sending
        seen.closed = exc.reason or f"code {exc.code}"
    finally:
        await transport.aclose()

    written: Path | None = None
    if output_path is not None and seen.pcm:
        await asyncio.to_thread(write_pcm16_wav, output_path, bytes(seen.pcm), seen.sample_rate)
        written = output_path
    reason = _failure_reason(seen, timed_out, timeout_s)
    return SmokeResult(
        ok=not reason,
        reason=reason,
        pcm_bytes=len(seen.pcm),
        sample_rate=seen.sample_rate,
        events=tuple(seen.events),
        errors=tuple(seen.errors),
        output_path=written,
        first_audio_s=seen.first_audio_s,
        elapsed_s=clock() - start,
    )


async def _read_until_done(
    transport: StreamTransport, seen: _Exchange, start: float, clock: Callable[[], float]
) -> None:
    while True:
        try:
            message = await transport.receive()
        except TransportClosed as exc:
            seen.closed = exc.reason or f"code {exc.code}"
            return
        if isinstance(message, bytes):
            if seen.first_audio_s is None and message:
                seen.first_audio_s = clock() - start
            seen.pcm.extend(message)
            continue
        try:
            event = json.loads(message)
        except json.JSONDecodeError:
            seen.errors.append(f"server sent a text frame that is not JSON: {message[:80]!r}")
            continue
        kind = str(event.get("type", "?"))
        seen.events.append(kind)
        if kind == "audio.start":
            seen.sample_rate = int(event.get("sample_rate") or DEFAULT_SAMPLE_RATE)
            if event.get("format", "pcm") != "pcm":
                seen.errors.append(f"asked for pcm, server announced {event.get('format')!r}")
        elif kind == "audio.done" and event.get("error"):
            seen.errors.append(f"audio.done reported an error for sentence {event.get('sentence_index')}")
        elif kind == "error":
            seen.errors.append(str(event.get("message", "error event without a message")))
        elif kind == "session.done":
            return


def _failure_reason(seen: _Exchange, timed_out: bool, timeout_s: float) -> str:
    if timed_out:
        return f"no session.done within {timeout_s:g} s"
    if "audio.start" not in seen.events:
        return "no audio.start event" + (f" (stream closed: {seen.closed})" if seen.closed else "")
    if "audio.done" not in seen.events:
        return "no audio.done event" + (f" (stream closed: {seen.closed})" if seen.closed else "")
    if seen.errors:
        return "; ".join(seen.errors)
    if len(seen.pcm) <= MIN_PCM_BYTES:
        return f"only {len(seen.pcm)} PCM bytes (need more than {MIN_PCM_BYTES})"
    if len(seen.pcm) % 2:
        return f"{len(seen.pcm)} PCM bytes is not a whole number of 16-bit samples"
    return ""


def write_pcm16_wav(path: Path, pcm: bytes, sample_rate: int) -> None:
    """Write s16le mono PCM as a WAV file (a trailing odd byte is dropped)."""
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(pcm[: len(pcm) - len(pcm) % 2])
