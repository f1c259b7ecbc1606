"""Developer benchmarks: run from the checkout's root as ``python -m bench.<module>`` (see bench/README.md).

The ones a user runs (``speakwire bench load``, ``first-audio``, ``open-loop``, ``qwen3-gpu``) ship in the
package as ``speakwire.bench``; these need the source checkout (the tests' fixtures, ``checkout``), vendor
SDKs from the ``[test]`` extra, or are tuning studies whose answers went into the code. They import the
package's shared helpers (``speakwire.bench.results``, ``servers``, ...); the package never imports them.
"""
