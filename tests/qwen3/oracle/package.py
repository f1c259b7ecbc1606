"""The ``qwen_tts`` package's own ``generate_*`` for an engine's request: the reference for codes and audio.

Same prompts (streaming text mode), frame budget, sampling and seed as the engine's rows, so for the same
request both give the same codes and, greedy, the same audio. The package keeps per-call state on its module,
so calls are serialised here.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from speakwire.audio.chunk import AudioChunk
from speakwire.engines.base import SynthesisRequest, SynthesisRun
from speakwire.engines.qwen3.frame_budget import frame_budget

from .frame_tap import FrameTap, GenerationSession, GenerationStopped

SAMPLE_RATE = 24_000
_lock = threading.Lock()
_taps: dict[int, FrameTap] = {}
"""One tap per loaded model (by the id of its ``Qwen3TTSModel``), installed at first use and kept."""


def generate(engine: Any, text: str, request: SynthesisRequest, *, max_new_tokens: int) -> Any:
    """One call of the package's generate method for the request's task, in streaming text mode."""
    tts = engine.tts_model
    kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "non_streaming_mode": False}
    if request.extra.get("greedy"):
        kwargs.update(do_sample=False, subtalker_dosample=False)
    with _lock:
        if request.task_type == "CustomVoice":
            return tts.generate_custom_voice(
                text=text, speaker=request.voice, language=request.language, instruct=request.instructions, **kwargs
            )
        if request.task_type == "VoiceDesign":
            return tts.generate_voice_design(
                text=text, instruct=request.instructions, language=request.language, **kwargs
            )
        return tts.generate_voice_clone(
            text=text, language=request.language, voice_clone_prompt=[request.extra["voice_clone_prompt"]], **kwargs
        )


def synthesize_full(engine: Any, text: str, request: SynthesisRequest, run: SynthesisRun | None = None) -> AudioChunk:
    """The whole segment from the package's ``generate_*`` (non-streaming), cut at the engine's frame budget;
    a cut is reported in ``run.result`` as the engine reports it."""
    import torch

    run = run if run is not None else SynthesisRun()
    request = engine.prepare(engine.validate(request))
    budget = frame_budget(text, request.max_new_tokens)
    tts = engine.tts_model
    tap = _taps.get(id(tts))
    if tap is None:
        tap = _taps[id(tts)] = FrameTap(tts)
    session = GenerationSession(max_frames=budget, stop_at_cap=False, cancelled=(run.cancelled,))
    try:
        with tap.attach(session):
            torch.manual_seed(int(request.seed or 0))
            wavs, rate = generate(engine, text, request, max_new_tokens=budget + 2)
    except GenerationStopped:
        return AudioChunk(np.zeros(0, dtype=np.float32), SAMPLE_RATE)
    # max_new_tokens = budget + 2 lets a runaway make one frame past the budget (that is how it is told from an
    # utterance that ends exactly at the budget); the decoder is causal, so cutting keeps the first `budget`
    # frames exactly as streamed.
    samples_per_frame = int(tts.model.speech_tokenizer.model.decoder.total_upsample)
    samples = np.asarray(wavs[0], dtype=np.float32)[: budget * samples_per_frame]
    if session.capped:
        engine.report_cap(run, budget, text)
    return AudioChunk(np.ascontiguousarray(samples), int(rate))
