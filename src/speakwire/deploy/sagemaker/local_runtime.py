"""A local stand-in for the SageMaker runtime: boto3's ``sagemaker-runtime`` client talks to it unchanged.

It serves the runtime's REST API as botocore calls it and forwards each call to a container's
``POST /invocations`` (our server in SageMaker mode, by default ``http://127.0.0.1:8080``), so code
written for an endpoint runs against a laptop before one is paid for::

    AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME=http://127.0.0.1:8090 python my_client.py

What it does as the runtime does:

- ``POST /endpoints/{name}/invocations`` (InvokeEndpoint): ``Content-Type``, ``Accept`` and
  ``X-Amzn-SageMaker-Custom-Attributes`` go to the container; its body, ``Content-Type`` and
  custom attributes come back with ``x-Amzn-Invoked-Production-Variant``.
- ``POST /endpoints/{name}/invocations-response-stream`` (InvokeEndpointWithResponseStream): the
  container's body is relayed as ``PayloadPart`` events as it arrives, cut wherever the bytes
  happen to be (``max_part_bytes`` cuts them smaller still); its content type comes back as
  ``X-Amzn-SageMaker-Content-Type`` and ``Accept`` goes in as ``X-Amzn-SageMaker-Accept``.
- A container status of 400 or more becomes HTTP 424 ``ModelError`` with the container's status
  and body inside; a stream that breaks after it began ends with a ``ModelStreamError`` event.
- A name other than ``endpoint_name`` (when one is set) is ``ValidationError`` "Endpoint X of
  account Y not found."

What it does not do: check signatures (any credentials are accepted), enforce quotas, or run
several variants. Nor does it serve the bidirectional stream: its only client,
``aws-sdk-sagemaker-runtime-http2`` (0.9.0, the ``[sagemaker-bidi]`` pin) over awscrt, speaks HTTP/2 only
over TLS (no cleartext HTTP/2): against ``http://`` it opens the TCP connection and sends nothing on it
(not a byte in 8 s, until its open deadline closes it). The tests
reach the container's bidirectional WebSocket through a loopback relay instead
(``tests/deploy/test_sagemaker_bidi_local.py``).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from speakwire.deploy.sagemaker import event_stream
from speakwire.deploy.sagemaker.runtime_errors import (
    LOCAL_ACCOUNT_ID,
    ErrorReply,
    endpoint_not_found,
    model_error,
    validation_error,
)

DEFAULT_CONTAINER_URL = "http://127.0.0.1:8080"
DEFAULT_PORT = 8090
DEFAULT_REGION = "us-west-2"
DEFAULT_VARIANT = "AllTraffic"
DEFAULT_INVOCATION_TIMEOUT_S = 60.0  # InvokeEndpoint's limit for the container to answer
ENDPOINT_URL_ENV = "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME"  # boto3's service-specific endpoint variable
MAX_REQUEST_BYTES = 6 * 1024 * 1024  # the runtime's real-time payload limit
CUSTOM_ATTRIBUTES = "X-Amzn-SageMaker-Custom-Attributes"
STREAM_ACCEPT = "X-Amzn-SageMaker-Accept"
STREAM_CONTENT_TYPE = "X-Amzn-SageMaker-Content-Type"
INVOKED_VARIANT = "x-Amzn-Invoked-Production-Variant"
REQUEST_ID = "x-amzn-RequestId"
# SigV4: Authorization: AWS4-HMAC-SHA256 Credential=AKID/20260101/us-west-2/sagemaker/aws4_request, ...
_CREDENTIAL_REGION = re.compile(r"Credential=[^/,]+/\d{8}/([a-z0-9-]+)/")


@dataclass(frozen=True, slots=True)
class LocalRuntimeConfig:
    """What the local runtime forwards to, and how it names itself in replies.

    Attributes:
        container_url: Base URL of the container; ``/invocations`` is appended.
        endpoint_name: The one endpoint name that answers, or None for any name.
        region: Used in error messages when the request's signature names none.
        account_id: Shown where the runtime shows the account (errors, ARNs).
        variant_name: Reported as the invoked production variant.
        max_part_bytes: Largest ``PayloadPart``; None relays the container's chunks as they come.
        invocation_timeout_s: How long the container may be silent before the call fails.
    """

    container_url: str = DEFAULT_CONTAINER_URL
    endpoint_name: str | None = None
    region: str = DEFAULT_REGION
    account_id: str = LOCAL_ACCOUNT_ID
    variant_name: str = DEFAULT_VARIANT
    max_part_bytes: int | None = None
    invocation_timeout_s: float = DEFAULT_INVOCATION_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.max_part_bytes is not None and self.max_part_bytes < 1:
            raise ValueError("max_part_bytes must be at least 1")
        if self.invocation_timeout_s <= 0:
            raise ValueError("invocation_timeout_s must be positive")

    @property
    def invocations_url(self) -> str:
        return self.container_url.rstrip("/") + "/invocations"


def cut_parts(data: bytes, max_part_bytes: int | None) -> Iterable[bytes]:
    """``data`` in pieces of at most ``max_part_bytes`` (one piece when None); nothing for no data."""
    if not data:
        return ()
    if max_part_bytes is None or len(data) <= max_part_bytes:
        return (data,)
    return (data[i : i + max_part_bytes] for i in range(0, len(data), max_part_bytes))


def create_local_runtime_app(config: LocalRuntimeConfig) -> Starlette:
    """The runtime's two real-time operations over ``config``'s container."""
    runtime = _Runtime(config)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        timeout = httpx.Timeout(config.invocation_timeout_s, connect=5.0)
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:  # no proxy to a local container
            runtime.client = client
            yield

    routes = [
        Route("/endpoints/{name}/invocations", runtime.invoke, methods=["POST"]),
        Route("/endpoints/{name}/invocations-response-stream", runtime.invoke_with_response_stream, methods=["POST"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


class _Runtime:
    """The two handlers, sharing one HTTP client to the container."""

    def __init__(self, config: LocalRuntimeConfig) -> None:
        self.config = config
        self.client: httpx.AsyncClient | None = None

    async def invoke(self, request: Request) -> Response:
        name = request.path_params["name"]
        refused = await self._refusal(request, name)
        if refused is not None:
            return refused
        headers = _container_headers(request, accept_header="accept")
        try:
            answer = await self._client.post(self.config.invocations_url, content=await request.body(), headers=headers)
        except httpx.HTTPError as exc:
            return self._unanswered(request, name, exc)
        if answer.status_code >= 400:
            return self._model_error(request, name, answer.status_code, answer.content)
        reply_headers = self._reply_headers(answer)
        reply_headers["Content-Type"] = answer.headers.get("content-type", "application/octet-stream")
        return Response(answer.content, status_code=200, headers=reply_headers)

    async def invoke_with_response_stream(self, request: Request) -> Response:
        name = request.path_params["name"]
        refused = await self._refusal(request, name)
        if refused is not None:
            return refused
        headers = _container_headers(request, accept_header=STREAM_ACCEPT)
        outgoing = self._client.build_request(
            "POST", self.config.invocations_url, content=await request.body(), headers=headers
        )
        try:
            answer = await self._client.send(outgoing, stream=True)
        except httpx.HTTPError as exc:
            return self._unanswered(request, name, exc)
        if answer.status_code >= 400:
            try:
                body = await answer.aread()
            finally:
                await answer.aclose()
            return self._model_error(request, name, answer.status_code, body)
        reply_headers = self._reply_headers(answer)
        if "content-type" in answer.headers:
            reply_headers[STREAM_CONTENT_TYPE] = answer.headers["content-type"]
        return StreamingResponse(
            self._relay(answer), status_code=200, headers=reply_headers, media_type=event_stream.CONTENT_TYPE
        )

    async def _relay(self, answer: httpx.Response) -> AsyncIterator[bytes]:
        """The container's body as PayloadPart events, then a ModelStreamError if it broke off."""
        try:
            async for chunk in answer.aiter_bytes():
                for piece in cut_parts(chunk, self.config.max_part_bytes):
                    yield event_stream.payload_part(piece)
        except httpx.TimeoutException:
            yield event_stream.model_stream_error(
                "Your model did not send the next part of its response in time.",
                error_code="ModelInvocationTimeExceeded",
            )
        except httpx.HTTPError as exc:
            yield event_stream.model_stream_error(f"The container's response stream broke: {exc or type(exc).__name__}")
        finally:
            await answer.aclose()

    @property
    def _client(self) -> httpx.AsyncClient:
        if self.client is None:
            raise RuntimeError("the local runtime app is used outside its lifespan")
        return self.client

    async def _refusal(self, request: Request, name: str) -> Response | None:
        if self.config.endpoint_name is not None and name != self.config.endpoint_name:
            return _error_response(endpoint_not_found(name, self.config.account_id))
        size = int(request.headers.get("content-length") or 0)
        if size > MAX_REQUEST_BYTES:
            return _error_response(
                validation_error(f"Request payload of {size} bytes is over the limit of {MAX_REQUEST_BYTES} bytes.")
            )
        return None

    def _model_error(self, request: Request, name: str, status: int | None, body: bytes) -> Response:
        reply = model_error(
            status,
            body,
            endpoint_name=name,
            region=_region(request, self.config.region),
            account_id=self.config.account_id,
        )
        return _error_response(reply)

    def _unanswered(self, request: Request, name: str, exc: httpx.HTTPError) -> Response:
        if isinstance(exc, httpx.TimeoutException):
            reason = (
                f"Your invocation timed out while waiting for a response from container {self.config.container_url}."
            )
        else:
            reason = f"Could not reach the container at {self.config.invocations_url}: {exc or type(exc).__name__}"
        return self._model_error(request, name, None, reason.encode())

    def _reply_headers(self, answer: httpx.Response) -> dict[str, str]:
        headers = {INVOKED_VARIANT: self.config.variant_name, REQUEST_ID: str(uuid.uuid4())}
        if CUSTOM_ATTRIBUTES in answer.headers:
            headers[CUSTOM_ATTRIBUTES] = answer.headers[CUSTOM_ATTRIBUTES]
        return headers


