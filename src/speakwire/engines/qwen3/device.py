"""Where the model runs: device, dtype and the share of GPU memory it may take.

Defaults follow what was measured: CUDA in bfloat16 when a GPU is visible, else
CPU in float32 (bfloat16 on CPU was ~20× slower). The GPU memory budget uses
``torch.cuda.set_per_process_memory_fraction`` so several processes (or a
co-located LLM) can share one GPU; SageMaker-style deployments pass it as
``SM_VLLM_GPU_MEMORY_UTILIZATION``, read when no explicit value is given.
"""

from __future__ import annotations

import os
from typing import Any

MEMORY_ENV = "SM_VLLM_GPU_MEMORY_UTILIZATION"

_DTYPES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
}


def resolve_device(torch: Any, device: str | None) -> str:
    """``device`` as given, else ``"cuda"`` when available, else ``"cpu"``."""
    if device:
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device {device!r} requested but CUDA is not available")
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_dtype(torch: Any, dtype: str | None, device: str) -> Any:
    """The torch dtype for ``dtype`` (name or alias), else bfloat16 on CUDA and float32 elsewhere."""
    if dtype is None:
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    name = _DTYPES.get(dtype.lower())
    if name is None:
        raise ValueError(f"unknown dtype {dtype!r}; use one of: bfloat16, float16, float32")
    return getattr(torch, name)


def memory_fraction(value: float | None) -> float | None:
    """The GPU memory share to enforce: ``value``, else ``$SM_VLLM_GPU_MEMORY_UTILIZATION``, else none."""
    if value is None:
        raw = os.environ.get(MEMORY_ENV, "").strip()
        if not raw:
            return None
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{MEMORY_ENV}={raw!r} is not a number between 0 and 1") from None
    if not 0.0 < value <= 1.0:
        raise ValueError(f"GPU memory utilization must be in (0, 1], got {value}")
    return value


def apply_memory_fraction(torch: Any, device: str, fraction: float | None) -> None:
    """Cap this process's CUDA caching allocator at ``fraction`` of the device's memory."""
    if fraction is not None and device.startswith("cuda"):
        # torch wants an index here, not torch.device("cuda"); None means the current device.
        torch.cuda.set_per_process_memory_fraction(float(fraction), torch.device(device).index)
