"""``--aligner`` on a Piper server (issue 29): a named aligner's words replace Piper's own, ``none`` gives none,
and a name that cannot load stops ``serve`` with the reason.

Piper's own timings are exact (``test_word_timings``); PocketSphinx's, on the same audio, land near them and
cover the same words, which is what lets the two be compared.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from test_word_timings import TEXT, assert_covers, speak, sse_events

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.live_server import LiveServer, free_port, start_server

pytest.importorskip("pocketsphinx", reason="pip install 'speakwire[align]'")


@pytest.fixture(scope="module")
def pocketsphinx_server(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = start_server(Settings(aligner="pocketsphinx"), engine=piper_engine)
    yield live
    live.stop()


@pytest.fixture(scope="module")
def untimed_server(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = start_server(Settings(aligner="none"), engine=piper_engine)
    yield live
    live.stop()


async def test_a_named_aligner_replaces_pipers_own_word_timings(
    pocketsphinx_server: LiveServer, server: LiveServer
) -> None:
    aligned = await speak(pocketsphinx_server, [TEXT])
    exact = await speak(server, [TEXT])
    assert_covers(TEXT, aligned)
    assert [(w.text, w.char_start, w.char_end) for w in aligned.words] == [
        (w.text, w.char_start, w.char_end) for w in exact.words
    ]
    assert aligned.audio_ms == exact.audio_ms  # the same seeded audio, only the words differ
    starts = [(a.start_ms, e.start_ms) for a, e in zip(aligned.words, exact.words, strict=True)]
    assert any(a != e for a, e in starts)  # PocketSphinx's, not Piper's
    assert sum(abs(a - e) for a, e in starts) / len(starts) < 150  # yet on the same words of the same audio


def test_a_named_aligner_times_sse_words_too(pocketsphinx_server: LiveServer) -> None:
    body = {"input": TEXT, "response_format": "pcm", "stream_format": "sse", "word_timestamps": True, "seed": 1}
    events = sse_events(pocketsphinx_server, body)
    items = [item for e in events if e["type"] == "speech.audio.words" for item in e["words"]]  # type: ignore[attr-defined]
    assert [item["word"] for item in items] == TEXT.split()


def test_aligner_none_gives_no_words(untimed_server: LiveServer) -> None:
    body = {"input": TEXT, "response_format": "pcm", "stream_format": "sse", "word_timestamps": True, "seed": 1}
    types = [e["type"] for e in sse_events(untimed_server, body)]
    assert "speech.audio.delta" in types and "speech.audio.words" not in types


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-m", "speakwire", "serve", "--port", str(free_port()), *args]
    return subprocess.run(command, capture_output=True, timeout=120, check=False, env={**os.environ, **(env or {})})


def test_an_unknown_aligner_name_stops_serve_with_the_names_it_knows() -> None:
    flag = _serve("--aligner", "whisper")
    assert flag.returncode == 2 and b"unknown aligner 'whisper'" in flag.stderr and b"pocketsphinx" in flag.stderr
    variable = _serve(env={"SPEAKWIRE_ALIGNER": "whisper"})
    last = variable.stderr.decode().strip().splitlines()[-1]
    assert variable.returncode == 1
    assert last.startswith("speakwire: the aligner 'whisper' failed to load:") and "pocketsphinx" in last
