"""LiveKit's Baseten Qwen3-TTS plugin, unchanged, registering a voice and speaking it on the tiny Qwen3 Base model.

``qwen3_tts.register_voice`` sends ``voice.add`` on the vLLM-Omni WebSocket; the server saves the clip in its voice
library and, as ``POST /v1/audio/voices`` does on a cloning engine, computes the clone prompt then. The plugin with
its defaults (``task_type: "Base"``, the registered name as ``voice``) then speaks with it, by that prompt.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import soundfile as sf
from livekit.agents import APIConnectOptions
from livekit.plugins import baseten
from livekit.plugins.baseten import qwen3_tts
from qwen3_testing import noise_clip

from speakwire.settings import Settings
from support.live_server import LiveServer, start_server

pytestmark = pytest.mark.qwen


@pytest.fixture
def base_server(tiny_checkpoints: dict[str, Path], tmp_path: Path) -> Iterator[LiveServer]:
    from speakwire.engines.qwen3 import load_qwen3_engine

    model = str(tiny_checkpoints["base"])
    live = start_server(Settings(engine="qwen3", model=model, data_dir=str(tmp_path / "data")),
                        engine=load_qwen3_engine(model))  # fmt: skip
    yield live
    live.stop()


def test_a_voice_registered_by_the_plugin_is_cloned_by_the_plugin_with_its_defaults(
    base_server: LiveServer, tmp_path: Path
) -> None:
    reference = tmp_path / "reference.wav"
    buffer = io.BytesIO()
    sf.write(buffer, noise_clip(2.0, seed=7).samples, 24_000, format="WAV", subtype="PCM_16")
    reference.write_bytes(buffer.getvalue())
    engine: Any = base_server.state.engine
    endpoint = base_server.ws_url

    async def register_list_speak() -> tuple[dict[str, Any], dict[str, Any], int, bytes]:
        voice = await qwen3_tts.register_voice(model_endpoint=endpoint, name="clone", ref_audio_path=str(reference),
                                               ref_text="Some reference words.", api_key="local")  # fmt: skip
        listed = await qwen3_tts.list_voices(model_endpoint=endpoint, api_key="local")
        encodes = engine.prompt_encodes
        http = aiohttp.ClientSession()
        # max_new_tokens: random weights rarely stop on their own; task_type is the plugin's default ("Base").
        tts = baseten.TTS(model="qwen3-tts", model_endpoint=endpoint, api_key="local", voice="clone",
                          max_new_tokens=10, http_session=http)  # fmt: skip
        pcm = bytearray()
        try:
            stream = tts.synthesize("Hello there.", conn_options=APIConnectOptions(max_retry=0))
            async with asyncio.timeout(120):
                async for event in stream:
                    pcm += event.frame.data.tobytes()
            await stream.aclose()
        finally:
            await tts.aclose()
            await http.close()
        return voice, listed, encodes, bytes(pcm)

    voice, listed, encodes, pcm = asyncio.run(register_list_speak())
    assert voice["name"] == "clone" and voice["compatibility"]["usable_here"] is True
    assert voice["compatibility"]["prompt_cached_here"] is True  # computed when registered
    assert listed["voices"] == [] and [v["name"] for v in listed["uploaded_voices"]] == ["clone"]  # Base: no presets
    assert len(pcm) > 0
    assert engine.prompt_encodes == encodes  # spoken by the prompt computed at registration, not a new one
