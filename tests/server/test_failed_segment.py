"""Over a real server: a sentence whose engine fails part-way is reported, and its partial audio is marked.

A Piper wrapper yields the first chunk of a sentence that says "Broken", then raises. The speech stream
without ``stream_audio`` sends that sentence's partial file, then the ``synthesis_failed`` error naming the
utterance's request, then ``audio.done`` with ``partial_audio`` and ``action: discard``; the sentences
around it are spoken whole.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.asyncio.client import connect

from speakwire.engines.base import EngineInfo
from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.live_server import LiveServer, start_server


class BrokenSentences:
    """The Piper voice, except that a sentence saying "Broken" fails after its first chunk."""

    def __init__(self, engine: PiperEngine) -> None:
        self._engine = engine

    @property
    def info(self) -> EngineInfo:
        return self._engine.info

    def validate(self, request: Any) -> Any:
        return self._engine.validate(request)

    def prepare(self, request: Any) -> Any:
        return self._engine.prepare(request)

    def synthesize(self, text: str, *args: Any) -> Iterator[Any]:
        for index, chunk in enumerate(self._engine.synthesize(text, *args)):
            if index == 1 and "Broken" in text:
                raise RuntimeError("the engine broke mid-sentence")  # unexpected: logged, then reported
            yield chunk

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def server(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = start_server(Settings(), engine=BrokenSentences(piper_engine))  # type: ignore[arg-type]
    yield live
    live.stop()


async def test_a_failed_sentences_partial_file_comes_before_its_error_and_is_marked(
    server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    text = "This one is fine. Broken sentences are long enough to come in several chunks, surely. The end."
    items: list[Any] = []
    caplog.set_level(logging.ERROR, logger="speakwire.synthesis")
    async with connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "session.config", "response_format": "wav"}))
        await ws.send(json.dumps({"type": "input.text", "text": text}))
        await ws.send(json.dumps({"type": "input.done"}))
        while True:
            message = await ws.recv()
            items.append(message if isinstance(message, bytes) else json.loads(message))
            if isinstance(items[-1], dict) and items[-1]["type"] == "session.done":
                break
    kinds = ["bytes" if isinstance(i, bytes) else i["type"] for i in items]
    failed = next(i for i, item in enumerate(items) if isinstance(item, dict) and item["type"] == "error")
    assert kinds[failed - 1] == "bytes" and items[failed - 1][:4] == b"RIFF"  # the partial sentence, a whole WAV
    assert items[failed]["code"] == "synthesis_failed" and items[failed]["sentence_index"] == 1
    assert items[failed]["request_id"] == items[-1]["request_id"]
    done = items[failed + 1]
    assert done["type"] == "audio.done" and done["error"] is True
    assert done["partial_audio"] is True and done["action"] == "discard"
    assert done["total_bytes"] == len(items[failed - 1])
    assert kinds.count("audio.done") == 3 and kinds.count("bytes") == 3
    # The engine's failure is logged on a worker thread, under the utterance's request id all the same.
    failures = [r for r in caplog.records if r.name == "speakwire.synthesis.segment_driver"]
    assert [getattr(r, "request_id", None) for r in failures] == [items[-1]["request_id"]]
