"""Multilingual forced alignment with Qwen3-ForcedAligner, through the ``qwen-asr`` package (GPU or CPU).

Qwen3-ForcedAligner-0.6B is Qwen3-ASR's encoder and decoder with a 5,000-class head: one forward pass (no
decoding loop) over ``<|audio_start|><|audio_pad|>…<|audio_end|>`` and the text cut into units, each followed by
two ``<timestamp>`` tokens whose argmax class × 80 ms is the unit's start and end. ``qwen_asr``'s
``Qwen3ForcedAligner.align`` builds exactly that prompt (no chat template: vLLM-Omni's first version wrapped it in
one, and its timings came out 92 ms late, vllm-project/vllm-omni#7240), mends non-monotone markers (longest
increasing run, gaps interpolated) and returns the units with their times. It aligns the 11 languages its config
lists (``support_languages``; Chinese, English, Japanese, Korean, German, French, Spanish, Portuguese, Italian,
Arabic, Indonesian): of Qwen3-TTS's ten, Russian is not among them.

How the units become the text's words (``timings``):

* ``qwen_asr`` cuts the text itself: whitespace-separated words, kept characters only (letters, digits, the
  apostrophe: "U.S.," → ``US``), each CJK ideograph a unit of its own, Japanese by nagisa's words, Korean by
  soynlp's. Each unit is found back in the text in order, skipping only characters the cut drops, so every
  unit has the character span it came from; a unit that is not found (a tokenizer that rewrote characters)
  makes the sentence unalignable rather than mislabelled (the review of vllm-project/vllm-omni#4795 asked for
  the units to come from the aligner, not from a second cut).
* A whitespace word gets the span from its first unit's start to its last unit's end. Text written without
  spaces (Chinese, Japanese) is cut at its units instead, so a Chinese sentence is timed per character and a
  Japanese one per word, punctuation riding with the unit before it. A word with no unit ("—", an emoji) is
  timed across the gap it sits in, never dropped.
* Times are clamped inside the audio and made monotone (the head can point past the end; 4795's review again).

Only the tokenizer cares about the language, so it is read from the script: kana means Japanese, hangul Korean,
anything else the whitespace cut (which already splits CJK ideographs). A sentence of silence, or longer than
``qwen_asr``'s 180 s limit, gets no timings; speech of *other* words is not caught (forced alignment places the
given words anyway), as with PocketSphinx.

Loading never downloads unless asked: a directory is read as it is; a hub id is looked up in the local Hugging
Face cache, and fetched only with ``AlignerOptions.download`` (``--aligner-download``).
"""

from __future__ import annotations

import importlib
import logging
import threading
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from speakwire.aligners.base import AlignerOptions, checked_input
from speakwire.audio.chunk import Float32Array
from speakwire.audio.resample import StreamResampler
from speakwire.errors import MissingExtraError
from speakwire.text.alignment import WordTiming, word_spans

logger = logging.getLogger(__name__)

RATE = 16_000
"""What the model hears (``qwen_asr`` resamples anything else with librosa; we resample with soxr first)."""
MAX_SECONDS = 180.0
"""``qwen_asr``'s ``MAX_FORCE_ALIGN_INPUT_SECONDS``: longer audio is refused."""
DEFAULT_LANGUAGES = frozenset({"chinese", "english", "japanese", "korean", "german", "french", "spanish",
                               "portuguese", "italian", "arabic", "indonesian"})  # fmt: skip
"""The model card's languages, for a checkpoint whose config lists none."""
_MIN_SECONDS = 0.1
_SILENCE_PEAK = 1e-4
INSTALL_HINT = (
    'Qwen3-ForcedAligner needs: pip install "speakwire[qwen,align-qwen]" && pip install --no-deps qwen-asr==0.0.6 '
    "(qwen-asr without its pins: its transformers==4.57.6 would replace [qwen]'s 4.57.3, and it pulls gradio and "
    "flask, which aligning does not need)"
)


