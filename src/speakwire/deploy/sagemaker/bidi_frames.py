"""Map SageMaker bidirectional-stream payload parts to WebSocket-style messages, and back.

SageMaker relays each WebSocket frame of the container as one ``PayloadPart`` with a
``DataType`` (``UTF8`` for text frames, ``BINARY`` for binary) and a ``CompletionState``:
a fragmented WebSocket message arrives as ``PARTIAL`` parts closed by a ``COMPLETE`` one.
This module does that bookkeeping with no AWS import and no I/O, so it is tested on its
own and the transport in ``bidi.py`` stays a thin adapter.
"""

from __future__ import annotations

UTF8 = "UTF8"
BINARY = "BINARY"
PARTIAL = "PARTIAL"
COMPLETE = "COMPLETE"
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class BidiFrameError(ValueError):
    """A payload part that cannot be turned into a message (bad type, bad UTF-8, too large)."""


def payload_for(message: str | bytes) -> tuple[bytes, str]:
    """The ``(bytes, DataType)`` of one request payload part carrying ``message`` whole."""
    if isinstance(message, str):
        return message.encode("utf-8"), UTF8
    return bytes(message), BINARY


class BidiFrameAssembler:
    """Reassemble response payload parts into whole text or binary messages.

    The data type of a fragmented message is the first part's, as in WebSocket, where
    continuation frames carry none. A part with no ``DataType`` is treated as binary
    (lossless); one with no ``CompletionState`` as complete.
    """

    def __init__(self, *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.max_message_bytes = max_message_bytes
        self._parts: list[bytes] = []
        self._size = 0
        self._data_type: str | None = None

    @property
    def pending(self) -> bool:
        """True while a fragmented message is incomplete."""
        return self._data_type is not None

    def feed(self, data: bytes | None, *, data_type: str | None, completion_state: str | None) -> str | bytes | None:
        """Add one payload part; return the finished message, or None while it is partial.

        Raises:
            BidiFrameError: Unknown data or completion type, invalid UTF-8, or an over-long message.
        """
        if data_type not in (UTF8, BINARY, None):
            raise BidiFrameError(f"unknown payload DataType {data_type!r}")
        if completion_state not in (PARTIAL, COMPLETE, None):
            raise BidiFrameError(f"unknown payload CompletionState {completion_state!r}")
        if self._data_type is None:
            self._data_type = data_type or BINARY
        chunk = data or b""
        self._size += len(chunk)
        if self._size > self.max_message_bytes:
            self._reset()
            raise BidiFrameError(f"message over {self.max_message_bytes} bytes")
        self._parts.append(chunk)
        if completion_state == PARTIAL:
            return None
        joined = b"".join(self._parts)
        kind = self._data_type
        self._reset()
        if kind == BINARY:
            return joined
        try:
            return joined.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BidiFrameError(f"UTF8 payload is not valid UTF-8: {exc}") from exc

    def _reset(self) -> None:
        self._parts = []
        self._size = 0
        self._data_type = None
