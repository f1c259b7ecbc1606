"""The benchmarks a user runs, and the helpers they share (``speakwire bench NAME``; the ``[bench]`` extra).

``catalogue`` names each benchmark and runs it. One module per benchmark, each with ``main(argv=None)``: ``load``,
``open_loop``, ``first_audio`` and ``qwen3.gpu``. The shared helpers: ``servers`` (a server under test as a child
process), ``process`` (CPU and memory of a process), ``metrics`` (a server's ``/metrics``), ``machine`` (what it ran
on), ``results`` (records, percentiles, result files), ``texts`` (what is spoken), ``audible`` (the first audible
sample), ``playback`` (a real-time player at the client), ``loadgen`` and ``engine_loop`` (the load benchmark's
streams), ``report`` (its tables and plot), ``http_client`` and ``concurrency``. The developer benchmarks (the
tests' fixtures, vendor SDKs, tuning studies) live in the source checkout's top-level ``bench/`` and import these
helpers; nothing here imports them or the tests. Results and their READMEs stay in the repository's ``bench/``.
"""
