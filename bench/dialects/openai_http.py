"""First audio through the openai SDK as pipecat calls it: ``response_format: "pcm"``, no ``stream_format``."""

from __future__ import annotations

import time

import openai

from bench.dialects import Probe
from bench.timing import first_chunk_s


def first_audio_s(base_url: str, text: str) -> float:
    """Seconds from sending the request to the first PCM bytes in the client's hands."""
    client = openai.OpenAI(api_key="local", base_url=f"{base_url}/v1")
    started = time.perf_counter()
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=text, response_format="pcm"
    ) as response:
        return first_chunk_s(response.iter_bytes(), started)


PROBES: dict[str, Probe] = {"openai_http": first_audio_s}
