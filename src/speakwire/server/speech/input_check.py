"""The checks every protocol makes on text before it is spoken, worded by each protocol as it words them.

Three refusals, in this order: empty or blank text, text with nothing left to speak once text hygiene has
removed what no engine may see (``is_speakable(clean_text(text))``), and text longer than
``Settings.max_input_chars``. The checks are the same everywhere; the messages, the field they name and
the error raised for length are each protocol's own (``InputErrors``), and each protocol turns the raised
``SpeakwireError`` into its own error reply.
"""

from __future__ import annotations

from dataclasses import dataclass

from speakwire.errors import BadRequestError, PayloadTooLargeError
from speakwire.text.hygiene import clean_text, is_speakable


@dataclass(frozen=True, slots=True)
class InputErrors:
    """How one protocol refuses text it cannot speak."""

    param: str
    """The request field the text came in, as ``SpeakwireError.param``."""
    empty: str | None
    """The message for empty or blank text; None where blank text is refused as ``unspeakable`` (or was
    already refused by the protocol's parser)."""
    unspeakable: str
    """The message for text with no letters or digits left after text hygiene."""
    too_long: str
    """The message for text over the limit, with ``{length}`` and ``{limit}`` fields."""
    too_long_error: type[BadRequestError] | type[PayloadTooLargeError] = BadRequestError
    """The error raised for text over the limit; its status is the protocol's business."""


def check_input(text: str, max_chars: int, errors: InputErrors) -> None:
    """Refuse text that cannot be spoken as one request.

    Args:
        text: The text as the client sent it.
        max_chars: The longest text accepted, ``Settings.max_input_chars``.
        errors: The protocol's wording of each refusal.

    Raises:
        BadRequestError: The text is empty or blank (when ``errors.empty`` is set), or nothing is left to speak.
        BadRequestError | PayloadTooLargeError: The text is longer than ``max_chars`` (``errors.too_long_error``).
    """
    if errors.empty is not None and not text.strip():
        raise BadRequestError(errors.empty, param=errors.param)
    if not is_speakable(clean_text(text)):
        raise BadRequestError(errors.unspeakable, param=errors.param)
    if len(text) > max_chars:
        raise errors.too_long_error(errors.too_long.format(length=len(text), limit=max_chars), param=errors.param)
