"""The languages Qwen3-TTS speaks, in vLLM-Omni's spelling (``language`` fields are matched case-insensitively)."""

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
