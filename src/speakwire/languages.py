"""Language names as our engines spell them: the ones Qwen3-TTS speaks (vLLM-Omni's spelling, matched
case-insensitively), and codes (``en-US``, ``en``) mapped to those names for protocols that send codes."""

QWEN3_LANGUAGES = (
    "Auto",
    "Chinese",
    "English",
    "Japanese",
    "Korean",
    "German",
    "French",
    "Russian",
    "Portuguese",
    "Spanish",
    "Italian",
)

ISO_639_1_NAMES = {
    "en": "English", "zh": "Chinese", "ja": "Japanese", "ko": "Korean", "de": "German", "fr": "French",
    "ru": "Russian", "pt": "Portuguese", "es": "Spanish", "it": "Italian",
}  # fmt: skip
"""Language codes in the spelling our engines use (``language`` names)."""


def language_name(code: str) -> str:
    """A BCP-47 tag (``en-US``) or ISO 639-1 code (``en``) as our engines name the language (``English``);
    a code not listed is returned as given, for the engine to accept or refuse."""
    code = code.strip()
    return ISO_639_1_NAMES.get(code.split("-")[0].split("_")[0].lower(), code)
