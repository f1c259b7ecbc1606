"""Qwen3-TTS (12 Hz) engine: voice cloning, built-in voices and voice design, streamed frame by frame.

Importing this package does not import torch or qwen-tts; ``load_qwen3_engine``
does, and raises ``MissingExtraError`` naming the ``[qwen]`` extra when they are
missing.
"""

from speakwire.engines.qwen3.engine import Qwen3Engine
from speakwire.engines.qwen3.loader import load_qwen3_engine

__all__ = ["Qwen3Engine", "load_qwen3_engine"]
