"""One utterance over our bidirectional speech stream (``session.config`` … ``session.done``), on the raw wire.

The container tests (a loopback server, and our image run as SageMaker runs it) hold both stream paths to the
same exchange: configure PCM with streamed audio, send one text and ``input.done``, read until ``session.done``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StreamedSpeech:
    """What came back: the JSON events' types in order, and how many PCM bytes the binary frames held."""

    kinds: list[str] = field(default_factory=list)
    pcm_bytes: int = 0


async def speak_once(ws: Any, text: str) -> StreamedSpeech:
    """Speak ``text`` on an open stream WebSocket (``websockets`` client) and read through ``session.done``."""
    await ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True}))
    await ws.send(json.dumps({"type": "input.text", "text": text}))
    await ws.send(json.dumps({"type": "input.done"}))
    speech = StreamedSpeech()
    while "session.done" not in speech.kinds:
        message = await ws.recv()
        if isinstance(message, bytes):
            speech.pcm_bytes += len(message)
        else:
            speech.kinds.append(json.loads(message)["type"])
    return speech
