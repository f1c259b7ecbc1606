"""Clients for speakwire's streaming protocol, over a WebSocket or a SageMaker bidirectional stream."""
