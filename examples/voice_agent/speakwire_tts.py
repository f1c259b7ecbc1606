"""speakwire as pipecat's ``ElevenLabsTTSService``, at a URL or on a SageMaker endpoint, with word timings.

pipecat adds a reply to the LLM context as its words are played when the TTS service gives word timestamps;
without them (``DeepgramSageMakerTTSService``) a sentence counts as said once its audio starts, so an
interrupted sentence stays whole in the context. speakwire serves ElevenLabs' ``multi-stream-input`` protocol
with a per-character ``alignment`` on each audio chunk, and pipecat's stock ``ElevenLabsTTSService`` turns
those into words timed against the audio it plays: on an interruption the context keeps only the words heard.

- At a URL (``--tts-url``, a speakwire server): the stock service with ``url=``, nothing else.
- On SageMaker: ``SpeakwireSageMakerTTSService`` is the same service whose WebSocket is a SageMaker
  bidirectional stream (pipecat's ``SageMakerBidiClient``) to the same container path
  (``v1/text-to-speech/{voice}/multi-stream-input`` as ``model_invocation_path``, its query as
  ``model_query_string``); each message is one UTF8 payload part each way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from pipecat.services.elevenlabs.tts import ElevenLabsTTSService
from websockets.protocol import State

LOCAL_API_KEY = "speakwire"
"""ElevenLabs' ``xi-api-key`` header: speakwire ignores it unless it was started with an API key."""


class BidiWebSocket:
    """The slice of a ``websockets`` connection pipecat's ElevenLabs service uses, over a SageMaker bidi stream."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._closing = False
        self.state = State.OPEN

    @classmethod
    async def open(cls, endpoint_name: str, region: str, url: str) -> BidiWebSocket:
        from pipecat.services.aws.sagemaker.bidi_client import SageMakerBidiClient

        parts = urlsplit(url)
        client = SageMakerBidiClient(
            endpoint_name=endpoint_name,
            region=region,
            model_invocation_path=parts.path.lstrip("/"),
            model_query_string=parts.query,
        )
        await client.start_session()
        return cls(client)

    async def send(self, message: str) -> None:
        if self.state is not State.OPEN:
            raise ConnectionError("the SageMaker stream is closed")
        await self._client.send_text(message)

    async def recv(self) -> str:
        """The container's next text frame (PARTIAL payload parts joined); ConnectionError once it ends."""
        from aws_sdk_sagemaker_runtime_http2.models import ResponseStreamEventPayloadPart

        data = b""
        while True:
            try:
                result = await self._client.receive_response() if self._client.is_active else None
            except Exception as exc:
                self._mark_closed()
                raise ConnectionError(f"SageMaker stream ended: {exc}") from exc
            if result is None:
                self._mark_closed()
                raise ConnectionError("SageMaker stream ended")
            if not isinstance(result, ResponseStreamEventPayloadPart):
                self._mark_closed()
                error = getattr(result, "value", result)
                raise ConnectionError(f"SageMaker stream error: {getattr(error, 'message', error)}")
            data += result.value.bytes_ or b""
            if result.value.completion_state != "PARTIAL" and data:
                return data.decode("utf-8")

    async def __aiter__(self) -> AsyncIterator[str]:
        while True:
            try:
                yield await self.recv()
            except ConnectionError:
                if self._closing:
                    return  # the end we asked for, as a websocket's iteration ends on a clean close
                raise  # pipecat reports it and reconnects, as for a dropped WebSocket

    async def wait_closed(self) -> None:
        """After ``close_socket``: nothing to wait for, ``close()`` follows and ends the stream.

        Reading the container's close instead would make pipecat's bidi client log it as an error.
        """
        self._closing = True

    async def close(self) -> None:
        self._closing = True
        self._mark_closed()
        await self._client.close_session()  # idempotent

    async def ping(self) -> None:
        """pipecat's connection check; the stream has no ping of its own."""
        if self.state is not State.OPEN:
            raise ConnectionError("the SageMaker stream is closed")

    def _mark_closed(self) -> None:
        self.state = State.CLOSED


class SpeakwireSageMakerTTSService(ElevenLabsTTSService):
    """pipecat's ``ElevenLabsTTSService`` on a SageMaker endpoint running speakwire (word timings included).

    Example::

        tts = SpeakwireSageMakerTTSService(endpoint_name="speakwire", region="us-east-1",
                                           settings=SpeakwireSageMakerTTSService.Settings(voice="alloy"))
    """

    def __init__(self, *, endpoint_name: str, region: str, **kwargs: Any) -> None:
        # The URL only carries the container path and query: the stream goes to SageMaker, not to this host.
        super().__init__(api_key=LOCAL_API_KEY, url="wss://sagemaker.invalid", **kwargs)
        self._endpoint_name = endpoint_name
        self._region = region

    async def _websocket_connect(self, uri: str, **kwargs: Any) -> Any:
        return await BidiWebSocket.open(self._endpoint_name, self._region, uri)
