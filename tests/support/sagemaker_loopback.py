"""SageMaker's bidirectional stream on loopback: a stand-in for the AWS SDK's ``SageMakerRuntimeHTTP2Client``.

It does what SageMaker's sidecar does with ``InvokeEndpointWithBidirectionalStream``: open a WebSocket to the
container at the request's ``model_invocation_path`` with its ``model_query_string`` (the container's default
path, ``invocations-bidirectional-stream``, when there is none), relay each ``RequestPayloadPart`` as one frame
(UTF8 → text, otherwise binary) and each container frame back as one ``ResponseStreamEventPayloadPart``
(COMPLETE; with ``split_at``, a larger frame as PARTIAL parts closed by a COMPLETE one, as SageMaker may), and
report the container's Close frame as ``ModelStreamError``: *raised* from the receiver, as the SDK does
(``close_as="raise"``), or returned as a ``ResponseStreamEventModelStreamError`` event, the form the AWS sample's
client checks for (``close_as="event"``). The SDK's own model classes are used throughout, so a client written for
the SDK runs unchanged with only its client object replaced. Python ≥ 3.12 (aws-sdk-sagemaker-runtime-http2).
"""

from __future__ import annotations

from typing import Any, Literal

DEFAULT_PATH = "invocations-bidirectional-stream"

CloseReport = Literal["raise", "event"]
"""How the receiver reports the container's Close frame: raise ``ModelStreamError``, or return it as an event."""


def container_url(port: int, path: str | None, query: str | None) -> str:
    """The container URL the sidecar opens for a request's invocation path and query string."""
    url = f"ws://127.0.0.1:{port}/{(path or DEFAULT_PATH).lstrip('/')}"
    return f"{url}?{query}" if query else url


class RelayInput:
    """The stream's ``input_stream``: each request payload part becomes one WebSocket frame to the container."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.sent: list[Any] = []

    async def send(self, event: Any) -> None:
        part = event.value
        self.sent.append(part)
        await self.ws.send(part.bytes_.decode("utf-8") if part.data_type == "UTF8" else part.bytes_)

    async def close(self) -> None:
        await self.ws.close()


class RelayReceiver:
    """The receiver ``await_output`` returns: each container frame becomes response payload parts."""

    def __init__(self, ws: Any, *, close_as: CloseReport = "raise", split_at: int | None = None) -> None:
        self.ws = ws
        self.close_as = close_as
        self.split_at = split_at
        self.received: list[Any] = []
        self._pending: list[Any] = []

    async def receive(self) -> Any:
        from aws_sdk_sagemaker_runtime_http2 import models
        from websockets.exceptions import ConnectionClosed

        if self._pending:
            return self._pending.pop(0)
        try:
            frame = await self.ws.recv()
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd else 1006
            error = models.ModelStreamError(message=f"container closed the stream ({code})", error_code=str(code))
            if self.close_as == "event":
                return models.ResponseStreamEventModelStreamError(value=error)
            raise error from exc
        self.received.append(frame)
        data, kind = (frame.encode("utf-8"), "UTF8") if isinstance(frame, str) else (frame, "BINARY")
        size = self.split_at or max(len(data), 1)
        pieces = [data[i : i + size] for i in range(0, len(data), size)] or [b""]
        for n, piece in enumerate(pieces):
            state = "COMPLETE" if n == len(pieces) - 1 else "PARTIAL"
            part = models.ResponsePayloadPart(bytes_=piece, data_type=kind, completion_state=state)
            self._pending.append(models.ResponseStreamEventPayloadPart(value=part))
        return self._pending.pop(0)

    async def close(self) -> None:
        await self.ws.close()


class RelayStream:
    """What ``invoke_endpoint_with_bidirectional_stream`` returns: ``input_stream`` and ``await_output()``."""

    def __init__(self, ws: Any, url: str, *, close_as: CloseReport = "raise", split_at: int | None = None) -> None:
        self.ws = ws
        self.url = url
        self.input_stream = RelayInput(ws)
        self.receiver = RelayReceiver(ws, close_as=close_as, split_at=split_at)

    async def await_output(self) -> tuple[Any, RelayReceiver]:
        from aws_sdk_sagemaker_runtime_http2.models import InvokeEndpointWithBidirectionalStreamOutput

        return InvokeEndpointWithBidirectionalStreamOutput(invoked_production_variant="AllTraffic"), self.receiver


async def open_relay(
    port: int,
    path: str | None = None,
    query: str | None = None,
    *,
    close_as: CloseReport = "raise",
    split_at: int | None = None,
) -> RelayStream:
    """One bidirectional stream to the container on loopback ``port``, as the sidecar opens it."""
    from websockets.asyncio.client import connect

    url = container_url(port, path, query)
    return RelayStream(await connect(url, max_size=None), url, close_as=close_as, split_at=split_at)


class LoopbackSageMaker:
    """A stand-in for ``SageMakerRuntimeHTTP2Client`` whose endpoint is a container on loopback ``port``."""

    def __init__(self, port: int, *, close_as: CloseReport = "raise", split_at: int | None = None) -> None:
        self.port = port
        self.close_as = close_as
        self.split_at = split_at
        self.requests: list[Any] = []
        self.streams: list[RelayStream] = []

    async def invoke_endpoint_with_bidirectional_stream(self, input: Any) -> RelayStream:
        self.requests.append(input)
        stream = await open_relay(self.port, input.model_invocation_path, input.model_query_string,
                                  close_as=self.close_as, split_at=self.split_at)  # fmt: skip
        self.streams.append(stream)
        return stream
