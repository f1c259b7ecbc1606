"""``check_input``: the same three refusals for every protocol, in each protocol's words."""

from __future__ import annotations

import pytest

from speakwire.errors import BadRequestError, PayloadTooLargeError
from speakwire.server.speech.input_check import InputErrors, check_input

ERRORS = InputErrors(param="text", empty="empty", unspeakable="unspeakable", too_long="{length} > {limit}")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        (" " * 20, "empty"),  # blank and too long: blank first
        ("\x00\u200b", "unspeakable"),
        ("\x00" * 20, "unspeakable"),  # unspeakable and too long: unspeakable first
        ("a" * 11, "11 > 10"),
    ],
)
def test_check_input_refuses_empty_then_unspeakable_then_too_long_text(text: str, message: str) -> None:
    with pytest.raises(BadRequestError) as refused:
        check_input(text, 10, ERRORS)
    assert (refused.value.message, refused.value.param) == (message, "text")


def test_check_input_passes_speakable_text_within_the_limit() -> None:
    check_input("a" * 10, 10, ERRORS)


def test_a_protocol_without_an_empty_message_refuses_blank_text_as_unspeakable() -> None:
    with pytest.raises(BadRequestError, match="unspeakable"):
        check_input("  ", 10, InputErrors(param="text", empty=None, unspeakable="unspeakable", too_long=""))


def test_a_protocol_may_refuse_long_text_as_payload_too_large() -> None:
    errors = InputErrors(param="text", empty=None, unspeakable="", too_long="long", too_long_error=PayloadTooLargeError)
    with pytest.raises(PayloadTooLargeError, match="long"):
        check_input("a" * 11, 10, errors)
