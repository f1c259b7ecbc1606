"""The one interface every audio encoder implements: bytes in order, no I/O, nothing held back at the end.

An encoder turns mono float32 samples into the bytes of one audio file, in the order a client must receive
them. It never writes anywhere itself: the HTTP body, the SSE event and the WebSocket frame are the callers'
business, so one encoder serves every protocol and tests can check the exact bytes.

The contract, whatever the format::

    data = enc.header() + enc.encode(a) + enc.encode(b) + ... + enc.finish()

``data`` is one complete, valid file. Peers broke each part of this: a WAV header per chunk (Kokoro #57),
Ogg pages read before the container was closed so the last 1–2 s were lost (Kokoro #447), MP3 glued from
per-chunk files (Kokoro PR #271).
"""

from __future__ import annotations

from typing import Protocol

from speakwire.audio.chunk import Float32Array


class Encoder(Protocol):
    """Encodes one stream of mono audio at ``sample_rate`` into one file of ``format``.

    Streaming encoders return bytes from ``encode()`` as soon as the codec has produced them; a non-streaming
    encoder may keep everything for ``finish()`` so it can write exact lengths into its header.
    """

    format: str
    """The format's name as clients ask for it: ``"wav"``, ``"mp3"``, ..."""
    content_type: str
    """The HTTP ``Content-Type`` of the file."""
    sample_rate: int
    """The rate of the samples given to ``encode()``, and of the file."""

    def header(self) -> bytes:
        """Bytes to send before any audio: the streaming WAV header; ``b""`` for most formats."""
        ...

    def encode(self, samples: Float32Array) -> bytes:
        """Encode the next samples (mono float32 in [-1, 1]); return the bytes ready now, maybe ``b""``."""
        ...

    def finish(self) -> bytes:
        """Flush the codec and write the container's trailer; the encoder cannot be used afterwards."""
        ...