def _container_headers(request: Request, *, accept_header: str) -> dict[str, str]:
    """What the runtime passes on: the body's type, the wanted type and the custom attributes."""
    headers = {}
    for source, target in (
        ("content-type", "Content-Type"),
        (accept_header, "Accept"),
        (CUSTOM_ATTRIBUTES, CUSTOM_ATTRIBUTES),
    ):
        value = request.headers.get(source)
        if value is not None:
            headers[target] = value
    return headers


def _region(request: Request, default: str) -> str:
    """The region the client signed for (so messages name the client's region), else ``default``."""
    match = _CREDENTIAL_REGION.search(request.headers.get("authorization", ""))
    return match.group(1) if match else default


def _error_response(reply: ErrorReply) -> Response:
    return Response(reply.content(), status_code=reply.status, headers={**reply.headers, REQUEST_ID: str(uuid.uuid4())})


class LocalRuntime:
    """The local runtime on a loopback port, in a background thread; a context manager.

    ``port=0`` takes a free port; :attr:`url` is the ``endpoint_url`` for boto3.
    """

    def __init__(self, config: LocalRuntimeConfig, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config = config
        uvicorn_config = uvicorn.Config(
            create_local_runtime_app(config), host=host, port=port, log_level="warning", lifespan="on"
        )
        self._server = uvicorn.Server(uvicorn_config)
        self._thread = threading.Thread(target=self._server.run, name="sagemaker-local-runtime", daemon=True)

    def start(self, *, timeout_s: float = 15.0) -> LocalRuntime:
        """Start serving and wait until the port listens.

        Raises:
            RuntimeError: It did not start within ``timeout_s`` (e.g. the port is taken).
        """
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while self._thread.is_alive() and not self._server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        if not self._server.started:
            self.stop()
            raise RuntimeError(f"the local SageMaker runtime did not start on port {self._server.config.port}")
        return self

    @property
    def port(self) -> int:
        sockets = [s for server in self._server.servers for s in server.sockets]
        if not sockets:
            raise RuntimeError("the local SageMaker runtime is not listening")
        port: int = sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        return f"http://{self._server.config.host}:{self.port}"

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=15)

    def __enter__(self) -> LocalRuntime:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def how_to_use(config: LocalRuntimeConfig, *, host: str, port: int) -> str:
    """What ``speakwire sagemaker local`` prints: where it listens and how to point boto3 at it."""
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"
    names = f"endpoint {config.endpoint_name} only" if config.endpoint_name else "any endpoint name"
    name = config.endpoint_name or "local"
    return "\n".join(
        [
            f"SageMaker runtime on {url} ({names}) -> container {config.invocations_url}",
            "Point boto3 and speakwire at it (any credentials are accepted):",
            f"  export {ENDPOINT_URL_ENV}={url} AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local "
            f"AWS_DEFAULT_REGION={config.region}",
            f"  speakwire sagemaker invoke --endpoint-name {name} --text 'Hello.' --stream",
            f"  boto3.client('sagemaker-runtime', endpoint_url='{url}')  # or this, in code",
            "Not served: the bidirectional stream (its client needs HTTP/2 over TLS).",
        ]
    )


def serve_local_runtime(config: LocalRuntimeConfig, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> None:
    """Run the local runtime in the foreground until interrupted (the CLI's ``sagemaker local``)."""
    uvicorn.run(create_local_runtime_app(config), host=host, port=port, log_level="info", lifespan="on")
