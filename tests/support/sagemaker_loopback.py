"""SageMaker's bidirectional stream on loopback: a stand-in for the AWS SDK's ``SageMakerRuntimeHTTP2Client``.

It does what SageMaker's sidecar does with ``InvokeEndpointWithBidirectionalStream``: open a WebSocket to the
container at the request's ``model_invocation_path`` with its ``model_query_string`` (the container's default
path, ``invocations-bidirectional-stream``, when there is none), relay each ``RequestPayloadPart`` as one frame
(UTF8 → text, otherwise binary) and each container frame back as one ``ResponseStreamEventPayloadPart``
(COMPLETE), and report the container's Close frame by *raising* ``ModelStreamError`` from the receiver, as the SDK
does. The SDK's own model classes are used throughout, so a client written for the SDK runs unchanged with only
its client object replaced. Python ≥ 3.12 (aws-sdk-sagemaker-runtime-http2).
"""

from __future__ import annotations

from typing import Any

DEFAULT_PATH = "invocations-bidirectional-stream"


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
    """The receiver ``await_output`` returns: each container frame becomes one response payload part."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.received: list[Any] = []

    async def receive(self) -> Any:
        from aws_sdk_sagemaker_runtime_http2 import models
        from websockets.exceptions import ConnectionClosed

        try:
            frame = await self.ws.recv()
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd else 1006
            message = f"container closed the stream ({code})"
            raise models.ModelStreamError(message=message, error_code=str(code)) from exc
        data, kind = (frame.encode("utf-8"), "UTF8") if isinstance(frame, str) else (frame, "BINARY")
        self.received.append(frame)
        part = models.ResponsePayloadPart(bytes_=data, data_type=kind, completion_state="COMPLETE")
        return models.ResponseStreamEventPayloadPart(value=part)

    async def close(self) -> None:
        await self.ws.close()


class RelayStream:
    """What ``invoke_endpoint_with_bidirectional_stream`` returns: ``input_stream`` and ``await_output()``."""

    def __init__(self, ws: Any, url: str) -> None:
        self.ws = ws
        self.url = url
        self.input_stream = RelayInput(ws)
        self.receiver = RelayReceiver(ws)

    async def await_output(self) -> tuple[Any, RelayReceiver]:
        from aws_sdk_sagemaker_runtime_http2.models import InvokeEndpointWithBidirectionalStreamOutput

        return InvokeEndpointWithBidirectionalStreamOutput(invoked_production_variant="AllTraffic"), self.receiver


class LoopbackSageMaker:
    """A stand-in for ``SageMakerRuntimeHTTP2Client`` whose endpoint is a container on loopback ``port``."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.requests: list[Any] = []
        self.streams: list[RelayStream] = []

    async def invoke_endpoint_with_bidirectional_stream(self, input: Any) -> RelayStream:
        from websockets.asyncio.client import connect

        self.requests.append(input)
        url = container_url(self.port, input.model_invocation_path, input.model_query_string)
        stream = RelayStream(await connect(url, max_size=None), url)
        self.streams.append(stream)
        return stream
