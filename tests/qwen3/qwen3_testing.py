"""Helpers for tests that drive the tiny Qwen3 model: skipping without the extra, steering EOS, clips."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from speakwire.audio.chunk import AudioChunk
from speakwire.errors import MissingExtraError


def require_qwen_tts() -> Any:
    """``qwen_tts`` (through our torchaudio workaround), or skip the test saying how to install it.

    ``pytest.importorskip("qwen_tts")`` cannot be used directly: on a CPU machine without torchaudio the
    plain import fails even though the package is installed.
    """
    from speakwire.engines.qwen3.compat import INSTALL_HINT, import_qwen_tts

    try:
        return import_qwen_tts()
    except MissingExtraError:
        pytest.skip(f"needs the [qwen] extra. {INSTALL_HINT}")


@dataclass
class TalkerSteps:
    """Counts talker steps (codec-head calls) made while ``steer_eos`` is active."""

    calls: int = 0


@contextlib.contextmanager
def steer_eos(engine: Any, *, after: int | None) -> Iterator[TalkerSteps]:
    """Make the random talker end on cue: EOS right after ``after`` frames, or never (``None``).

    A random model emits codec EOS at random (about 1 step in 65 here), so tests that need a known length
    steer its logits: EOS gets -1e9 until ``after`` frames were consumed, then +1e9. The wrapper sits on
    the talker's codec head, which both the package's ``generate`` and our generation loop call once per
    step: a call over several positions is a prompt (a new utterance), a one-position call is a frame.
    Frames are counted for the whole batch, so steer one utterance at a time.
    """
    head = engine.tts_model.model.talker.codec_head
    eos = int(engine.tts_model.model.config.talker_config.codec_eos_token_id)
    inner = head.forward
    steps = TalkerSteps()
    frames = 0

    @functools.wraps(inner)
    def forward(hidden: Any) -> Any:
        nonlocal frames
        steps.calls += 1
        logits = inner(hidden)
        frames = 0 if logits.shape[1] > 1 else frames + 1
        logits[..., eos].fill_(1e9 if after is not None and frames >= after else -1e9)  # no host tensor
        return logits

    head.forward = forward
    try:
        yield steps
    finally:
        head.forward = inner


def noise_clip(seconds: float, *, seed: int = 0) -> AudioChunk:
    """A reference "voice": quiet noise at 24 kHz (the tiny model cannot tell it from speech)."""
    rng = np.random.default_rng(seed)
    return AudioChunk((0.1 * rng.standard_normal(int(seconds * 24_000))).astype(np.float32), 24_000)
