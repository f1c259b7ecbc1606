"""Settings for SageMaker container mode, read from the environment the way the vLLM-Omni container reads it.

Model resolution, in order: ``SM_VLLM_MODEL`` (→ Qwen3-TTS with that model), ``/opt/ml/model``
when it holds a model (a Qwen3 checkpoint → qwen3; a Piper ``.onnx`` voice → piper),
``HF_MODEL_ID``, else the embedded Piper voice. ``SM_VLLM_GPU_MEMORY_UTILIZATION`` sets the
GPU memory budget. ``SPEAKWIRE_*`` variables and explicit flags apply on top. Every choice is
logged with its reason, so a CloudWatch reader knows what was served and why.

Whatever its source, the served model also answers to ``/opt/ml/model`` and to the ``SM_VLLM_MODEL``
value: the JumpStart voice-cloning write-up (and ``speakwire sagemaker invoke``) send
``"model": "/opt/ml/model"``, the name the JumpStart container gives the artifacts mounted there.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
            shown = "(set)" if key == "api_key" else value
            reasons.append(f"{key}={shown} (command line)")
    aliases = [name for name in sagemaker_model_aliases(environ) if name != settings.model]
    if aliases:
        settings.model_aliases = {**dict.fromkeys(aliases, ""), **settings.model_aliases}
        reasons.append(f"the served model also answers to {', '.join(aliases)} (the names SageMaker clients send)")
    return Resolution(settings, reasons)


def sagemaker_model_aliases(environ: Mapping[str, str]) -> list[str]:
    """The names an endpoint's served model answers to besides its own: ``/opt/ml/model`` (where
    SageMaker mounts model artifacts, and the ``model`` the JumpStart cloning call sends) and the
    ``SM_VLLM_MODEL`` value (the hub id ``speakwire sagemaker deploy --model-id`` sets), even when
    ``--model`` serves something else."""
    aliases = [str(SAGEMAKER_MODEL_DIR)]
    if environ.get("SM_VLLM_MODEL"):
        aliases.append(environ["SM_VLLM_MODEL"])
    return aliases


def sagemaker_settings(flags: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Settings:
    """Settings for ``speakwire serve --sagemaker``: the environment's choices, then the flags given
    (None: not given), each choice logged with its reason."""
    import os

    resolution = resolve_sagemaker_settings(os.environ if environ is None else environ, **flags)
    for reason in resolution.reasons:
        logger.info("sagemaker: %s", reason)
    return resolution.settings
