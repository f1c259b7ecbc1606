"""Cartesia's TTS API: the WebSocket ``/tts/websocket`` and HTTP ``/tts/bytes`` and ``/tts/sse``."""
