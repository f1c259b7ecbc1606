"""Baseten's timestamp shape on the vLLM-Omni WebSocket, read as a client does: each sentence, its audio, its
``audio.done`` (``timestamp_info.word_alignment``) and, beside it, vLLM-Omni's trailing ``audio.chunk`` words."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import connect

from support.live_server import LiveServer

RATE = 24000
BASETEN = {"type": "session.config", "response_format": "pcm", "stream_audio": True, "seed": 1,
           "timestamp_type": "word", "timestamp_transport_strategy": "sync"}  # fmt: skip
"""``session.config`` as Baseten's truss and LiveKit's ``livekit-plugins-baseten`` ask for word timestamps."""


@dataclass
class Sentence:
    text: str
    audio_bytes: int
    done: dict[str, Any]
    chunk_words: list[dict[str, Any]] | None = None
    """vLLM-Omni's trailing ``audio.chunk`` words, with ``word_timestamps: true``."""


async def speak(server: LiveServer, config: dict[str, Any], text: str) -> list[Sentence]:
    """One utterance of ``text`` under ``config``: its sentences, in order."""
    sentences: list[Sentence] = []
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps(config))
        await ws.send(json.dumps({"type": "input.text", "text": text}))
        await ws.send(json.dumps({"type": "input.done"}))
        current, audio, chunk_words = "", 0, None
        async with asyncio.timeout(120):
            while True:
                message = await ws.recv()
                if isinstance(message, bytes):
                    audio += len(message)
                    continue
                event = json.loads(message)
                assert event["type"] != "error", event
                if event["type"] == "audio.start":
                    current, audio, chunk_words = event["sentence_text"], 0, None
                elif event["type"] == "audio.chunk":
                    if event["audio_b64"]:
                        audio += len(event["audio_b64"]) * 3 // 4 - event["audio_b64"].count("=")
                    else:
                        chunk_words = event["timestamps"]
                elif event["type"] == "audio.done":
                    assert event["total_bytes"] == audio
                    sentences.append(Sentence(current, audio, event, chunk_words))
                elif event["type"] == "session.done":
                    return sentences


def alignment(sentence: Sentence) -> list[tuple[str, float, float]]:
    """The sentence's ``word_alignment`` as (word, start s, end s)."""
    info = sentence.done["timestamp_info"]["word_alignment"]
    words, starts, ends = info["words"], info["word_start_times_seconds"], info["word_end_times_seconds"]
    assert len(words) == len(starts) == len(ends)
    return list(zip(words, starts, ends, strict=True))
