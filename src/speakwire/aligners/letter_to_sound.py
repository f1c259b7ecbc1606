"""English spelling → ARPAbet phones by rule, for words outside an aligner's pronouncing dictionary.

Why rules and not a model: the ``pocketsphinx`` wheel ships CMUdict but no grapheme-to-phoneme model, and an
aligner only needs a pronunciation close enough that the acoustic model spends the word's audio on it (a
made-up name like "Zorvexa" said as Z AO R V EH K S AH). Dropping the word instead would hand its audio
to its neighbours and shift them. The rules take the longest spelling that matches at each position
(``tch`` before ``ch`` before ``c``); doubled consonants are said once and a final silent ``e`` is skipped.
"""

from __future__ import annotations

_SPELLINGS: dict[str, tuple[str, ...]] = {
    # three letters
    "tch": ("CH",),
    "sch": ("S", "K"),
    "igh": ("AY",),
    "ough": ("AO",),
    # two letters
    "ch": ("CH",),
    "sh": ("SH",),
    "th": ("TH",),
    "ph": ("F",),
    "wh": ("W",),
    "ck": ("K",),
    "ng": ("NG",),
    "qu": ("K", "W"),
    "kn": ("N",),
    "wr": ("R",),
    "gh": ("G",),
    "ee": ("IY",),
    "ea": ("IY",),
    "ie": ("IY",),
    "ei": ("EY",),
    "oo": ("UW",),
    "ou": ("AW",),
    "ow": ("OW",),
    "oa": ("OW",),
    "ai": ("EY",),
    "ay": ("EY",),
    "ey": ("EY",),
    "oi": ("OY",),
    "oy": ("OY",),
    "au": ("AO",),
    "aw": ("AO",),
    "er": ("ER",),
    "ir": ("ER",),
    "ur": ("ER",),
    "ar": ("AA", "R"),
    "or": ("AO", "R"),
    # one letter
    "a": ("AE",),
    "b": ("B",),
    "c": ("K",),
    "d": ("D",),
    "e": ("EH",),
    "f": ("F",),
    "g": ("G",),
    "h": ("HH",),
    "i": ("IH",),
    "j": ("JH",),
    "k": ("K",),
    "l": ("L",),
    "m": ("M",),
    "n": ("N",),
    "o": ("AA",),
    "p": ("P",),
    "q": ("K",),
    "r": ("R",),
    "s": ("S",),
    "t": ("T",),
    "u": ("AH",),
    "v": ("V",),
    "w": ("W",),
    "x": ("K", "S"),
    "y": ("Y",),
    "z": ("Z",),
}
_LONGEST = max(len(spelling) for spelling in _SPELLINGS)
_VOWELS = "aeiouy"


def letter_to_sound(word: str) -> tuple[str, ...]:
    """ARPAbet phones (no stress marks) for a lowercase word of ``a``-``z``; other characters are skipped.

    >>> letter_to_sound("zorvexa")
    ('Z', 'AO', 'R', 'V', 'EH', 'K', 'S', 'AH')
    """
    letters = "".join(char for char in word if "a" <= char <= "z")
    if len(letters) > 2 and letters.endswith("e") and letters[-2] not in _VOWELS:
        letters = letters[:-1]  # a final silent e: "blake"
    phones: list[str] = []
    i = 0
    while i < len(letters):
        for size in range(min(_LONGEST, len(letters) - i), 0, -1):
            spelling = letters[i : i + size]
            if spelling in _SPELLINGS:
                said = _SPELLINGS[spelling]
                if size == 1 and i + 1 == len(letters) and spelling in "ay":
                    said = ("AH",) if spelling == "a" else ("IY",)  # a final "a" or "y": "Zorvexa", "Kelly"
                if not (phones and len(said) == 1 and phones[-1] == said[0] and said[0] not in _VOWEL_PHONES):
                    phones.extend(said)  # a doubled consonant is said once
                i += size
                break
    return tuple(phones)


_VOWEL_PHONES = frozenset({"AA", "AE", "AH", "AO", "AW", "AY", "EH", "ER", "EY", "IH", "IY", "OW", "OY", "UH", "UW"})
