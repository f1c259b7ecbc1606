"""``StreamTransport`` over SageMaker's ``InvokeEndpointWithBidirectionalStream``.

boto3 has no such operation; AWS ships it only in ``aws-sdk-sagemaker-runtime-http2``,
which needs Python ≥ 3.12. It is pinned to 0.9.0, the newest that pipecat's SageMaker services accept
(``pipecat-ai[sagemaker]``: >=0.6,<0.10), so both install into one environment; the AWS sample's client, written
for 0.4.0, runs unchanged on 0.9.0's models (tests/deploy/test_aws_sample_client.py), and 0.12 renamed the client and
replaced ``Config``. The SDK is imported
only when a transport is made, so the rest of speakwire runs on 3.11 without it.

Credentials: the sample copies boto3's frozen credentials into ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN`` because its resolver reads only the
environment. Here the same frozen credentials go into the client ``Config`` with the
SDK's ``StaticCredentialsResolver`` (in smithy-aws-core since 0.4), which
signs identically without changing the process environment for every thread and child
process. Either way they are a snapshot: a stream outliving temporary credentials
needs a new transport.

Two SDK behaviours shape the code: a failure before the response (bad credentials, for
one) can leave ``await_output()`` waiting forever, so connecting has a deadline; and
the receiver *raises* ``ModelStreamError`` / ``InternalStreamFailure`` (how a container's
WebSocket Close reaches the client) rather than returning them as events — both paths
become :class:`~speakwire.client.transport.TransportClosed` with the service's message.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from speakwire.client.transport import TransportClosed
from speakwire.deploy.sagemaker.bidi_frames import COMPLETE, BidiFrameAssembler, BidiFrameError, payload_for
from speakwire.errors import MissingExtraError

SDK_VERSION = "0.9.0"
DEFAULT_MODEL_INVOCATION_PATH = "v1/audio/speech/stream"
BIDI_PORT = 8443
DEFAULT_CONNECT_TIMEOUT_S = 60.0
ENDPOINT_URL_ENV = "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME"  # boto3's variable for the runtime endpoint
# X-Amzn-SageMaker-Model-Invocation-Path: relative, slash-separated, no leading slash.
_INVOCATION_PATH = re.compile(r"[A-Za-z0-9\-._]+(?:/[A-Za-z0-9\-._]+)*")


class BidiClientUnavailableError(MissingExtraError):
    """The bidirectional-stream SDK cannot be used here (wrong Python, or not installed)."""

    def __init__(self, detail: str) -> None:
        ImportError.__init__(
            self,
            f"the SageMaker bidirectional-stream client {detail}: it needs Python >= 3.12 and "
            'pip install "speakwire[sagemaker-bidi]" (aws-sdk-sagemaker-runtime-http2=='
            f"{SDK_VERSION})",
        )


@dataclass(frozen=True, slots=True)
class AwsCredentials:
    """A frozen credential snapshot for signing the stream."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)


def runtime_endpoint_uri(region: str) -> str:
    """The HTTP/2 runtime endpoint; bidirectional streams use port 8443, not 443."""
    return f"https://runtime.sagemaker.{region}.amazonaws.com:{BIDI_PORT}"


def bidi_endpoint_override(endpoint_url: str | None, environ: Mapping[str, str]) -> str | None:
    """The endpoint to open the stream on: ``endpoint_url``, else ``$AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME``, else
    None (the regional one on port 8443).

    Raises:
        ValueError: A plain ``http://`` URL (such as ``speakwire sagemaker local``): the SDK's CRT client
            speaks HTTP/2 only over TLS (no cleartext HTTP/2), and over HTTP/1.1 it sends no request
            events, so the stream could only hang.
    """
    url = endpoint_url or environ.get(ENDPOINT_URL_ENV) or None
    if url is not None and not url.lower().startswith("https://"):
        source = "--endpoint-url" if endpoint_url else ENDPOINT_URL_ENV
        raise ValueError(
            f"{source} is {url}: the bidirectional stream needs an https:// (HTTP/2 over TLS) endpoint; "
            "the local SageMaker runtime serves InvokeEndpoint and InvokeEndpointWithResponseStream only "
            "(try speakwire sagemaker invoke --stream against it)"
        )
    return url


def normalize_invocation_path(path: str) -> str:
    """Strip a leading slash (SageMaker rejects one) and validate the header's pattern."""
    stripped = path.lstrip("/")
    if not _INVOCATION_PATH.fullmatch(stripped):
        raise ValueError(f"invalid model invocation path {path!r}: use e.g. {DEFAULT_MODEL_INVOCATION_PATH}")
    return stripped


