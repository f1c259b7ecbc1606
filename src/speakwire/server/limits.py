"""Limits and WebSocket close codes every protocol reads: one module, so no dialect imports another's.

Close codes follow RFC 6455 §7.4.1 and the IANA registry.
"""

from __future__ import annotations

MAX_CONFIG_BYTES = 4 * 1024 * 1024
"""A configuration message (it may carry base64 reference audio)."""
MAX_TEXT_MESSAGE_BYTES = 128 * 1024
"""One text message of a WebSocket dialect."""
MAX_SESSION_CHARS = 100_000
"""Text one utterance (or one dialect context) may hold."""
MAX_FRAME_BYTES = 32 * 1024
"""Binary audio frames are split to at most this size so players get a steady flow."""

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
"""The server is shutting down (SIGTERM) and its drain time is over: reconnect, to another instance."""
CLOSE_POLICY = 1008
"""Auth failure, a missing or invalid configuration, a reader that took nothing for the write-stall timeout."""
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL = 1011
CLOSE_TRY_LATER = 1013
"""Admission control: the server is at capacity, or draining before it exits."""
