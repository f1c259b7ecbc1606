"""Aligners: audio of one sentence + its text → when each word is said, for engines that report no timings.

``base`` holds the small ``Aligner`` protocol, ``registry`` chooses one by name (``none``, ``pocketsphinx``,
``qwen3:<model>``) or resolves ``auto``, and each implementation lives in a file of its own.
"""
