"""Time to first audio through the official elevenlabs SDK: ``convert_realtime`` (stream-input) on speakwire.

``first_audio_s`` measures from the call into the SDK's generator (which opens the WebSocket, sends the init
message, the text and ``{"text": ""}``) to the first audio chunk it yields: ``pcm_24000``, voice ``alloy``
(our default voice). The loopback handshake is inside the figure: the SDK gives no way to open the socket
first. The rest of the audio is drained.
"""

from __future__ import annotations

import time

from elevenlabs.client import ElevenLabs

from bench.dialects import Probe
from bench.timing import first_chunk_s
from speakwire.bench.servers import websocket_url


def first_audio_s(base_url: str, text: str, api_key: str = "unused") -> float:
    """Seconds from starting ``convert_realtime`` to its first audio bytes; the stream is drained to its end."""
    client = ElevenLabs(api_key=api_key, base_url=base_url)
    client.text_to_speech._ws_base_url = websocket_url(base_url)
    started = time.perf_counter()
    chunks = client.text_to_speech.convert_realtime(
        voice_id="alloy", text=iter([text]), model_id="eleven_flash_v2_5", output_format="pcm_24000"
    )
    return first_chunk_s(chunks, started, missing="no audio before the stream ended")


PROBES: dict[str, Probe] = {"elevenlabs": first_audio_s}
