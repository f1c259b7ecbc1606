"""Amazon SageMaker hosting contract: /ping, /invocations routing, the bidirectional-stream WebSocket."""
