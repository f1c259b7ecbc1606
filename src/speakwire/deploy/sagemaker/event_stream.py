"""AWS event-stream messages, encoded: what ``InvokeEndpointWithResponseStream`` sends on the wire.

The response body of that operation (``application/vnd.amazon.eventstream``) is a run of
binary messages, each one::

    total length (u32) | headers length (u32) | CRC32 of those 8 bytes (u32)
    headers: name length (u8), name, value type (u8; 7 = string), value length (u16), value
    payload
    CRC32 of everything above (u32)

all big-endian. botocore's ``EventStreamBuffer`` checks both CRCs and the lengths, then reads
``:message-type`` (``event`` or ``exception``) and ``:event-type`` / ``:exception-type`` to
pick the shape. No I/O here, so the framing is tested byte for byte against botocore's parser.
"""

from __future__ import annotations

import json
import struct
from binascii import crc32
from collections.abc import Mapping

CONTENT_TYPE = "application/vnd.amazon.eventstream"
_PRELUDE = struct.Struct(">II")
_CRC = struct.Struct(">I")
_STRING_HEADER = 7
_MAX_HEADER_VALUE = 0xFFFF
MAX_PAYLOAD_BYTES = 16 * 1024 * 1024  # botocore accepts up to 24 MiB; the AWS spec says 16 MiB


def encode_message(headers: Mapping[str, str], payload: bytes = b"") -> bytes:
    """One event-stream message with string ``headers`` and ``payload``.

    Raises:
        ValueError: A header name over 255 bytes, a value over 65535 bytes, or a payload over 16 MiB.
    """
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"event-stream payload of {len(payload)} bytes is over {MAX_PAYLOAD_BYTES}")
    encoded_headers = b"".join(_encode_header(name, value) for name, value in headers.items())
    total = _PRELUDE.size + _CRC.size + len(encoded_headers) + len(payload) + _CRC.size
    prelude = _PRELUDE.pack(total, len(encoded_headers))
    head = prelude + _CRC.pack(crc32(prelude))
    body = head + encoded_headers + payload
    return body + _CRC.pack(crc32(body))


def _encode_header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode("utf-8"), value.encode("utf-8")
    if not 0 < len(raw_name) <= 0xFF:
        raise ValueError(f"event-stream header name {name!r} must be 1-255 bytes")
    if len(raw_value) > _MAX_HEADER_VALUE:
        raise ValueError(f"event-stream header {name!r} value is over {_MAX_HEADER_VALUE} bytes")
    return bytes([len(raw_name)]) + raw_name + bytes([_STRING_HEADER]) + struct.pack(">H", len(raw_value)) + raw_value


def payload_part(data: bytes) -> bytes:
    """A ``PayloadPart`` event carrying ``data`` (its ``Bytes`` member is the event payload)."""
    return encode_message(
        {":message-type": "event", ":event-type": "PayloadPart", ":content-type": "application/octet-stream"}, data
    )


def stream_exception(exception_type: str, message: str, *, error_code: str | None = None) -> bytes:
    """A modeled stream error (``ModelStreamError``, ``InternalStreamFailure``): botocore raises it.

    Its JSON payload holds the shape's members, ``Message`` and (for ModelStreamError) ``ErrorCode``.
    """
    body: dict[str, str] = {"Message": message}
    if error_code is not None:
        body["ErrorCode"] = error_code
    headers = {":message-type": "exception", ":exception-type": exception_type, ":content-type": "application/json"}
    return encode_message(headers, json.dumps(body).encode("utf-8"))


def model_stream_error(message: str, *, error_code: str = "StreamBroken") -> bytes:
    """The runtime's report of a container stream that broke after it began (codes: StreamBroken,
    ModelInvocationTimeExceeded)."""
    return stream_exception("ModelStreamError", message, error_code=error_code)
