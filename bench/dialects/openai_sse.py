"""First audio over SSE (``stream_format: "sse"``), as LiveKit's OpenAI plugin asks for it."""

from __future__ import annotations

import time

import httpx

from bench.dialects import Probe
from bench.timing import first_chunk_s


def first_audio_s(base_url: str, text: str) -> float:
    """Seconds from sending the request to the first ``speech.audio.delta`` event."""
    body = {"input": text, "voice": "alloy", "response_format": "pcm", "stream_format": "sse"}
    started = time.perf_counter()
    with httpx.stream("POST", f"{base_url}/v1/audio/speech", json=body, timeout=60) as response:
        return first_chunk_s(response.iter_lines(), started, is_audio=lambda line: '"speech.audio.delta"' in line)


PROBES: dict[str, Probe] = {"openai_sse": first_audio_s}