class Qwen3Aligner:
    """Word timings from Qwen3-ForcedAligner (see the module docstring)."""

    def __init__(self, model: Any, *, source: str, languages: frozenset[str]) -> None:
        self._model = model
        self.name = f"qwen3:{source}"
        self.languages = languages
        self._lock = threading.Lock()
        self._said: set[str] = set()

    @classmethod
    def load(cls, source: str, options: AlignerOptions | None = None) -> Qwen3Aligner:
        """Load a Qwen3-ForcedAligner checkpoint from a local directory or a hub id.

        Args:
            source: a directory, or a hub id (``Qwen/Qwen3-ForcedAligner-0.6B``) found in the local cache.
            options: device, dtype, and whether a hub id may be downloaded.

        Raises:
            FileNotFoundError: no such directory, or a hub id not in the cache (and no download allowed).
            MissingExtraError: torch or qwen-asr (or what it imports) is not installed.
        """
        options = options or AlignerOptions()
        directory = local_directory(source, download=options.download)
        qwen_asr = _import_qwen_asr()
        import torch

        from speakwire.engines.qwen3.device import resolve_device, resolve_dtype

        device = resolve_device(torch, options.device)
        dtype = resolve_dtype(torch, options.dtype, device)
        model = qwen_asr.Qwen3ForcedAligner.from_pretrained(directory, dtype=dtype, device_map=device,
                                                             local_files_only=True)  # fmt: skip
        model.model.eval()
        listed = model.get_supported_languages() or ()
        languages = frozenset(str(language).lower() for language in listed) or DEFAULT_LANGUAGES
        logger.info("aligner qwen3: loaded %s on %s (%s), %d languages", source, device,
                    str(dtype).removeprefix("torch."), len(languages))  # fmt: skip
        return cls(model, source=source, languages=languages)

    def align(self, samples: Float32Array, sample_rate: int, text: str) -> list[WordTiming]:
        """Time the words of ``text`` in ``samples``; empty when the audio cannot be aligned (see ``base``)."""
        samples = checked_input(samples, sample_rate)
        duration_s = len(samples) / sample_rate
        if not word_spans(text) or duration_s < _MIN_SECONDS:
            return []
        if duration_s > MAX_SECONDS:
            self._say_once("longer than 180 s", f"a {duration_s:.0f} s sentence is longer than qwen_asr's 180 s")
            return []
        if float(np.max(np.abs(samples))) < _SILENCE_PEAK:
            return []  # digital silence: nothing is said, and the head would still place every unit
        resampler = StreamResampler(sample_rate, RATE)
        audio = np.concatenate([resampler.process(samples), resampler.flush()]).astype(np.float32)
        if self._model is None:
            raise RuntimeError("the aligner is closed")
        with self._lock:
            result = self._model.align(audio=(audio, RATE), text=text, language=tokenizer_language(text))[0]
        units = [(str(item.text), float(item.start_time), float(item.end_time)) for item in result]
        words = timings(text, units, duration_s)
        if not words and units:
            self._say_once("units", "qwen_asr cut the text into units that are not its characters")
        return words

    def close(self) -> None:
        self._model = None

    def _say_once(self, key: str, why: str) -> None:
        if key not in self._said:
            self._said.add(key)
            logger.warning("aligner %s: a sentence goes without word timings: %s (said once)", self.name, why)


def local_directory(source: str, *, download: bool) -> str:
    """The directory to load ``source`` from: itself, or a hub id's snapshot in the local cache (fetched if allowed).

    Raises:
        FileNotFoundError: neither a directory nor a cached hub id (the message says how to get it).
    """
    path = Path(source).expanduser()
    if path.is_dir():
        return str(path)
    if path.is_absolute() or source.startswith((".", "~")) or source.count("/") != 1:
        raise FileNotFoundError(f"no aligner model directory {source!r} (a hub id is spelled <org>/<name>)")
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError
    except ImportError as error:
        raise _missing("huggingface_hub") from error
    try:
        return str(snapshot_download(source, local_files_only=not download))
    except (LocalEntryNotFoundError, HFValidationError) as error:
        if download:
            raise FileNotFoundError(f"could not download {source!r}: {error}") from error
        raise FileNotFoundError(
            f"{source!r} is not a directory and not in the local Hugging Face cache; fetch it first "
            f"(huggingface-cli download {source}) or allow the download with --aligner-download "
            "(SPEAKWIRE_ALIGNER_DOWNLOAD=1)"
        ) from error


def tokenizer_language(text: str) -> str:
    """The language ``qwen_asr`` cuts ``text`` as: Japanese (kana), Korean (hangul), else the whitespace cut."""
    if any(_is_kana(char) for char in text):
        return "Japanese"
    if any(0xAC00 <= ord(char) <= 0xD7AF or 0x1100 <= ord(char) <= 0x11FF for char in text):
        return "Korean"
    return "English"  # every other language is cut alike: whitespace words, CJK ideographs one by one


