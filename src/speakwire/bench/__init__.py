"""Benchmarks: every one of them, and the helpers they share (``speakwire bench NAME``; see bench/README.md).

``catalogue`` names each benchmark and runs it. One module per benchmark, each with ``main(argv=None)``:
``load``, ``open_loop``, ``first_audio``, ``dialect_latency`` (the vendor clients in ``dialects/``),
``wyoming``, ``stalled_readers``, ``soak``, ``memory_growth``, ``ort_tuning``, ``piper_first_chunk``, and
the Qwen3-TTS ones in ``qwen3/``. The shared helpers: ``servers`` (a server under test as a child process,
CPU and memory of a process), ``metrics`` (a server's ``/metrics``), ``machine`` (what it ran on),
``results`` (records, percentiles, result files), ``texts`` (what is spoken), ``timing`` (first audio as
a client sees it), ``playback`` (a real-time player at the client), ``loadgen`` and ``engine_loop`` (the
load benchmark's streams), ``report`` (its tables and plot) and ``checkout`` (the source checkout's test
helpers, for the Qwen3 benchmarks). Results and their READMEs stay in the repository's ``bench/`` folder.
"""
