"""OpenAI-compatible ``POST /v1/audio/speech``: whole file, raw chunked stream, or SSE."""
