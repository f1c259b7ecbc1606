"""Engines chosen by name: ``piper`` (default, embedded voice) or ``qwen3``."""

from __future__ import annotations

import os

from speakwire.engines.base import Engine, EngineInfo
from speakwire.settings import Settings

ENGINE_NAMES = ("piper", "qwen3")
STREAMING_WORKERS = 2
"""Scheduler workers for an engine that streams text (``EngineInfo.streams_text``): they only prepare requests."""


def default_worker_count(settings: Settings, info: EngineInfo | None = None) -> int:
    """One worker per core for CPU engines; ``STREAMING_WORKERS`` for engines that take text while generating.

    Such an engine (Qwen3) generates and decodes every utterance on threads of its own and pushes the audio to
    the event loop; a worker only prepares an utterance's request (a clone prompt's encoders), a short job, so
    a couple serve any number of streams.
    """
    if settings.workers > 0:
        return settings.workers
    if info is not None and info.streams_text:
        return STREAMING_WORKERS
    return max(1, os.cpu_count() or 1)


def load_engine(settings: Settings) -> Engine:
    """Load the engine the settings name; blocking (run it off the event loop)."""
    if settings.engine == "piper":
        from speakwire.engines.piper import PiperEngine

        return PiperEngine.load(settings.model)
    if settings.engine == "qwen3":
        from speakwire.engines.qwen3.loader import load_qwen3_engine

        if not settings.model:
            raise ValueError("--engine qwen3 needs --model (a local directory or a hub id)")
        return load_qwen3_engine(
            settings.model,
            device=settings.device,
            dtype=settings.dtype,
            gpu_memory_utilization=settings.gpu_memory_utilization,
            max_batch=settings.max_batch,
            cuda_graphs=settings.cuda_graphs,
        )
    raise ValueError(f"unknown engine '{settings.engine}'; choose one of {', '.join(ENGINE_NAMES)}")
