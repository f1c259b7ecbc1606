"""Clone prompts on disk: a Qwen3-TTS ``VoiceClonePromptItem`` ↔ a small torch file, valid for one model.

Encoding a clone prompt runs the speech tokenizer's encoder and the speaker
encoder over the reference: tens of milliseconds on a GPU, seconds on a CPU.
A saved voice pays that once per model: the prompt's tensors are written next to
the voice's audio and loaded by every later request, across restarts.

A prompt belongs to the model that computed it (its codes and speaker embedding
live in that checkpoint's spaces), so each file is keyed by engine name and
model id and carries both inside; a prompt for another model is never used —
the library computes a new one instead. Files hold only tensors, strings and
booleans and are read with ``torch.load(weights_only=True)``, which refuses
pickled code, so an imported archive cannot run anything; their shapes and
types are checked too, and a file that fails any check is recomputed rather
than used.
"""

from __future__ import annotations

import hashlib
import io
from typing import Any

from speakwire.engines.base import EngineInfo
from speakwire.voices.fields import MAX_REF_TEXT_CHARS

PROMPT_FORMAT = 1
MAX_PROMPT_BYTES = 4 * 1024 * 1024
"""A 30 s ICL prompt is ~50 KB (375 frames × 16 codebooks of int64, plus a ≤ 2048-float embedding)."""
_MAX_FRAMES, _MAX_CODEBOOKS, _MAX_EMBEDDING = 1000, 64, 8192


class PromptMismatchError(ValueError):
    """A stored prompt is for another model, another transcript, or malformed: compute a new one."""


def model_key(engine: str, model: str) -> str:
    """Stable file-name-safe key of one engine's model id (model ids are paths or hub ids)."""
    return hashlib.sha256(f"{engine}\x00{model}".encode()).hexdigest()[:32]


def stores_prompts(info: EngineInfo) -> bool:
    """Whether the engine's prepared clone prompts can be saved and reloaded (Qwen3-TTS Base)."""
    return info.name == "qwen3" and info.supports_cloning


def dump_prompt(item: Any, *, engine: str, model: str) -> bytes:
    """Serialise a ``VoiceClonePromptItem`` (tensors moved to the CPU) with the model it belongs to."""
    import torch

    payload = {
        "format": PROMPT_FORMAT,
        "engine": engine,
        "model": model,
        "ref_code": None if item.ref_code is None else item.ref_code.detach().to("cpu"),
        "ref_spk_embedding": item.ref_spk_embedding.detach().to("cpu"),
        "x_vector_only_mode": bool(item.x_vector_only_mode),
        "icl_mode": bool(item.icl_mode),
        "ref_text": item.ref_text,
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getvalue()


def read_payload(data: bytes) -> dict[str, Any]:
    """The checked contents of a prompt file, tensors on the CPU.

    Raises:
        PromptMismatchError: Not a prompt file of this format, or implausible tensors.
    """
    import torch

    if len(data) > MAX_PROMPT_BYTES:
        raise PromptMismatchError(f"prompt file is {len(data)} bytes; the limit is {MAX_PROMPT_BYTES}")
    try:
        payload = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises pickle, zip and runtime errors alike for a foreign file
        raise PromptMismatchError(f"not a prompt file: {type(exc).__name__}: {exc}") from exc
    if not isinstance(payload, dict) or payload.get("format") != PROMPT_FORMAT:
        raise PromptMismatchError("not a speakwire prompt file of format 1")
    for key in ("engine", "model"):
        if not isinstance(payload.get(key), str):
            raise PromptMismatchError(f"prompt file has no {key}")
    ref_text = payload.get("ref_text")
    if ref_text is not None and (not isinstance(ref_text, str) or len(ref_text) > MAX_REF_TEXT_CHARS):
        raise PromptMismatchError("prompt ref_text is not a string of at most 2000 characters")
    x_vector_only, icl = payload.get("x_vector_only_mode"), payload.get("icl_mode")
    if not isinstance(x_vector_only, bool) or icl is not (not x_vector_only):
        raise PromptMismatchError("prompt mode flags are inconsistent")
    embedding = payload.get("ref_spk_embedding")
    if not _tensor(embedding, floating=True, shape=(_MAX_EMBEDDING,)):
        raise PromptMismatchError("prompt speaker embedding must be a 1-D float tensor")
    code = payload.get("ref_code")
    if icl and not (
        _tensor(code, floating=False, shape=(_MAX_FRAMES,))
        or _tensor(code, floating=False, shape=(_MAX_FRAMES, _MAX_CODEBOOKS))
    ):
        raise PromptMismatchError("prompt reference codes must be an integer tensor of frames")
    if not icl and code is not None:
        raise PromptMismatchError("an x-vector-only prompt carries no reference codes")
    return dict(payload)


def _tensor(value: object, *, floating: bool, shape: tuple[int, ...]) -> bool:
    """``value`` is a tensor of the kind, with as many dimensions as ``shape`` and each in ``1..shape[i]``."""
    import torch

    return (
        isinstance(value, torch.Tensor)
        and value.is_floating_point() is floating
        and value.ndim == len(shape)
        and all(0 < size <= limit for size, limit in zip(value.shape, shape, strict=True))
    )


def load_prompt(data: bytes, *, info: EngineInfo, ref_text: str | None) -> Any:
    """A ``VoiceClonePromptItem`` for the serving engine, on its device and in its dtype.

    Raises:
        PromptMismatchError: The file is for another engine or model, for another transcript or mode, or
            malformed: the caller computes a fresh prompt instead.
    """
    import torch

    from speakwire.engines.qwen3.compat import import_qwen_tts

    payload = read_payload(data)
    if (payload["engine"], payload["model"]) != (info.name, info.model):
        raise PromptMismatchError(
            f"prompt was computed by {payload['engine']} {payload['model']!r}, not {info.name} {info.model!r}"
        )
    if payload["ref_text"] != ref_text or payload["x_vector_only_mode"] is not (ref_text is None):
        raise PromptMismatchError("prompt was computed with another transcript or mode")
    device = str(info.extra.get("device") or "cpu")
    dtype = getattr(torch, str(info.extra.get("dtype") or "float32"), None)
    embedding = payload["ref_spk_embedding"].to(device=device, dtype=dtype if isinstance(dtype, torch.dtype) else None)
    code = payload["ref_code"]
    qwen_tts = import_qwen_tts()
    return qwen_tts.VoiceClonePromptItem(
        ref_code=None if code is None else code.to(device),
        ref_spk_embedding=embedding,
        x_vector_only_mode=payload["x_vector_only_mode"],
        icl_mode=payload["icl_mode"],
        ref_text=payload["ref_text"],
    )
