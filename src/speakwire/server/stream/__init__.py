"""The vLLM-Omni-compatible WebSocket ``/v1/audio/speech/stream``: text in while audio comes out."""
