"""When each stage of a turn happened: a pipecat observer that notes the frames that mark them.

From the end of the user's speech to the first reply audio, a turn passes through: the speech-to-text's final
transcript (``TranscriptionFrame``), the LLM's first token (``LLMTextFrame``) and the TTS's first audio
(``TTSAudioRawFrame``); the bot's speech starts and stops with ``BotStartedSpeakingFrame`` and
``BotStoppedSpeakingFrame``. Times are ``time.monotonic()`` when the frame was first pushed.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    InterruptionFrame,
    LLMTextFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed

MARKS: dict[type, str] = {
    VADUserStartedSpeakingFrame: "vad_start",
    VADUserStoppedSpeakingFrame: "vad_stop",
    TranscriptionFrame: "stt_final",
    LLMTextFrame: "llm_token",
    TTSAudioRawFrame: "tts_audio",
    BotStartedSpeakingFrame: "bot_started",
    BotStoppedSpeakingFrame: "bot_stopped",
    InterruptionFrame: "interruption",
}


@dataclass(frozen=True)
class Mark:
    at: float
    kind: str
    text: str = ""


class Timeline(BaseObserver):
    """Every marking frame, once (its first push), in order; ``wait_for`` waits for the next of a kind."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: list[Mark] = []
        self._seen: set[int] = set()
        self._changed = asyncio.Event()

    async def on_push_frame(self, data: FramePushed) -> None:
        kind = MARKS.get(type(data.frame))
        if kind is None or data.frame.id in self._seen:
            return
        self._seen.add(data.frame.id)
        self.marks.append(Mark(time.monotonic(), kind, getattr(data.frame, "text", "") or ""))
        self._changed.set()

    def first(self, kind: str, after: float) -> Mark | None:
        return next((m for m in self.marks if m.kind == kind and m.at >= after), None)

    async def wait_for(self, kind: str, after: float, limit_s: float) -> Mark:
        """The first ``kind`` mark at or after ``after``, waiting up to ``limit_s`` seconds for it."""
        deadline = time.monotonic() + limit_s
        while (mark := self.first(kind, after)) is None:
            self._changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {kind} within {limit_s} s")
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                continue
        return mark


@dataclass(frozen=True)
class TurnTimes:
    """One turn's stages, in seconds after the end of the user's speech."""

    heard: str
    stt_final_s: float
    llm_first_token_s: float
    tts_first_audio_s: float

    @classmethod
    def of(cls, timeline: Timeline, speech_end: float) -> TurnTimes:
        final = timeline.first("stt_final", speech_end)
        assert final is not None, "no final transcript after the question"
        token = timeline.first("llm_token", final.at)
        assert token is not None, "no LLM token after the transcript"
        audio = timeline.first("tts_audio", token.at)
        assert audio is not None, "no TTS audio after the LLM's first token"
        return cls(final.text, final.at - speech_end, token.at - speech_end, audio.at - speech_end)
