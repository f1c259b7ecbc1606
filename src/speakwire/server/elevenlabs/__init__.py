"""The ElevenLabs text-to-speech dialect: WebSocket stream-input and multi-stream-input, and the HTTP routes."""