def _python_version() -> tuple[int, int]:
    return sys.version_info.major, sys.version_info.minor


@functools.cache
def load_bidi_sdk() -> Any:
    """Import the SDK classes this module uses, or explain how to get them.

    Raises:
        BidiClientUnavailableError: Python < 3.12, or the package is not installed.
    """
    major, minor = _python_version()
    if (major, minor) < (3, 12):
        raise BidiClientUnavailableError(f"cannot run on Python {major}.{minor}")
    try:
        from aws_sdk_sagemaker_runtime_http2 import models
        from aws_sdk_sagemaker_runtime_http2.client import SageMakerRuntimeHTTP2Client
        from aws_sdk_sagemaker_runtime_http2.config import Config
        from smithy_aws_core.auth.sigv4 import SigV4AuthScheme
        from smithy_aws_core.identity import StaticCredentialsResolver
    except ImportError as exc:
        raise BidiClientUnavailableError(f"is not installed ({exc})") from exc
    return SimpleNamespace(
        Client=SageMakerRuntimeHTTP2Client,
        Config=Config,
        SigV4AuthScheme=SigV4AuthScheme,
        StaticCredentialsResolver=StaticCredentialsResolver,
        Input=models.InvokeEndpointWithBidirectionalStreamInput,
        RequestPayloadPart=models.RequestPayloadPart,
        RequestPayloadPartEvent=models.RequestStreamEventPayloadPart,
        PayloadPartEvent=models.ResponseStreamEventPayloadPart,
        ModelStreamErrorEvent=models.ResponseStreamEventModelStreamError,
        InternalStreamFailureEvent=models.ResponseStreamEventInternalStreamFailure,
    )


def credentials_from_boto3(session: Any = None) -> AwsCredentials:
    """Snapshot boto3's resolved credentials (env, profile, SSO, instance role...).

    Raises:
        MissingExtraError: boto3 is not installed.
        RuntimeError: boto3 found no credentials.
    """
    if session is None:
        try:
            import boto3
        except ImportError as exc:
            raise MissingExtraError("sagemaker", "boto3") from exc
        session = boto3.Session()
    credentials = session.get_credentials()
    if credentials is None:
        raise RuntimeError("no AWS credentials found (environment, ~/.aws config, SSO or instance role)")
    frozen = credentials.get_frozen_credentials()
    return AwsCredentials(frozen.access_key, frozen.secret_key, frozen.token)


def build_client(region: str, credentials: AwsCredentials, *, endpoint_uri: str | None = None) -> Any:
    """A ``SageMakerRuntimeHTTP2Client`` signing with SigV4 (service ``sagemaker``) and ``credentials``."""
    sdk = load_bidi_sdk()
    config = sdk.Config(
        endpoint_uri=endpoint_uri or runtime_endpoint_uri(region),
        region=region,
        aws_access_key_id=credentials.access_key_id,
        aws_secret_access_key=credentials.secret_access_key,
        aws_session_token=credentials.session_token,
        aws_credentials_identity_resolver=sdk.StaticCredentialsResolver(),
    )
    config.set_auth_scheme(sdk.SigV4AuthScheme(service="sagemaker"))
    return sdk.Client(config=config)


