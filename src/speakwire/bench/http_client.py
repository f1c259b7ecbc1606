"""The benchmarks' synchronous HTTP client: made before the clock starts, with TCP_NODELAY.

Two client costs would otherwise be measured as server latency:

- httpx writes a request's headers and body separately; without TCP_NODELAY, Nagle's algorithm holds the
  body until the server's delayed ACK (~40 ms on Linux).
- ``httpx.stream(...)`` and ``httpx.post(...)`` build a new ``Client`` per call, and each builds an SSL
  context even for ``http://`` (about 22 ms of Python on the 2-core VM, under the GIL): eight streams
  started together spent ~180 ms in their clients before the first request left. A voice application
  keeps its client (the OpenAI SDK's, a pipecat service's) for the whole session.
"""

from __future__ import annotations

import socket

import httpx


def http_client(timeout: float = 60.0) -> httpx.Client:
    """A client to keep for a whole benchmark (or one per concurrent stream): keep-alive, TCP_NODELAY."""
    transport = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    return httpx.Client(transport=transport, timeout=timeout)
