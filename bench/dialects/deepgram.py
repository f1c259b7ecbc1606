"""Time to first audio through the official deepgram-sdk: Aura's ``/v1/speak`` WebSocket on speakwire.

``first_audio_s`` opens a session (the handshake and ``Metadata`` are not timed), then measures from
sending the text in one ``Speak`` followed by ``Flush`` (how Deepgram's docs drive it) to the first binary
audio frame: linear16 at 24 kHz, the default voice.
"""

from __future__ import annotations

import time
from itertools import takewhile
from urllib.parse import urlsplit

from deepgram import DeepgramClient, DeepgramClientEnvironment
from deepgram.speak.v1 import SpeakV1Text

from bench.dialects import Probe
from bench.timing import first_chunk_s


def first_audio_s(base_url: str, text: str, api_key: str = "unused") -> float:
    """Seconds from ``Speak`` + ``Flush`` to the first audio byte; the socket is drained to ``Flushed``."""
    host = urlsplit(base_url).netloc
    environment = DeepgramClientEnvironment(base=f"http://{host}", production=f"ws://{host}",
                                            agent=f"ws://{host}", agent_rest=f"http://{host}")  # fmt: skip
    client = DeepgramClient(api_key=api_key, environment=environment)
    with client.speak.v1.connect(model="aura-2-thalia-en", encoding="linear16", sample_rate=24000) as socket:
        next(message for message in socket if getattr(message, "type", None) == "Metadata")
        started = time.perf_counter()
        socket.send_text(SpeakV1Text(text=text))
        socket.send_flush()
        until_flushed = takewhile(lambda message: isinstance(message, bytes) or message.type != "Flushed", socket)
        first = first_chunk_s(
            until_flushed,
            started,
            is_audio=lambda message: isinstance(message, bytes) and bool(message),
            missing="no audio before Flushed",
        )
        socket.send_close()
    return first


PROBES: dict[str, Probe] = {"deepgram": first_audio_s}
