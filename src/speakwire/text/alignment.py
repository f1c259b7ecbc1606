"""Word timings: which words of the client's text the audio speaks, and when.

Agents need them to know what a listener heard before a barge-in, and vendor dialects carry
them (ElevenLabs ``alignment``, Cartesia ``word_timestamps``, vLLM-Omni ``word_timestamps``).

Offsets index the utterance's text as the pipeline received it after hygiene (``clean_text``),
i.e. the client's own characters, not the normalized or phonemized text the engine saw.
Times are seconds from the start of the utterance's audio.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WordTiming:
    """One spoken word of the original text and the span of audio that says it."""

    text: str
    """The word as the client wrote it (``"$5,"`` stays ``"$5,"``; punctuation attached)."""
    char_start: int
    char_end: int
    """``text == utterance_text[char_start:char_end]``."""
    start_s: float
    end_s: float
    """Audio time from the utterance's first sample; ``start_s <= end_s``, monotone across words."""
