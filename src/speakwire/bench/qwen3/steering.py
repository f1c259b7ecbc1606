"""What a random-weight Qwen3 model needs to be measured: EOS on cue, and a reference "voice" to clone.

A random talker emits codec EOS at random (about 1 step in 65), so a benchmark that wants utterances of a
known length steers its logits; and voice cloning needs a reference clip, which a random speaker encoder
cannot tell from noise. The tests hold the same two helpers (``tests/qwen3/qwen3_testing.py``); the package
has its own so that ``speakwire bench qwen3-gpu`` runs from an installed wheel.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import numpy as np

from speakwire.audio.chunk import AudioChunk


@contextlib.contextmanager
def steer_eos(engine: Any, *, after: int | None) -> Iterator[None]:
    """Make the random talker end on cue: EOS right after ``after`` frames, or never (``None``).

    EOS gets -1e9 until ``after`` frames were made, then +1e9. The wrapper sits on the talker's codec head,
    which both the package's ``generate`` and our generation loop call once per step: a call over several
    positions is a prompt (a new utterance), a one-position call is a frame. Frames are counted for the
    whole batch, so with ``after`` set steer one utterance at a time.
    """
    head = engine.tts_model.model.talker.codec_head
    eos = int(engine.tts_model.model.config.talker_config.codec_eos_token_id)
    inner = head.forward
    frames = 0

    @functools.wraps(inner)
    def forward(hidden: Any) -> Any:
        nonlocal frames
        logits = inner(hidden)
        frames = 0 if logits.shape[1] > 1 else frames + 1
        logits[..., eos].fill_(1e9 if after is not None and frames >= after else -1e9)  # no host tensor
        return logits

    head.forward = forward
    try:
        yield
    finally:
        head.forward = inner


def noise_clip(seconds: float, *, seed: int = 0) -> AudioChunk:
    """A reference "voice": quiet noise at 24 kHz (a random model cannot tell it from speech)."""
    rng = np.random.default_rng(seed)
    return AudioChunk((0.1 * rng.standard_normal(int(seconds * 24_000))).astype(np.float32), 24_000)
