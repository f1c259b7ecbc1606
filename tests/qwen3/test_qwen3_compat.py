"""qwen-tts imports without torchaudio, and the stand-in leaves no trace for other libraries."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from qwen3_testing import require_qwen_tts

pytestmark = pytest.mark.qwen


def test_qwen_tts_imports_without_torchaudio_and_leaves_no_torchaudio_behind() -> None:
    require_qwen_tts()
    if importlib.util.find_spec("torchaudio") is not None:
        pytest.skip("a torchaudio is installed here; the workaround is only used without one")
    code = """
import sys
from speakwire.engines.qwen3.compat import import_qwen_tts
qwen_tts = import_qwen_tts()
assert hasattr(qwen_tts, "Qwen3TTSModel")
assert not [name for name in sys.modules if name.startswith("torchaudio")], "stub left in sys.modules"
from qwen_tts.core.tokenizer_25hz.vq import speech_vq
try:
    speech_vq.kaldi.fbank()
except RuntimeError as exc:
    assert "12 Hz models speakwire serves do not need it" in str(exc)
else:
    raise AssertionError("the stubbed fbank must refuse to run")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    assert "flash-attn" not in result.stdout  # the unused 25 Hz module's warning is silenced
