"""SageMaker's bidirectional stream on one machine: endpoints by name, each a container on a loopback port.

``--local`` runs pipecat's SageMaker services unchanged; only the AWS SDK client under their
``SageMakerBidiClient`` is this one. It does what SageMaker's sidecar does with
``InvokeEndpointWithBidirectionalStream``: open a WebSocket to the endpoint's container at the request's
``model_invocation_path`` (``invocations-bidirectional-stream`` when there is none) with its
``model_query_string``, relay each request payload part as one frame (UTF8 → text, else binary) and each container
frame back as one ``ResponseStreamEventPayloadPart``, and raise the container's close as ``ModelStreamError``.
The SDK's own model classes are used, so it needs the SDK installed (``aws-sdk-sagemaker-runtime-http2``,
Python >= 3.12), as the services do.
"""

from __future__ import annotations

from typing import Any

DEFAULT_PATH = "invocations-bidirectional-stream"


class RelayInput:
    """The stream's ``input_stream``: a request payload part becomes one WebSocket frame to the container."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws

    async def send(self, event: Any) -> None:
        part = event.value
        await self.ws.send(part.bytes_.decode("utf-8") if part.data_type == "UTF8" else part.bytes_)

    async def close(self) -> None:
        await self.ws.close()


class RelayReceiver:
    """What ``await_output`` returns: ``receive()`` gives each container frame as a payload part event."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws

    async def receive(self) -> Any:
        from aws_sdk_sagemaker_runtime_http2 import models
        from websockets.exceptions import ConnectionClosed

        try:
            frame = await self.ws.recv()
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd else 1006
            error = models.ModelStreamError(message=f"container closed the stream ({code})", error_code=str(code))
            raise error from exc
        data, kind = (frame.encode("utf-8"), "UTF8") if isinstance(frame, str) else (frame, "BINARY")
        part = models.ResponsePayloadPart(bytes_=data, data_type=kind, completion_state="COMPLETE")
        return models.ResponseStreamEventPayloadPart(value=part)


class RelayStream:
    """What ``invoke_endpoint_with_bidirectional_stream`` returns: ``input_stream`` and ``await_output()``."""

    def __init__(self, ws: Any) -> None:
        self.input_stream = RelayInput(ws)
        self.receiver = RelayReceiver(ws)

    async def await_output(self) -> tuple[Any, RelayReceiver]:
        from aws_sdk_sagemaker_runtime_http2.models import InvokeEndpointWithBidirectionalStreamOutput

        return InvokeEndpointWithBidirectionalStreamOutput(invoked_production_variant="AllTraffic"), self.receiver


class LocalSageMakerRuntime:
    """A stand-in for ``SageMakerRuntimeHTTP2Client`` whose endpoints are containers on loopback ports."""

    def __init__(self, endpoints: dict[str, int]) -> None:
        self.endpoints = endpoints
        self.requests: list[Any] = []

    def __call__(self, *, config: Any = None) -> LocalSageMakerRuntime:
        """pipecat builds its client as ``SageMakerRuntimeHTTP2Client(config=...)``: hand back this one."""
        return self

    async def invoke_endpoint_with_bidirectional_stream(self, input: Any) -> RelayStream:
        from websockets.asyncio.client import connect

        self.requests.append(input)
        port = self.endpoints.get(input.endpoint_name)
        if port is None:
            from aws_sdk_sagemaker_runtime_http2.models import ValidationError

            raise ValidationError(
                message=f"Endpoint {input.endpoint_name} not found (local endpoints: {self.endpoints})"
            )
        url = f"ws://127.0.0.1:{port}/{(input.model_invocation_path or DEFAULT_PATH).lstrip('/')}"
        if input.model_query_string:
            url += f"?{input.model_query_string}"
        return RelayStream(await connect(url, max_size=None))


def install(endpoints: dict[str, int]) -> LocalSageMakerRuntime:
    """Make pipecat's ``SageMakerBidiClient`` reach ``endpoints`` (name → loopback port) instead of AWS."""
    from pipecat.services.aws.sagemaker import bidi_client

    runtime = LocalSageMakerRuntime(endpoints)
    bidi_client.SageMakerRuntimeHTTP2Client = runtime  # type: ignore[assignment,misc]
    return runtime
