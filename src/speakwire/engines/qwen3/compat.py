"""Import ``qwen_tts`` where ``torchaudio`` cannot be imported — the one place that works around it.

``qwen-tts`` 0.1.1 imports its 25 Hz speech tokenizer at package import, and that
module does ``import torchaudio.compliance.kaldi`` at top level. The 12 Hz models
we serve never call it (only the 25 Hz tokenizer's fbank features do). PyPI's
``torchaudio`` wheel is built against CUDA torch: on a CPU-only torch it fails
to import, and installing it would try to replace torch. So ``qwen-tts`` is
installed with ``--no-deps`` and, when ``torchaudio`` is missing or broken, a
stub stands in for ``torchaudio.compliance.kaldi`` *only while qwen_tts is
imported*: afterwards ``sys.modules`` holds no ``torchaudio``, so other
libraries still see it as absent. Calling the stubbed ``fbank`` raises.

The same unused 25 Hz module prints a flash-attn warning to stdout and makes
``sox`` log that the SoX binary is missing; neither matters for the 12 Hz path,
so both are silenced during the import to keep server start-up logs truthful.

Nothing here runs at ``import speakwire``: the engine calls ``import_qwen_tts()``
when it loads a model.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import io
import logging
import sys
import types
from typing import Any

from speakwire.errors import MissingExtraError

INSTALL_HINT = (
    'The Qwen3 engine needs: pip install "speakwire[qwen]" && pip install --no-deps qwen-tts==0.1.1 '
    "(qwen-tts without its torchaudio requirement, which would replace a CPU torch with a CUDA one)"
)
_STUB_NAMES = ("torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi")


def import_qwen_tts() -> Any:
    """Import and return the ``qwen_tts`` module (torch included).

    Raises:
        MissingExtraError: torch or qwen-tts (or one of its runtime dependencies) is not installed.
    """
    try:
        importlib.import_module("torch")
    except ImportError as exc:
        missing = MissingExtraError("qwen", "torch")
        missing.add_note(INSTALL_HINT)
        raise missing from exc
    if sys.modules.get("qwen_tts") is not None:
        return sys.modules["qwen_tts"]
    stubbed = not _torchaudio_importable()
    if stubbed:
        sys.modules.update(_kaldi_stub())
    sox_logger = logging.getLogger("sox")
    sox_logger.addFilter(_drop_warnings)  # sox sets its own level on import, so filter instead
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return importlib.import_module("qwen_tts")
    except ImportError as exc:
        # Name what is actually missing: qwen-tts itself, or one of its runtime dependencies.
        missing = MissingExtraError("qwen", "qwen-tts" if exc.name in (None, "qwen_tts") else exc.name)
        missing.add_note(INSTALL_HINT)
        raise missing from exc
    finally:
        sox_logger.removeFilter(_drop_warnings)
        if stubbed:
            for name in _STUB_NAMES:
                sys.modules.pop(name, None)


def _drop_warnings(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR


def _torchaudio_importable() -> bool:
    try:
        importlib.import_module("torchaudio.compliance.kaldi")
    except Exception:  # ImportError, or OSError from a CUDA-built wheel next to CPU torch
        for name in [n for n in sys.modules if n == "torchaudio" or n.startswith("torchaudio.")]:
            del sys.modules[name]  # drop half-imported modules so the stub is what qwen_tts sees
        return False
    return True


def _kaldi_stub() -> dict[str, types.ModuleType]:
    def fbank(*args: object, **kwargs: object) -> None:
        raise RuntimeError(
            "torchaudio is not installed: the 25 Hz Qwen3-TTS tokenizer (kaldi fbank) is unavailable; "
            "the 12 Hz models speakwire serves do not need it"
        )

    modules = {name: types.ModuleType(name) for name in _STUB_NAMES}
    for name, module in modules.items():
        module.__spec__ = importlib.machinery.ModuleSpec(name, loader=None)
    modules["torchaudio.compliance.kaldi"].fbank = fbank  # type: ignore[attr-defined]
    modules["torchaudio"].compliance = modules["torchaudio.compliance"]  # type: ignore[attr-defined]
    modules["torchaudio.compliance"].kaldi = modules["torchaudio.compliance.kaldi"]  # type: ignore[attr-defined]
    return modules
