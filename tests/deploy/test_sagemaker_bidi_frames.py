"""BidiFrameAssembler: payload parts in, whole WebSocket-style messages out (no AWS involved)."""

from __future__ import annotations

import pytest

from speakwire.deploy.sagemaker.bidi import normalize_invocation_path
from speakwire.deploy.sagemaker.bidi_frames import BidiFrameAssembler, BidiFrameError, payload_for


def test_a_complete_utf8_part_is_one_text_message() -> None:
    assembler = BidiFrameAssembler()

    assert assembler.feed(b'{"type":"audio.start"}', data_type="UTF8", completion_state="COMPLETE") == (
        '{"type":"audio.start"}'
    )


def test_a_complete_binary_part_is_one_binary_message() -> None:
    assert BidiFrameAssembler().feed(b"\x00\x01", data_type="BINARY", completion_state="COMPLETE") == b"\x00\x01"


def test_partial_runs_are_joined_and_a_character_split_across_parts_survives() -> None:
    assembler = BidiFrameAssembler()
    text = "Grüße, 世界".encode()

    assert assembler.feed(text[:3], data_type="UTF8", completion_state="PARTIAL") is None
    assert assembler.pending
    assert assembler.feed(text[3:9], data_type=None, completion_state="PARTIAL") is None
    assert assembler.feed(text[9:], data_type=None, completion_state="COMPLETE") == "Grüße, 世界"
    assert not assembler.pending


def test_the_first_parts_type_decides_the_message_type() -> None:
    assembler = BidiFrameAssembler()

    assembler.feed(b"ab", data_type="BINARY", completion_state="PARTIAL")

    assert assembler.feed(b"cd", data_type="UTF8", completion_state="COMPLETE") == b"abcd"


def test_messages_after_a_fragmented_one_start_fresh() -> None:
    assembler = BidiFrameAssembler()
    assembler.feed(b"a", data_type="UTF8", completion_state="PARTIAL")
    assembler.feed(b"b", data_type="UTF8", completion_state="COMPLETE")

    assert assembler.feed(b"\xff", data_type="BINARY", completion_state="COMPLETE") == b"\xff"


def test_missing_headers_mean_a_complete_binary_part() -> None:
    assert BidiFrameAssembler().feed(b"x", data_type=None, completion_state=None) == b"x"


def test_invalid_utf8_and_unknown_types_are_errors() -> None:
    with pytest.raises(BidiFrameError, match="not valid UTF-8"):
        BidiFrameAssembler().feed(b"\xff\xfe", data_type="UTF8", completion_state="COMPLETE")
    with pytest.raises(BidiFrameError, match="DataType"):
        BidiFrameAssembler().feed(b"x", data_type="TEXT", completion_state="COMPLETE")
    with pytest.raises(BidiFrameError, match="CompletionState"):
        BidiFrameAssembler().feed(b"x", data_type="UTF8", completion_state="DONE")


def test_an_endless_partial_run_is_cut_off() -> None:
    assembler = BidiFrameAssembler(max_message_bytes=10)
    assembler.feed(b"123456", data_type="BINARY", completion_state="PARTIAL")

    with pytest.raises(BidiFrameError, match="over 10 bytes"):
        assembler.feed(b"789012", data_type="BINARY", completion_state="PARTIAL")
    assert not assembler.pending


def test_outgoing_text_is_utf8_and_bytes_are_binary() -> None:
    assert payload_for('{"type":"input.done"}') == (b'{"type":"input.done"}', "UTF8")
    assert payload_for(b"\x00") == (b"\x00", "BINARY")


def test_the_model_invocation_path_loses_its_leading_slash() -> None:
    assert normalize_invocation_path("/v1/audio/speech/stream") == "v1/audio/speech/stream"
    assert normalize_invocation_path("invocations-bidirectional-stream") == "invocations-bidirectional-stream"
    with pytest.raises(ValueError, match="invalid model invocation path"):
        normalize_invocation_path("v1/audio speech")
