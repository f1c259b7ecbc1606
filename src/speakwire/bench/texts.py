"""What the benchmarks speak: the paragraphs of ``data/texts.json``, a word list for random text, one reply.

``data/texts.json`` holds six three-sentence paragraphs of 300-530 characters in plain words (no digits or
abbreviations, so text normalization cannot make one target speak more than another). It ships in the
package, so ``speakwire bench`` finds it from any directory.
"""

from __future__ import annotations

import json
from pathlib import Path

TEXTS_JSON = Path(__file__).with_name("data") / "texts.json"

REPLY = (
    "Thanks for calling. Your order shipped this morning and should arrive on Thursday. Is there anything "
    "else I can help you with today?"
)
"""A voice agent's short reply, spoken through every dialect's client."""

WORDS = (
    "the", "order", "shipped", "this", "morning", "and", "should", "arrive", "on", "tuesday", "is", "there",
    "anything", "else", "I", "can", "help", "you", "with", "today", "thanks", "for", "calling", "your", "account",
    "number", "ends", "in", "four", "two", "seven",
)  # fmt: skip
"""Plain words to build random inputs of any length from."""


def paragraphs(path: Path | None = None) -> list[str]:
    """The benchmark paragraphs: ``path`` (a JSON object with a ``paragraphs`` list, or a list), else the packaged ones.

    Raises:
        SystemExit: The file is missing or holds no non-empty texts.
    """
    source = path or TEXTS_JSON
    if not source.is_file():
        raise SystemExit(f"benchmark texts not found: {source}")
    data = json.loads(source.read_text(encoding="utf-8"))
    texts = data["paragraphs"] if isinstance(data, dict) else data
    if not texts or not all(isinstance(p, str) and p.strip() for p in texts):
        raise SystemExit(f"{source}: 'paragraphs' must be a non-empty list of texts")
    return list(texts)
