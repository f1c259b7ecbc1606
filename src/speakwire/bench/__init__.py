"""Load and latency benchmarks: does time to first audio hold when many streams share the machine?

``playback`` simulates a real-time player at the client (underruns), ``loadgen`` drives N concurrent
streams against a server (speakwire HTTP, speakwire WebSocket, Piper's own HTTP server), ``engine_loop``
measures the raw engine with no server (the limit), ``report`` turns records into JSON, markdown and a
plot, and ``runner`` starts the servers and runs everything (``bench/run.py`` and ``speakwire bench``).
"""
