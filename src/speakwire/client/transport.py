"""StreamTransport: the small interface a speech-stream client talks through.

A WebSocket (``websocket.py``) and a SageMaker bidirectional stream (``sagemaker.py``)
both carry the same JSON text events and binary audio frames; the protocol client
(``stream.py``) only sees this interface, so either can be plugged in.
"""

from __future__ import annotations

from typing import Protocol


class TransportClosed(Exception):
    """The other side closed the stream; ``code``/``reason`` when the transport knows them."""

    def __init__(self, code: int | None = None, reason: str = "") -> None:
        super().__init__(f"stream closed (code={code}, reason={reason!r})")
        self.code = code
        self.reason = reason


class StreamTransport(Protocol):
    async def send_text(self, message: str) -> None:
        """Send one text (JSON) frame."""
        ...

    async def send_bytes(self, data: bytes) -> None:
        """Send one binary frame."""
        ...

    async def receive(self) -> str | bytes:
        """Next whole message: ``str`` for text frames, ``bytes`` for binary. Raises ``TransportClosed``."""
        ...

    async def aclose(self) -> None:
        """Close the stream; safe to call twice."""
        ...
