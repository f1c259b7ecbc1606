"""The metadata a new voice needs, checked once for every way a voice arrives (API, CLI, archive import).

Consent is required, not decoration: a cloned voice is a person's voice, so the
library refuses to keep one without a statement of who recorded the reference
and that they agreed. The transcript is optional — without it the voice is
cloned from the speaker embedding alone (``x_vector_only_mode``), which needs no
text but sounds less like the speaker. Languages are Qwen3-TTS's names, so a
stored default language is one the cloning engine accepts.
"""

from __future__ import annotations

from dataclasses import dataclass

from speakwire.errors import BadRequestError
from speakwire.languages import QWEN3_LANGUAGES
from speakwire.voices.names import validate_name

MAX_CONSENT_CHARS = 1000
MAX_REF_TEXT_CHARS = 2000
MAX_DESCRIPTION_CHARS = 1000
LANGUAGES = QWEN3_LANGUAGES


@dataclass(frozen=True, slots=True)
class VoiceFields:
    """Validated, canonical metadata of a voice about to be saved."""

    name: str
    consent: str
    ref_text: str | None = None
    speaker_description: str | None = None
    language: str | None = None


def voice_fields(
    *,
    name: object,
    consent: object,
    ref_text: object = None,
    speaker_description: object = None,
    language: object = None,
) -> VoiceFields:
    """Check what a client sent; blank optional fields become None.

    Raises:
        BadRequestError: A bad name, missing consent, an over-long field, or an unknown language.
    """
    valid_name = validate_name(name)
    consent_text = _text(consent, "consent", MAX_CONSENT_CHARS)
    if consent_text is None:
        raise BadRequestError(
            "consent is required: say who recorded the reference audio and that they agreed to having their "
            "voice cloned, e.g. 'Recorded by Jane Doe on 2026-05-01; she agreed to its use for speech synthesis'.",
            param="consent",
        )
    return VoiceFields(
        name=valid_name,
        consent=consent_text,
        ref_text=_text(ref_text, "ref_text", MAX_REF_TEXT_CHARS),
        speaker_description=_text(speaker_description, "speaker_description", MAX_DESCRIPTION_CHARS),
        language=_language(language),
    )


def _text(value: object, param: str, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequestError(f"'{param}' must be a string.", param=param)
    text = value.strip()
    if len(text) > limit:
        raise BadRequestError(f"'{param}' is {len(text)} characters long; the limit is {limit}.", param=param)
    return text or None


def _language(value: object) -> str | None:
    text = _text(value, "language", 32)
    if text is None:
        return None
    canonical = {name.lower(): name for name in LANGUAGES}.get(text.lower())
    if canonical is None:
        raise BadRequestError(f"Unsupported language {text!r}; use one of: {', '.join(LANGUAGES)}.", param="language")
    return canonical
