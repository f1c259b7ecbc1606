"""The Qwen3-TTS benchmarks: the batched generation loop, first audio, a server under concurrency, a GPU run.

They need the ``[qwen]`` extra (torch, qwen-tts; imported when a benchmark runs, never at ``--help``) and a
source checkout: the tiny random checkpoints and EOS steering they run are the tests' own
(``speakwire.bench.checkout``). ``random_checkpoint`` builds the real 0.6B/1.7B architectures with random
weights from the published configs in ``configs/`` (their sources in ``configs/SOURCES.md``).
"""