def timings(text: str, units: Sequence[tuple[str, float, float]], duration_s: float) -> list[WordTiming]:
    """The words of ``text`` timed by the aligner's ``units`` ((unit, start s, end s) in order; see the docstring).

    Returns:
        One ``WordTiming`` per word (per unit inside text written without spaces), in order, monotone and inside
        ``[0, duration_s]``; empty when a unit cannot be found in the text or no unit was given.
    """
    spans = _unit_spans(text, [unit for unit, _, _ in units])
    if spans is None or not spans:
        return []
    placed: list[tuple[int, int, float, float]] = []
    """(char start, char end, start s, end s) of each unit, times clamped and monotone."""
    last_end = 0.0
    for (start, end), (_, start_s, end_s) in zip(spans, units, strict=True):
        begin = min(max(start_s, last_end, 0.0), duration_s)
        finish = min(max(end_s, begin), duration_s)
        placed.append((start, end, begin, finish))
        last_end = finish
    pieces: list[tuple[int, int, float | None, float | None]] = []
    """(char start, char end, start s, end s) of each word or unspaced piece; None: no unit in it."""
    at = 0
    for word_start, word_end in word_spans(text):
        inside = []
        while at < len(placed) and placed[at][0] < word_end:
            inside.append(placed[at])
            at += 1
        if not inside:
            pieces.append((word_start, word_end, None, None))
        elif len(inside) > 1 and any(_unspaced(char) for char in text[word_start:word_end]):
            for k, (_, _, begin, finish) in enumerate(inside):
                piece_start = word_start if k == 0 else inside[k][0]
                piece_end = word_end if k == len(inside) - 1 else inside[k + 1][0]
                pieces.append((piece_start, piece_end, begin, finish))
        else:
            pieces.append((word_start, word_end, inside[0][2], inside[-1][3]))
    return _fill_gaps(text, pieces, duration_s)


def _fill_gaps(
    text: str, pieces: list[tuple[int, int, float | None, float | None]], duration_s: float
) -> list[WordTiming]:
    """Words with no unit span the gap between their neighbours' times."""
    words: list[WordTiming] = []
    for i, (start, end, begin, finish) in enumerate(pieces):
        previous_end = words[-1].end_s if words else 0.0
        if begin is None or finish is None:
            following = next((p[2] for p in pieces[i + 1 :] if p[2] is not None), duration_s)
            begin, finish = previous_end, max(previous_end, following)
        words.append(WordTiming(text[start:end], start, end, begin, finish))
    return words


def _unit_spans(text: str, units: Sequence[str]) -> list[tuple[int, int]] | None:
    """Where each unit lies in ``text``: its characters in order, skipping only those the cut drops; None if lost."""
    spans: list[tuple[int, int]] = []
    at = 0
    for unit in units:
        if not unit:
            return None
        start = end = -1
        for char in unit:
            while at < len(text) and text[at] != char and not _kept(text[at]):
                at += 1
            if at >= len(text) or text[at] != char:
                return None
            if start < 0:
                start = at
            at += 1
            end = at
        spans.append((start, end))
    return spans


def _kept(char: str) -> bool:
    """A character ``qwen_asr``'s cut keeps (``Qwen3ForceAlignProcessor.is_kept_char``)."""
    return char == "'" or unicodedata.category(char)[0] in "LN"


def _is_kana(char: str) -> bool:
    code = ord(char)
    return 0x3040 <= code <= 0x30FF or 0x31F0 <= code <= 0x31FF or 0xFF66 <= code <= 0xFF9F


def _unspaced(char: str) -> bool:
    """A character of a script written without spaces between words (CJK ideographs, kana)."""
    code = ord(char)
    return (
        _is_kana(char)
        or 0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0xF900 <= code <= 0xFAFF
        or 0x20000 <= code <= 0x2CEAF
    )


def _missing(module: str) -> MissingExtraError:
    missing = MissingExtraError("align-qwen", module)
    missing.add_note(INSTALL_HINT)
    return missing


def _import_qwen_asr() -> Any:
    """``qwen_asr`` (torch first), or ``MissingExtraError`` naming what is missing and how to install it."""
    for module in ("torch", "transformers"):
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise _missing(module) from error
    try:
        return importlib.import_module("qwen_asr")
    except ImportError as error:
        raise _missing("qwen-asr" if error.name in (None, "qwen_asr") else str(error.name)) from error
