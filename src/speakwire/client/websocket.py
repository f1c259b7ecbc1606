"""WebSocketTransport: the StreamTransport over a plain WebSocket (the ``websockets`` library)."""

from __future__ import annotations

from urllib.parse import urlencode, urlparse, urlunparse

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from speakwire.client.transport import TransportClosed

DEFAULT_PATH = "/v1/audio/speech/stream"


def stream_url(url: str) -> str:
    """Accept ``http(s)://host:port`` or ``ws(s)://...``; add the stream path when none is given."""
    parsed = urlparse(url)
    scheme = {"http": "ws", "https": "wss"}.get(parsed.scheme, parsed.scheme)
    path = parsed.path if parsed.path not in ("", "/") else DEFAULT_PATH
    return urlunparse(parsed._replace(scheme=scheme, path=path))


class WebSocketTransport:
    def __init__(self, connection: ClientConnection) -> None:
        self._ws = connection

    @classmethod
    async def connect(cls, url: str, *, api_key: str | None = None, open_timeout: float = 10.0) -> WebSocketTransport:
        target = stream_url(url)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        try:
            connection = await connect(
                target, additional_headers=headers, max_size=None, open_timeout=open_timeout, compression=None
            )
        except OSError as exc:
            raise TransportClosed(reason=f"cannot reach {target}: {exc}") from exc
        return cls(connection)

    @staticmethod
    def with_query(url: str, **params: str) -> str:
        parsed = urlparse(url)
        query = "&".join(filter(None, [parsed.query, urlencode(params)]))
        return urlunparse(parsed._replace(query=query))

    async def send_text(self, message: str) -> None:
        try:
            await self._ws.send(message)
        except ConnectionClosed as exc:
            raise TransportClosed(exc.rcvd.code if exc.rcvd else None, exc.rcvd.reason if exc.rcvd else "") from exc

    async def send_bytes(self, data: bytes) -> None:
        try:
            await self._ws.send(data)
        except ConnectionClosed as exc:
            raise TransportClosed(exc.rcvd.code if exc.rcvd else None, exc.rcvd.reason if exc.rcvd else "") from exc

    async def receive(self) -> str | bytes:
        try:
            return await self._ws.recv()
        except ConnectionClosed as exc:
            raise TransportClosed(exc.rcvd.code if exc.rcvd else None, exc.rcvd.reason if exc.rcvd else "") from exc

    async def aclose(self) -> None:
        await self._ws.close()
