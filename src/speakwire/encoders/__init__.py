"""Streaming audio encoders: ``header()`` / ``encode()`` / ``finish()`` over s16 PCM, no I/O."""
