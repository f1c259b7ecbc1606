"""Our event-stream encoder, read back by botocore's own decoder and its sagemaker-runtime response parser."""

from __future__ import annotations

from collections.abc import Iterator

import botocore.session
import pytest
from botocore.eventstream import ChecksumMismatch, EventStream, EventStreamBuffer, EventStreamMessage
from botocore.exceptions import EventStreamError
from botocore.parsers import EventStreamJSONParser

from speakwire.deploy.sagemaker import event_stream
from speakwire.deploy.sagemaker.local_runtime import cut_parts


def decode(data: bytes, *, step: int | None = None) -> list[EventStreamMessage]:
    """Messages botocore reads from ``data``, fed ``step`` bytes at a time (all at once when None)."""
    buffer = EventStreamBuffer()
    messages: list[EventStreamMessage] = []
    for start in range(0, len(data), step or len(data) or 1):
        buffer.add_data(data[start : start + (step or len(data))])
        messages.extend(buffer)
    return messages


class RawBody:
    """What botocore's EventStream reads from: an HTTP body with ``stream()``."""

    def __init__(self, data: bytes, chunk: int) -> None:
        self.data, self.chunk = data, chunk

    def stream(self) -> Iterator[bytes]:
        for start in range(0, len(self.data), self.chunk):
            yield self.data[start : start + self.chunk]

    def close(self) -> None:
        pass


def response_stream(data: bytes, chunk: int = 5) -> EventStream:
    """botocore's parser for InvokeEndpointWithResponseStream's ``Body`` (the rest-json event parser), over ``data``."""
    model = botocore.session.get_session().get_service_model("sagemaker-runtime")
    shape = model.operation_model("InvokeEndpointWithResponseStream").output_shape.members["Body"]
    return EventStream(RawBody(data, chunk), shape, EventStreamJSONParser(), "InvokeEndpointWithResponseStream")


def test_a_payload_part_decodes_with_its_headers_and_bytes_even_fed_a_byte_at_a_time() -> None:
    data = event_stream.payload_part(b"RIFF\x00\x01partial")

    (message,) = decode(data, step=1)

    assert message.headers == {
        ":message-type": "event",
        ":event-type": "PayloadPart",
        ":content-type": "application/octet-stream",
    }
    assert message.payload == b"RIFF\x00\x01partial"
    assert message.to_response_dict()["status_code"] == 200


def test_the_response_parser_yields_payload_parts_then_raises_a_model_stream_error() -> None:
    data = (
        event_stream.payload_part(b"first ")
        + event_stream.payload_part(b"second")
        + event_stream.model_stream_error("container went away", error_code="StreamBroken")
    )
    events = response_stream(data)
    seen = []

    with pytest.raises(EventStreamError) as raised:
        seen.extend(events)

    assert [e["PayloadPart"]["Bytes"] for e in seen] == [b"first ", b"second"]
    assert raised.value.response["Error"] == {"Code": "ModelStreamError", "Message": "container went away"}


def test_a_corrupted_byte_fails_botocores_checksum() -> None:
    data = bytearray(event_stream.payload_part(b"abcdef"))
    data[-6] ^= 0xFF  # inside the payload: the message CRC no longer matches

    with pytest.raises(ChecksumMismatch):
        decode(bytes(data))


def test_lengths_in_the_prelude_match_the_message() -> None:
    data = event_stream.encode_message({"a": "b"}, b"xyz")
    total, headers_length = int.from_bytes(data[:4], "big"), int.from_bytes(data[4:8], "big")
    assert (total, headers_length) == (len(data), 1 + 1 + 1 + 2 + 1)


def test_out_of_range_headers_and_payloads_are_refused() -> None:
    with pytest.raises(ValueError, match="1-255 bytes"):
        event_stream.encode_message({"x" * 256: "v"})
    with pytest.raises(ValueError, match="over 65535"):
        event_stream.encode_message({"name": "v" * 70_000})
    with pytest.raises(ValueError, match="payload"):
        event_stream.encode_message({}, b"\x00" * (event_stream.MAX_PAYLOAD_BYTES + 1))


def test_parts_are_cut_at_the_size_asked_for_and_join_back() -> None:
    data = bytes(range(256)) * 10
    pieces = list(cut_parts(data, 777))
    assert [len(p) for p in pieces] == [777, 777, 777, 229] and b"".join(pieces) == data
    assert list(cut_parts(data, None)) == [data]
    assert list(cut_parts(b"", 10)) == []
