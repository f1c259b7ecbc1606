"""WebSocket audio goes out uncompressed: a client that offers permessage-deflate gets no extension."""

from __future__ import annotations

from websockets.asyncio.client import connect

from support.live_server import LiveServer


async def test_a_client_offering_permessage_deflate_gets_no_extension(server: LiveServer) -> None:
    async with connect(server.ws_url, compression="deflate") as ws:
        offered = ws.request.headers.get("Sec-WebSocket-Extensions") if ws.request else None
        assert offered is not None and "permessage-deflate" in offered
        assert ws.response is not None and "Sec-WebSocket-Extensions" not in ws.response.headers
        assert ws.protocol.extensions == []
