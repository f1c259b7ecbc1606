"""The aligner interface: mono audio of one sentence and its text in, the text's words timed out.

An aligner is the fallback for engines with no word timings of their own (Qwen3-TTS): the pipeline hands it
each sentence once its audio is final, off the event loop and off the generation loop, and shifts the
spans it gets by the sentence's start on the utterance's clock. Aligning is blocking CPU (or GPU) work,
so the interface is synchronous; callers run it in a worker thread.

Contract, for every implementation:

* every whitespace-separated word of ``text`` gets one ``WordTiming`` (character offsets into ``text``
  itself, punctuation attached, as ``text.alignment.word_spans`` cuts them), in order, with times in
  seconds from the first sample, monotone and inside the audio; a word the aligner cannot hear (a name
  outside its dictionary, "—") is timed between its neighbours, never dropped. Text written without spaces
  (Chinese, Japanese) may be cut finer, at the aligner's own units (a character, a word), each piece keeping
  the punctuation after it, so the pieces still join back to the text's words;
* audio the aligner cannot align with the text (silence, noise) gives an empty list, not
  an exception: a sentence without timings must not cost its audio. ``align`` raises only for misuse
  (samples that are not mono, a rate that is not positive).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from speakwire.audio.chunk import Float32Array
from speakwire.text.alignment import WordTiming


@dataclass(frozen=True, slots=True)
class AlignerOptions:
    """How a model aligner (``qwen3:<model>``) is loaded; PocketSphinx needs none of it."""

    device: str | None = None
    """``"cuda"``, ``"cuda:1"``, ``"cpu"``; None: CUDA when available (the engine's ``--device`` when given)."""
    dtype: str | None = None
    """``"bfloat16"``, ``"float16"``, ``"float32"``; None: bfloat16 on CUDA, float32 on CPU."""
    download: bool = False
    """A hub id may be downloaded; otherwise only a local directory or the local Hugging Face cache is read."""


@runtime_checkable
class Aligner(Protocol):
    """Forced alignment of one sentence's audio with its text."""

    @property
    def name(self) -> str:
        """The name the registry knows it by (``pocketsphinx``, ``qwen3:<model>``)."""
        ...

    @property
    def languages(self) -> frozenset[str]:
        """Languages it aligns, as lowercase English names (``"english"``); see ``registry.speaks``."""
        ...

    def align(self, samples: Float32Array, sample_rate: int, text: str) -> list[WordTiming]:
        """Time the words of ``text`` in ``samples``.

        Args:
            samples: mono float32 audio of the sentence, in [-1, 1].
            sample_rate: its rate in Hz (the aligner resamples to what its model needs).
            text: the sentence as the client wrote it (numbers as digits: the aligner normalizes).

        Returns:
            One ``WordTiming`` per word of ``text``, in order; empty when the audio cannot be aligned.
        """
        ...

    def close(self) -> None:
        """Release the model; the aligner is not used afterwards."""
        ...


def checked_input(samples: Float32Array, sample_rate: int) -> Float32Array:
    """``samples`` as float32, after the checks every ``align`` makes first (its only misuse errors).

    Raises:
        ValueError: The samples are not mono (one dimension), or the rate is not positive.
    """
    samples = np.asarray(samples, dtype=np.float32)
    if samples.ndim != 1:
        raise ValueError(f"expected mono samples, got shape {samples.shape}")
    if sample_rate <= 0:
        raise ValueError(f"sample rate must be positive, got {sample_rate}")
    return samples
