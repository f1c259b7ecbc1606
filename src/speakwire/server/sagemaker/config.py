"""Settings for SageMaker container mode, read from the environment the way the vLLM-Omni container reads it.

Model resolution, in order: ``SM_VLLM_MODEL`` (→ Qwen3-TTS with that model), ``/opt/ml/model``
when it holds a model (a Qwen3 checkpoint → qwen3; a Piper ``.onnx`` voice → piper),
``HF_MODEL_ID``, else the embedded Piper voice. ``SM_VLLM_GPU_MEMORY_UTILIZATION`` sets the
GPU memory budget. ``SPEAKWIRE_*`` variables and explicit flags apply on top. Every choice is
logged with its reason, so a CloudWatch reader knows what was served and why.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from speakwire.settings import Settings

logger = logging.getLogger(__name__)

SAGEMAKER_MODEL_DIR = Path("/opt/ml/model")
SAGEMAKER_PORT = 8080


@dataclass(slots=True)
class Resolution:
    settings: Settings
    reasons: list[str] = field(default_factory=list)


def _piper_voice_in(directory: Path) -> Path | None:
    voices = sorted(directory.glob("*.onnx"))
    return voices[0] if voices else None


def resolve_sagemaker_settings(
    environ: Mapping[str, str], *, model_dir: Path = SAGEMAKER_MODEL_DIR, **overrides: object
) -> Resolution:
    """Pure: environment + flags → settings, with the reason for each choice."""
    settings = Settings.from_env(environ)
    settings.sagemaker = True
    if not environ.get("SPEAKWIRE_HOST"):
        settings.host = "0.0.0.0"
    if not environ.get("SPEAKWIRE_PORT"):
        settings.port = SAGEMAKER_PORT
    reasons: list[str] = []
    if environ.get("SM_VLLM_MODEL"):
        settings.engine, settings.model = "qwen3", environ["SM_VLLM_MODEL"]
        reasons.append(f"engine qwen3, model {settings.model} (from SM_VLLM_MODEL)")
    elif (model_dir / "config.json").is_file():
        settings.engine, settings.model = "qwen3", str(model_dir)
        reasons.append(f"engine qwen3, model {model_dir} (a checkpoint is mounted there)")
    elif model_dir.is_dir() and (voice := _piper_voice_in(model_dir)) is not None:
        settings.engine, settings.model = "piper", str(voice)
        reasons.append(f"engine piper, voice {voice} (a Piper voice is mounted in {model_dir})")
    elif environ.get("HF_MODEL_ID"):
        settings.engine, settings.model = "qwen3", environ["HF_MODEL_ID"]
        reasons.append(f"engine qwen3, model {settings.model} (from HF_MODEL_ID)")
    elif environ.get("SPEAKWIRE_ENGINE") or environ.get("SPEAKWIRE_MODEL"):
        reasons.append(f"engine {settings.engine}, model {settings.model} (from SPEAKWIRE_ENGINE/SPEAKWIRE_MODEL)")
    else:
        reasons.append("engine piper with the embedded voice (no SM_VLLM_MODEL, nothing in /opt/ml/model)")
    if environ.get("SM_VLLM_GPU_MEMORY_UTILIZATION"):
        settings.gpu_memory_utilization = float(environ["SM_VLLM_GPU_MEMORY_UTILIZATION"])
        reasons.append(f"GPU memory utilization {settings.gpu_memory_utilization} (SM_VLLM_GPU_MEMORY_UTILIZATION)")
    for key, value in overrides.items():
        if value is not None:
            setattr(settings, key, value)
            reasons.append(f"{key}={value} (command line)")
    return Resolution(settings, reasons)


def sagemaker_settings(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Settings:
    """Settings for ``speakwire serve --sagemaker``; flags still override (tests pick their own port)."""
    import os

    resolution = resolve_sagemaker_settings(
        os.environ if environ is None else environ,
        host=args.host, port=args.port, engine=args.engine, model=args.model or args.voice, device=args.device,
        dtype=args.dtype, gpu_memory_utilization=args.gpu_memory_utilization, api_key=args.api_key,
        workers=args.workers, max_streams=args.max_streams, max_batch=args.max_batch,
        cuda_graphs=args.cuda_graphs or None, log_level=args.log_level, default_seed=args.seed,
    )  # fmt: skip
    for reason in resolution.reasons:
        logger.info("sagemaker: %s", reason)
    return resolution.settings
