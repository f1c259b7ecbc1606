"""Developer benchmarks of Qwen3-TTS on the tests' tiny random checkpoints (``python -m bench.qwen3.<module>``).

They need the ``[qwen]`` extra and this checkout's ``tests/qwen3/`` (``bench.checkout``). The GPU benchmark a
user runs is ``speakwire bench qwen3-gpu`` (``speakwire.bench.qwen3.gpu``); ``gpu_check`` is that run with the
codes compared against the ``qwen_tts`` package's own ``generate``, as ``bench/gpu/run.sh`` runs it.
"""
