"""First audio over vLLM-Omni's WebSocket ``/v1/audio/speech/stream`` (raw PCM frames)."""

from __future__ import annotations

import json
import time

from websockets.sync.client import connect


def first_audio_s(base_url: str, text: str) -> float:
    """Seconds from sending the text to the first binary audio frame (text sent whole, then input.done)."""
    url = base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    with connect(url, max_size=None) as ws:
        ws.send(json.dumps({"type": "session.config", "voice": "alloy", "response_format": "pcm",
                            "stream_audio": True}))  # fmt: skip
        started = time.perf_counter()
        ws.send(json.dumps({"type": "input.text", "text": text}))
        ws.send(json.dumps({"type": "input.done"}))
        first: float | None = None
        while True:
            message = ws.recv(timeout=60)
            if isinstance(message, bytes):
                if first is None:
                    first = time.perf_counter() - started
            elif json.loads(message).get("type") == "session.done":
                break
    if first is None:
        raise RuntimeError("no audio")
    return first