class SageMakerBidiTransport:
    """One bidirectional stream to a SageMaker endpoint, seen as text and binary messages.

    Make one with :meth:`connect`; the constructor takes the SDK's input publisher and
    output receiver, so tests can hand it real SDK streams over a local pipe.
    """

    def __init__(self, input_stream: Any, receiver: Any, *, invoked_variant: str | None = None) -> None:
        self._sdk = load_bidi_sdk()
        self._input = input_stream
        self._receiver = receiver
        self._assembler = BidiFrameAssembler()
        self._closed_reason: str | None = None
        self._released = False
        self.invoked_variant = invoked_variant

    @classmethod
    async def connect(
        cls,
        endpoint_name: str,
        *,
        region: str,
        model_invocation_path: str = DEFAULT_MODEL_INVOCATION_PATH,
        model_query_string: str | None = None,
        target_variant: str | None = None,
        credentials: AwsCredentials | None = None,
        endpoint_uri: str | None = None,
        timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    ) -> SageMakerBidiTransport:
        """Open a stream to ``endpoint_name``.

        Args:
            endpoint_name: The endpoint.
            region: Its region.
            model_invocation_path: Container WebSocket path, leading slash optional. The
                vLLM-Omni DLC only accepts its route paths (it closes the default one with
                1008); speakwire accepts both.
            model_query_string: Query string appended to that path, without ``?``.
            target_variant: Production variant to reach, if not the default routing.
            credentials: Signing credentials; default boto3's, snapshotted now.
            endpoint_uri: Override the runtime endpoint (tests, VPC endpoints).
            timeout_s: Deadline for the stream to open.

        Raises:
            BidiClientUnavailableError: The SDK cannot be used here.
            TransportClosed: The stream did not open in time or the service refused it.
        """
        sdk = load_bidi_sdk()
        path = normalize_invocation_path(model_invocation_path)
        if credentials is None:
            credentials = await asyncio.to_thread(credentials_from_boto3)  # may call STS/SSO
        client = build_client(region, credentials, endpoint_uri=endpoint_uri)
        request = sdk.Input(
            endpoint_name=endpoint_name,
            model_invocation_path=path,
            model_query_string=model_query_string,
            target_variant=target_variant,
        )
        stream: Any = None
        try:
            async with asyncio.timeout(timeout_s):
                stream = await client.invoke_endpoint_with_bidirectional_stream(input=request)
                output, receiver = await stream.await_output()
        except TimeoutError as exc:
            await _close_quietly(stream)
            raise TransportClosed(reason=f"stream to {endpoint_name} did not open within {timeout_s:g} s") from exc
        except Exception as exc:
            await _close_quietly(stream)
            raise TransportClosed(reason=f"{type(exc).__name__}: {_message(exc)}") from exc
        return cls(stream.input_stream, receiver, invoked_variant=getattr(output, "invoked_production_variant", None))

    async def send_text(self, message: str) -> None:
        await self._send(message)

    async def send_bytes(self, data: bytes) -> None:
        await self._send(data)

    async def receive(self) -> str | bytes:
        """Next whole message; raises ``TransportClosed`` at the end of the stream or on a stream error."""
        while True:
            if self._closed_reason is not None:
                raise TransportClosed(reason=self._closed_reason)
            try:
                event = await self._receiver.receive()
            except Exception as exc:  # ModelStreamError / InternalStreamFailure / OSError are raised
                raise self._closed_by(exc) from exc
            if event is None:
                self._closed_reason = "stream ended"
                raise TransportClosed(reason=self._closed_reason)
            if isinstance(event, self._sdk.PayloadPartEvent):
                part = event.value
                try:
                    message = self._assembler.feed(
                        part.bytes_, data_type=part.data_type, completion_state=part.completion_state
                    )
                except BidiFrameError as exc:
                    self._closed_reason = f"malformed payload part: {exc}"
                    raise TransportClosed(reason=self._closed_reason) from exc
                if message is not None:
                    return message
            elif isinstance(event, (self._sdk.ModelStreamErrorEvent, self._sdk.InternalStreamFailureEvent)):
                raise self._closed_by(event.value)
            # Anything else is an event type newer than this SDK version: skip it.

    async def aclose(self) -> None:
        """Close both directions; safe to call twice."""
        if self._released:
            return
        self._released = True
        self._closed_reason = self._closed_reason or "closed by client"
        for stream in (self._input, self._receiver):
            with contextlib.suppress(Exception):  # already broken: nothing more to release
                await stream.close()

    async def _send(self, message: str | bytes) -> None:
        if self._closed_reason is not None:
            raise TransportClosed(reason=self._closed_reason)
        data, data_type = payload_for(message)
        part = self._sdk.RequestPayloadPart(bytes_=data, data_type=data_type, completion_state=COMPLETE)
        try:
            await self._input.send(self._sdk.RequestPayloadPartEvent(value=part))
        except Exception as exc:
            raise self._closed_by(exc) from exc

    def _closed_by(self, exc: BaseException) -> TransportClosed:
        error_code = getattr(exc, "error_code", None)
        code = int(error_code) if isinstance(error_code, str) and error_code.isdigit() else None
        reason = f"{type(exc).__name__}: {_message(exc)}"
        if error_code and code is None:
            reason += f" [{error_code}]"
        self._closed_reason = reason
        return TransportClosed(code, reason)


def _message(exc: BaseException) -> str:
    return str(getattr(exc, "message", "") or exc)


CLOSE_UNOPENED_TIMEOUT_S = 1.0
"""How long closing a stream that never opened may take: from SDK 0.6 on, closing the input of a stream whose
connection was refused waits forever, so connecting would never report the refusal."""


async def _close_quietly(stream: Any) -> None:
    if stream is None:
        return
    # The stream never opened properly; nothing to release.
    with contextlib.suppress(Exception, TimeoutError):
        async with asyncio.timeout(CLOSE_UNOPENED_TIMEOUT_S):
            await stream.input_stream.close()
