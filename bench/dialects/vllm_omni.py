"""First audio over vLLM-Omni's WebSocket ``/v1/audio/speech/stream`` (raw PCM frames)."""

from __future__ import annotations

import functools
import json
import time
from itertools import takewhile

from websockets.sync.client import connect

from bench.dialects import Probe
from bench.timing import first_chunk_s
from speakwire.bench.servers import websocket_url


def first_audio_s(base_url: str, text: str) -> float:
    """Seconds from sending the text to the first binary audio frame (text sent whole, then input.done)."""
    with connect(websocket_url(base_url, "/v1/audio/speech/stream"), max_size=None) as ws:
        ws.send(json.dumps({"type": "session.config", "voice": "alloy", "response_format": "pcm",
                            "stream_audio": True}))  # fmt: skip
        started = time.perf_counter()
        ws.send(json.dumps({"type": "input.text", "text": text}))
        ws.send(json.dumps({"type": "input.done"}))
        messages = iter(functools.partial(ws.recv, timeout=60), None)
        until_done = takewhile(lambda m: isinstance(m, bytes) or json.loads(m).get("type") != "session.done", messages)
        return first_chunk_s(until_done, started, is_audio=lambda m: isinstance(m, bytes))


PROBES: dict[str, Probe] = {"vllm_omni": first_audio_s}
