"""Reference ways to compute what the Qwen3 engine computes, kept out of the package: the tests compare with them.

* ``package``: the ``qwen_tts`` package's own ``generate_*`` (its codes, its audio), patched through
  ``frame_tap`` so it stops at our frame budget;
* ``eager_step``: the loop's step as the package's layers run it eagerly, state gathered per step;
* ``predictor_graph``: the code predictor alone over static per-bucket buffers (the step before ``StaticStep``).
"""
