"""Deepgram Aura text-to-speech: the ``/v1/speak`` WebSocket and ``POST /v1/speak``, for the official SDK."""
