"""Wyoming (Home Assistant) TTS over TCP, beside the HTTP server in the same process and event loop."""
