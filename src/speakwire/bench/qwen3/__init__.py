"""Qwen3-TTS on a GPU as a user measures it: ``speakwire bench qwen3-gpu`` (``gpu``), with the ``[qwen]`` extra.

``random_checkpoint`` builds the real 0.6B/1.7B architectures with random weights from the published configs in
``configs/`` (their sources in ``configs/SOURCES.md``); ``steering`` ends a random model's utterances on cue and
gives it a reference clip to clone. The developer benchmarks on the tests' tiny checkpoints live in the
checkout's ``bench/qwen3/``.
"""
