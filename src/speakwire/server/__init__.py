"""The HTTP/WebSocket server: app factory, protocol routers, auth, metrics."""
