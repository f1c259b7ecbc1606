"""Stateful fuzzing of every WebSocket dialect (and Wyoming's TCP) against a real server with the Piper voice.

Each dialect is a hypothesis state machine over its message set, valid and invalid: configurations, text,
flushes, cancels and context closes in any order, bad JSON, binary where text is expected, oversized frames,
random pauses, and clients that close or drop the connection at any point. Every run must end with only the
protocol's own errors and close codes (never 1011, never an ERROR line or traceback in the server's log), and the
server must then be back to its idle counts: sessions, admitted streams, engine work, asyncio tasks, threads and
file descriptors (``support.dialect_fuzz``).

Budget: ``FUZZ_EXAMPLES`` runs of up to ``FUZZ_STEPS`` steps per dialect (``SPEAKWIRE_FUZZ_EXAMPLES`` /
``SPEAKWIRE_FUZZ_STEPS`` raise them; about 2 minutes on a loaded 2-core machine as set). The seed is fixed (the
same sequences every run) and printed with a failure (the captured stdout); ``SPEAKWIRE_FUZZ_SEED=<seed>`` replays
one, the server's timing aside, and ``SPEAKWIRE_FUZZ_SEED=random`` draws a new one. Hypothesis prints the failing
steps as code too; it does not shrink them (minutes against a server).

``test_named_sequences_...`` runs the sequences the issue names every time, with the answers each protocol owes.

Two more servers, each with its own runs (``SPEAKWIRE_FUZZ_KEYED_EXAMPLES``/``_STEPS`` and
``SPEAKWIRE_FUZZ_DRAIN_EXAMPLES``/``_STEPS`` set their budgets; together about 20 s on an idle 2-core machine, about
a minute on a loaded one):

* with an API key (``Keyed``): every WebSocket dialect's clients offer the key the ways its SDKs do (a header, a
  query parameter, Deepgram's subprotocol, a field of the first message), and a rule connects aside with a wrong
  or missing key, which must get only that dialect's refusal (HTTP 401, or its error and 1008);
* draining (``Draining``): SIGTERM's drain begins at some step with connections open (at the end at the latest),
  and every connection must end the protocol's way (1001 after the dialect's notice, 1013 for one opened after),
  with the same checks of the log and the idle counts.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import json
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, cast

import pytest
from hypothesis import HealthCheck, Phase, note, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test
from wyoming.event import async_read_event

from speakwire.engines.piper import PiperEngine
from speakwire.server.drain import DrainEnd, drain
from speakwire.settings import Settings
from support.dialect_fuzz import ClientLoop, ServerLog, WatchedServer, WsClient, WsRecord, close_problems
from support.live_server import free_port, start_server

FUZZ_EXAMPLES = int(os.environ.get("SPEAKWIRE_FUZZ_EXAMPLES", "5"))
FUZZ_STEPS = int(os.environ.get("SPEAKWIRE_FUZZ_STEPS", "10"))
_SEED = os.environ.get("SPEAKWIRE_FUZZ_SEED", "")
FUZZ_SEED = random.randrange(2**32) if _SEED == "random" else int(_SEED or 20261204)
"""Fixed by default, so CI runs the same sequences every time (a failure is the change's, not the draw's);
``SPEAKWIRE_FUZZ_SEED=random`` explores new ones, a number replays one (printed on failure)."""
MAX_STREAMS = 3
"""Low, so contexts and utterances of one run also meet admission's refusal (1013 / the dialect's busy error)."""

STATS: Counter[str] = Counter()
"""Runs, connections and messages sent per dialect (printed at the end of the module, ``-s`` to see them)."""


@pytest.fixture(scope="module")
def watched(piper_engine: PiperEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WatchedServer]:
    with _serve(tmp_path_factory, piper_engine, DialectMachine, SpeechStream, wyoming_port=free_port()) as server:
        yield server


@pytest.fixture(scope="module", autouse=True)
def _stats() -> Iterator[None]:
    yield
    print(f"\nfuzz seed {FUZZ_SEED}: " + ", ".join(f"{k} {v}" for k, v in sorted(STATS.items())))


@contextlib.contextmanager
def _serve(
    tmp_path_factory: pytest.TempPathFactory,
    engine: PiperEngine,
    machines: type[DialectMachine],
    warm_up: type[SpeechStream],
    **settings: Any,
) -> Iterator[WatchedServer]:
    """A server for ``machines`` (and their subclasses), warmed up with ``warm_up`` and its idle counts taken: the
    fuzzers' ``MAX_STREAMS``, a voice library of its own, and ``settings``.

    Servers of one module live together in this process (a module fixture ends with the module), so each takes its
    idle counts of threads and descriptors with the earlier ones there, idle."""
    data_dir = tmp_path_factory.mktemp("fuzz-voices")
    with ServerLog() as log:
        live = start_server(Settings(max_streams=MAX_STREAMS, data_dir=str(data_dir), **settings), engine=engine)
        server = WatchedServer(live, log)
        client_loop = ClientLoop()
        machines.server, machines.client_loop = server, client_loop
        try:
            _warm_up(server, warm_up)
            yield server
        finally:
            client_loop.close()
            live.stop()


def _warm_up(server: WatchedServer, stream: type[SpeechStream]) -> None:
    """One utterance per output path, so lazily made threads and caches exist before the idle counts are taken."""
    machine = stream()
    for config in ({"response_format": "pcm", "stream_audio": True}, {"response_format": "mp3"}):
        machine.config(config)
        machine.text("Warm up.")
        machine.done()
        machine.wait_for_audio()
    machine.close_all(1000)
    server.settle_until_quiet()
    server.mark_idle()


def run_machine(machine: type[DialectMachine], examples: int = FUZZ_EXAMPLES, steps: int = FUZZ_STEPS) -> None:
    print(f"fuzz seed {FUZZ_SEED} (replay: SPEAKWIRE_FUZZ_SEED={FUZZ_SEED})")
    factory = seed(FUZZ_SEED)(lambda: machine())
    run_state_machine_as_test(
        factory,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            database=None,
            print_blob=True,
            phases=[Phase.generate],  # no shrinking: against a real server it takes minutes; the steps print whole
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


# ----- what clients send ----------------------------------------------------------------------

WORDS = [
    "Hello.", "Hello there, friend. ", "How are you today? ", "It costs $29.99 today.", "one", " ", "",
    "Ünïcödé — façade, naïve. ", "\ud800 a lone surrogate. ", "emoji 🎉 party. ", "<speak>SSML?</speak> ",
    "\x00\x07 control characters.\n", "ALL CAPS!!! ", "3.14159 and 1,000,000. ", "a" * 300,
    "This sentence is long enough that its audio keeps coming while the client does other things. " * 3,
]  # fmt: skip
TEXTS = st.one_of(st.sampled_from(WORDS), st.text(max_size=24))
PAUSES = st.sampled_from([0.0, 0.0, 0.01, 0.05, 0.2, 0.5])
DEEP_JSON = "[" * 5000 + "]" * 5000
GARBAGE: st.SearchStrategy[str | bytes] = st.one_of(
    st.sampled_from(
        [
            "{not json",
            "",
            "[]",
            "null",
            "42",
            '"text"',
            "NaN",
            "{}",
            '{"type": null}',
            DEEP_JSON,
            '{"a": ' * 3000 + "1" + "}" * 3000,
        ]
    ),
    st.binary(max_size=64),
    st.text(max_size=40),
)
"""Frames no dialect accepts as a message: bad JSON, JSON that is not an object, nesting deeper than a parser's
recursion, binary frames, random text (no lone surrogate: a text frame must be UTF-8, so no client can send one)."""
OVERSIZED = 128 * 1024 + 1
"""One byte over every dialect's text message limit (``server.limits.MAX_TEXT_MESSAGE_BYTES``)."""


def dumps(message: dict[str, Any]) -> str:
    return json.dumps(message)  # ASCII, so a lone surrogate travels as \\ud800 (valid JSON, odd text)


# ----- the machine every dialect shares ---------------------------------------------------------


class DialectMachine(RuleBasedStateMachine):
    """Connections to one dialect, opened as steps need them; the checks every run ends with (``teardown``)."""

    server: ClassVar[WatchedServer]
    client_loop: ClassVar[ClientLoop]
    name: ClassVar[str]
    path: ClassVar[str]
    closes: ClassVar[frozenset[int]]
    """The close codes this protocol's server sends (1011 is never allowed)."""

    def __init__(self) -> None:
        super().__init__()
        self.query = ""
        self.clients: list[WsClient] = []
        self.current: WsClient | None = None
        STATS[f"{self.name} runs"] += 1

    # ----- plumbing ----------------------------------------------------------------------------

    def run(self, coroutine: Any, timeout: float = 60) -> Any:
        return self.client_loop.run(coroutine, timeout)

    def url(self) -> str:
        return f"ws://127.0.0.1:{self.server.live.settings.port}{self.path}{self.query}"

    def new_client(self) -> WsClient:
        """A client of this dialect, not yet connected."""
        return WsClient(self.url())

    def connection(self) -> WsClient:
        """The open connection, or a new one (the first step's, or after a close by either side)."""
        if self.current is None or not self.current.open:
            client = self.new_client()
            self.clients.append(client)
            self.run(client.connect())
            STATS[f"{self.name} connections"] += 1
            self.current = client
            self.opened(client)
        return self.current

    def opened(self, client: WsClient) -> None:
        """What a dialect sends first on a new connection (default: nothing)."""

    def send(self, *frames: str | bytes) -> None:
        client = self.connection()
        for frame in frames:
            self.run(client.send(frame))
            STATS[f"{self.name} messages"] += 1

    def close_all(self, code: int | None) -> None:
        async def close() -> None:
            await asyncio.gather(*(client.close(code) for client in self.clients))

        self.run(close(), timeout=120)

    # ----- steps every dialect has ---------------------------------------------------------------

    @rule(seconds=PAUSES)
    def pause(self, seconds: float) -> None:
        time.sleep(seconds)

    @rule(frame=GARBAGE)
    def garbage(self, frame: str | bytes) -> None:
        self.send(frame)

    @rule()
    def oversized(self) -> None:
        self.send(self.oversized_frame())

    def oversized_frame(self) -> str:
        return dumps({"text": "a" * OVERSIZED})

    @rule(code=st.sampled_from([1000, 1001, 4000, None]))
    def client_close(self, code: int | None) -> None:
        """The client leaves: a close frame, or (None) the TCP connection dropped."""
        if self.current is not None:
            self.run(self.current.close(code))
            self.current = None

    @rule()
    def wait_for_audio(self) -> None:
        """Until audio arrives (at most a few seconds): makes a cancel or close that follows race the audio."""
        if self.current is not None and self.current.open:
            self.run(self.current.wait_for(self.is_audio, 1.5))

    def is_audio(self, message: str | bytes) -> bool:
        return isinstance(message, bytes)

    # ----- the checks ----------------------------------------------------------------------------

    def teardown(self) -> None:
        problems = self.finish()
        problems += self.server.settle()
        problems += self.server.log.take()
        assert not problems, f"fuzz seed {FUZZ_SEED}:\n" + "\n".join(problems)

    def finish(self) -> list[str]:
        """End every connection; what the server sent or closed them with that its protocol does not."""
        self.close_all(1000)
        problems: list[str] = []
        for client in self.clients:
            problems += close_problems(client.record, self.closes)
            problems += [f"{client.record.url}: {p}" for p in self.message_problems(client.record)]
        return problems

    def message_problems(self, record: WsRecord) -> list[str]:
        """What the server sent that its protocol does not (per dialect)."""
        return []


def json_messages(record: WsRecord) -> Iterator[Any]:
    for message in record.received:
        if isinstance(message, str):
            try:
                yield json.loads(message)
            except json.JSONDecodeError:
                yield {"type": "(not JSON)", "text": message[:200]}


def typed_problems(record: WsRecord, types: set[str], *, forbidden_codes: frozenset[str] = frozenset()) -> list[str]:
    """Text frames that are not JSON objects of one of ``types``, or errors with a forbidden ``code``."""
    problems = []
    for message in json_messages(record):
        kind = message.get("type") if isinstance(message, dict) else None
        if kind not in types:
            problems.append(f"unexpected message {str(message)[:200]}")
        elif kind == "error" and message.get("code") in forbidden_codes:
            problems.append(f"error {str(message)[:300]}")
    return problems


# ----- vLLM-Omni's speech stream -----------------------------------------------------------------

STREAM_TYPES = {"audio.start", "audio.chunk", "audio.done", "session.done", "input.cancelled", "error", "warning",
                "voice.added", "voice.listed"}  # fmt: skip
STREAM_CONFIGS = st.sampled_from([
    {"response_format": "pcm", "stream_audio": True},
    {"response_format": "pcm", "stream_audio": True, "word_timestamps": True},
    {"response_format": "wav"},
    {"response_format": "mp3", "timestamp_type": "word"},
    {"response_format": "pcm", "stream_audio": True, "close_after_done": True, "split_granularity": "clause"},
    {"voice": "alloy", "speed": 1.5, "sample_rate": 16000, "response_format": "pcm", "temperature": 0.7},
    {"response_format": "wav", "stream_audio": True},  # invalid: 1008
    {"voice": "nobody-at-all"},  # invalid: 1008
    {"speed": "fast"},  # invalid: 1008
    {"split_granularity": "word"},  # invalid: 1008
    {"timestamp_transport_strategy": "async"},  # invalid: 1008
    {"speed": float("nan")},  # NaN in JSON: invalid, 1008
])  # fmt: skip


class SpeechStream(DialectMachine):
    name = "vllm-omni"
    path = "/v1/audio/speech/stream"
    closes = frozenset({1000, 1008, 1009, 1013})

    @rule(config=STREAM_CONFIGS)
    def config(self, config: dict[str, Any]) -> None:
        self.send(dumps({"type": "session.config", **config}))

    @rule(text=TEXTS)
    def text(self, text: str) -> None:
        self.send(dumps({"type": "input.text", "text": text}))

    @rule()
    def done(self) -> None:
        self.send(dumps({"type": "input.done"}))

    @rule(kind=st.sampled_from(["input.cancel", "response.cancel"]))
    def cancel(self, kind: str) -> None:
        self.send(dumps({"type": kind}))

    @rule()
    def session_close(self) -> None:
        self.send(dumps({"type": "session.close"}))

    @rule(message=st.sampled_from([
        {"type": "voice.list"},
        {"type": "voice.add", "name": "fuzz", "consent": True, "audio_data": "not base64!"},
        {"type": "voice.add", "name": "fuzz", "audio_data": base64.b64encode(b"RIFF....WAVE").decode()},
        {"type": "voice.add", "name": "fuzz", "consent": True, "audio_data": base64.b64encode(b"\0" * 64).decode(),
         "audio_format": "wav"},
        {"type": "input.text", "text": 42},
        {"type": "input.text"},
        {"type": ["input.text"]},
        {"type": "session.config", "response_format": 7},
        {"type": "dance"},
    ]))  # fmt: skip
    def odd_message(self, message: dict[str, Any]) -> None:
        self.send(dumps(message))

    def oversized_frame(self) -> str:
        return dumps({"type": "input.text", "text": "a" * OVERSIZED})

    def message_problems(self, record: WsRecord) -> list[str]:
        return typed_problems(record, STREAM_TYPES, forbidden_codes=frozenset({"synthesis_failed"}))


# ----- ElevenLabs stream-input and multi-stream-input --------------------------------------------

ELEVENLABS_QUERIES = st.sampled_from([
    "?output_format=pcm_24000", "?output_format=mp3_44100_128", "?output_format=ulaw_8000&sync_alignment=true",
    "?output_format=pcm_16000&inactivity_timeout=180", "?output_format=opus_48000_64",
    "?output_format=wav_1", "?inactivity_timeout=0",  # invalid: 1008
])  # fmt: skip
VOICE_SETTINGS = st.sampled_from([None, {"speed": 1.1}, {"speed": 9}, {"stability": 0.5}, "fast"])


def elevenlabs_problems(record: WsRecord) -> list[str]:
    problems = []
    for message in json_messages(record):
        known = isinstance(message, dict) and (
            "audio" in message or message.get("isFinal") is True or {"message", "error", "code"} <= set(message)
        )
        if not known or message.get("error") in ("internal_error", "synthesis_failed"):
            problems.append(f"unexpected message {str(message)[:300]}")
    return problems


class ElevenLabsStreamInput(DialectMachine):
    name = "elevenlabs stream-input"
    path = "/v1/text-to-speech/21m00Tcm4TlvDq8ikWAM/stream-input"
    closes = frozenset({1000, 1008, 1009, 1013})

    @initialize(query=ELEVENLABS_QUERIES)
    def choose_query(self, query: str) -> None:
        self.query = query

    def is_audio(self, message: str | bytes) -> bool:
        return isinstance(message, str) and '"audio"' in message

    @rule(text=TEXTS, voice_settings=VOICE_SETTINGS, flush=st.sampled_from([None, True, False, "yes"]))
    def text(self, text: str, voice_settings: Any, flush: Any) -> None:
        message: dict[str, Any] = {"text": text}
        if voice_settings is not None:
            message["voice_settings"] = voice_settings
        if flush is not None:
            message["flush"] = flush
        self.send(dumps(message))

    @rule()
    def flush(self) -> None:
        self.send(dumps({"flush": True}))

    @rule()
    def end_of_input(self) -> None:
        self.send(dumps({"text": ""}))

    @rule(message=st.sampled_from([
        {"text": "Hi ", "try_trigger_generation": True, "generation_config": {"chunk_length_schedule": [50, 90]}},
        {"text": "Hi ", "generation_config": {"chunk_length_schedule": "soon"}},
        {"text": 5}, {"xi_api_key": "whatever", "text": " "}, {"close_socket": True},
    ]))  # fmt: skip
    def odd_message(self, message: dict[str, Any]) -> None:
        self.send(dumps(message))

    def message_problems(self, record: WsRecord) -> list[str]:
        return elevenlabs_problems(record)


CONTEXT_IDS = st.sampled_from(["a", "b", "c", None, 7])


class ElevenLabsMultiStreamInput(ElevenLabsStreamInput):
    name = "elevenlabs multi-stream-input"
    path = "/v1/text-to-speech/21m00Tcm4TlvDq8ikWAM/multi-stream-input"

    @rule(context=CONTEXT_IDS, text=TEXTS, flush=st.booleans())
    def context_text(self, context: Any, text: str, flush: bool) -> None:
        self.send(dumps({"text": text, "context_id": context, "flush": flush}))

    @rule(context=CONTEXT_IDS)
    def context_flush(self, context: Any) -> None:
        self.send(dumps({"context_id": context, "flush": True}))

    @rule(context=CONTEXT_IDS)
    def close_context(self, context: Any) -> None:
        self.send(dumps({"context_id": context, "close_context": True}))

    @rule()
    def close_socket(self) -> None:
        self.send(dumps({"close_socket": True}))

    def message_problems(self, record: WsRecord) -> list[str]:
        return elevenlabs_problems(record)


# ----- Cartesia ---------------------------------------------------------------------------------

CARTESIA_TYPES = {"chunk", "timestamps", "flush_done", "done", "error"}
CARTESIA_FORMATS = st.sampled_from([
    {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000},
    {"container": "raw", "encoding": "pcm_f32le", "sample_rate": 44100},
    {"container": "raw", "encoding": "pcm_mulaw", "sample_rate": 8000},
    {"container": "wav", "encoding": "pcm_s16le", "sample_rate": 16000},  # invalid on the WebSocket
    {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 12345},  # invalid
    "pcm",  # invalid
])  # fmt: skip
CARTESIA_VOICES = st.sampled_from([
    {"mode": "id", "id": "a0e99841-438c-4a64-b679-ae501e7d6091"}, "alloy", {"mode": "embedding", "embedding": [0.1]},
    {"mode": "id", "id": "nobody"},
])  # fmt: skip
CARTESIA_CONTEXTS = st.sampled_from(["a", "b", "c", None, "", 3])


class Cartesia(DialectMachine):
    name = "cartesia"
    path = "/tts/websocket?cartesia_version=2026-08-14"
    closes = frozenset({1000, 1013})

    def is_audio(self, message: str | bytes) -> bool:
        return isinstance(message, str) and '"chunk"' in message

    @rule(context=CARTESIA_CONTEXTS, transcript=TEXTS, continue_=st.sampled_from([True, True, False, None]),
          flush=st.sampled_from([None, True, False]), output_format=CARTESIA_FORMATS, voice=CARTESIA_VOICES,
          timestamps=st.booleans())  # fmt: skip
    def generate(
        self, context: Any, transcript: str, continue_: Any, flush: Any, output_format: Any, voice: Any,
        timestamps: bool,
    ) -> None:  # fmt: skip
        message = {"context_id": context, "model_id": "sonic-3", "transcript": transcript, "voice": voice,
                   "output_format": output_format, "add_timestamps": timestamps, "language": "en"}  # fmt: skip
        if continue_ is not None:
            message["continue"] = continue_
        if flush is not None:
            message["flush"] = flush
        self.send(dumps(message))

    @rule(context=CARTESIA_CONTEXTS)
    def cancel(self, context: Any) -> None:
        self.send(dumps({"context_id": context, "cancel": True}))

    @rule(message=st.sampled_from([
        {"context_id": "a", "transcript": 5}, {"cancel": True}, {"context_id": "a", "transcript": "x", "continue": 1},
        {"context_id": "b", "transcript": "Hi.", "max_buffer_delay_ms": 99999, "voice": "alloy",
         "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}},
    ]))  # fmt: skip
    def odd_message(self, message: dict[str, Any]) -> None:
        self.send(dumps(message))

    def message_problems(self, record: WsRecord) -> list[str]:
        problems = typed_problems(record, CARTESIA_TYPES)
        problems += [f"internal error {m}" for m in json_messages(record)
                     if isinstance(m, dict) and m.get("error_code") == "internal_error"]  # fmt: skip
        return problems


# ----- Deepgram ------------------------------------------------------------------------------------

DEEPGRAM_TYPES = {"Metadata", "Flushed", "Cleared", "Warning"}


class Deepgram(DialectMachine):
    name = "deepgram"
    path = "/v1/speak"
    closes = frozenset({1000, 1009, 1013})

    @initialize(query=st.sampled_from(["?encoding=linear16&sample_rate=24000", "?encoding=mulaw&sample_rate=8000",
                                       "?model=aura-2-thalia-en&encoding=alaw", ""]))  # fmt: skip
    def choose_query(self, query: str) -> None:
        self.query = query

    @rule(text=TEXTS)
    def speak(self, text: str) -> None:
        self.send(dumps({"type": "Speak", "text": text}))

    @rule(kind=st.sampled_from(["Flush", "Clear", "Close", "KeepAlive", "Dance"]))
    def control(self, kind: str) -> None:
        self.send(dumps({"type": kind}))

    @rule(message=st.sampled_from([{"type": "Speak"}, {"type": "Speak", "text": None},
                                   {"type": "Speak", "text": "word " * 500}]))  # fmt: skip
    def odd_message(self, message: dict[str, Any]) -> None:
        self.send(dumps(message))

    def oversized_frame(self) -> str:
        return dumps({"type": "Speak", "text": "a" * OVERSIZED})

    def message_problems(self, record: WsRecord) -> list[str]:
        problems = typed_problems(record, DEEPGRAM_TYPES)
        problems += [f"warning {m}" for m in json_messages(record)
                     if isinstance(m, dict) and m.get("code") == "SYNTHESIS_FAILED"]  # fmt: skip
        return problems


# ----- NVIDIA Magpie's realtime protocol on SageMaker's bidirectional stream ------------------------

MAGPIE_TYPES = {"conversation.created", "synthesize_session.updated", "input_text.committed", "input_text.ended",
                "conversation.item.speech.data", "conversation.item.speech.completed", "error"}  # fmt: skip
MAGPIE_UPDATES = st.sampled_from([
    {"input_text_synthesis": {"voice_name": "Magpie-Multilingual.EN-US.Aria", "language_code": "en-US"}},
    {"output_audio_params": {"sample_rate_hz": 16000, "num_channels": 1, "audio_format": "LINEAR_PCM"}},
    {"output_audio_params": {"sample_rate_hz": 7}}, {"output_audio_params": {"num_channels": 2}},
    {"input_text_synthesis": {"voice_name": "nobody-at-all"}}, {"zero_shot_config": {"x": 1}}, {"bogus": 1}, [],
])  # fmt: skip


class Magpie(DialectMachine):
    name = "magpie"
    path = "/invocations-bidirectional-stream"
    closes = frozenset({1000, 1008, 1009, 1013})

    def is_audio(self, message: str | bytes) -> bool:
        return isinstance(message, str) and "speech.data" in message

    def opened(self, client: WsClient) -> None:
        # The first message picks the protocol on this path: a Magpie event (else it is the vLLM-Omni stream).
        self.run(client.send(dumps({"type": "input_text.append", "text": ""})))

    @rule(session=MAGPIE_UPDATES)
    def update(self, session: Any) -> None:
        self.send(dumps({"type": "synthesize_session.update", "session": session, "event_id": "u1"}))

    @rule(text=TEXTS)
    def append(self, text: str) -> None:
        self.send(dumps({"type": "input_text.append", "text": text}))

    @rule(kind=st.sampled_from(["input_text.commit", "input_text.done", "session.end", "input_text.append"]))
    def control(self, kind: str) -> None:
        self.send(dumps({"type": kind, "event_id": "c1"}))

    def message_problems(self, record: WsRecord) -> list[str]:
        problems = typed_problems(record, MAGPIE_TYPES)
        problems += [f"server error {m}" for m in json_messages(record)
                     if isinstance(m, dict) and m.get("type") == "error"
                     and m.get("error", {}).get("type") == "server_error"
                     and m.get("error", {}).get("code") not in ("server_busy", "shutting_down")]  # fmt: skip
        return problems


# ----- Wyoming (TCP) -----------------------------------------------------------------------------------

WYOMING_TYPES = {"info", "pong", "audio-start", "audio-chunk", "audio-stop", "synthesize-stopped", "error"}


def wyoming_frame(kind: str, data: dict[str, Any] | None = None) -> bytes:
    header: dict[str, Any] = {"type": kind, "version": "1.10.2"}
    body = json.dumps(data).encode() if data else b""
    if body:
        header["data_length"] = len(body)
    return json.dumps(header).encode() + b"\n" + body


class WyomingClient:
    """A raw TCP client of the Wyoming port: sends any bytes, reads events with the official ``wyoming`` reader."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.problems: list[str] = []
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None

    @property
    def open(self) -> bool:
        return self._reader_task is not None and not self._reader_task.done()

    async def connect(self) -> None:
        reader, self._writer = await asyncio.open_connection("127.0.0.1", self.port)
        self._reader_task = asyncio.get_running_loop().create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(ConnectionError):
            while (event := await async_read_event(reader)) is not None:
                self.events.append((event.type, event.data or {}))

    async def send(self, data: bytes) -> None:
        if self._writer is None or not self.open:
            return
        with contextlib.suppress(ConnectionError):
            self._writer.write(data)
            await self._writer.drain()

    async def close(self, abort: bool) -> None:
        if self._writer is None:
            return
        if abort:
            self._writer.transport.abort()
        else:
            self._writer.close()
        if self._reader_task is not None:
            await asyncio.wait_for(self._reader_task, 30)


WYOMING_VOICES = st.sampled_from([None, {"name": "alloy"}, {"language": "en"}, {"name": "nobody"}, {"language": "xx"},
                                  "voice", {"name": 5}])  # fmt: skip


class Wyoming(DialectMachine):
    name = "wyoming"
    path = ""
    closes: ClassVar[frozenset[int]] = frozenset()

    def __init__(self) -> None:
        super().__init__()
        self.tcp: list[WyomingClient] = []

    def tcp_client(self) -> WyomingClient:
        if not self.tcp or not self.tcp[-1].open:
            client = WyomingClient(self.server.live.settings.wyoming_port or 0)
            self.run(client.connect())
            self.tcp.append(client)
            STATS[f"{self.name} connections"] += 1
        return self.tcp[-1]

    def send(self, *frames: str | bytes) -> None:
        client = self.tcp_client()
        for frame in frames:
            self.run(client.send(frame.encode(errors="surrogatepass") if isinstance(frame, str) else frame))
            STATS[f"{self.name} messages"] += 1

    def oversized_frame(self) -> str:
        return json.dumps({"type": "synthesize", "data_length": 5 * 1024 * 1024}) + "\n"

    @rule(code=st.sampled_from([1000, None]))
    def client_close(self, code: int | None) -> None:
        if self.tcp and self.tcp[-1].open:
            self.run(self.tcp[-1].close(abort=code is None))

    @rule()
    def wait_for_audio(self) -> None:
        if self.tcp and self.tcp[-1].open:
            client, seen = self.tcp[-1], len(self.tcp[-1].events)

            async def audio() -> None:
                deadline = time.monotonic() + 1.5
                while client.open and time.monotonic() < deadline:
                    if any(kind == "audio-chunk" for kind, _ in client.events[seen:]):
                        return
                    await asyncio.sleep(0.01)

            self.run(audio())

    @rule(text=TEXTS, voice=WYOMING_VOICES)
    def synthesize(self, text: str, voice: Any) -> None:
        self.send(wyoming_frame("synthesize", {"text": text, **({"voice": voice} if voice is not None else {})}))

    @rule(voice=WYOMING_VOICES)
    def synthesize_start(self, voice: Any) -> None:
        self.send(wyoming_frame("synthesize-start", {"voice": voice} if voice is not None else None))

    @rule(text=TEXTS)
    def synthesize_chunk(self, text: str) -> None:
        self.send(wyoming_frame("synthesize-chunk", {"text": text}))

    @rule(kind=st.sampled_from(["synthesize-stop", "describe", "ping", "audio-start", "transcribe"]))
    def event(self, kind: str) -> None:
        self.send(wyoming_frame(kind))

    @rule(frame=st.sampled_from([
        b"not json\n", b"\n\n", b'{"version": "1"}\n', b'{"type": "ping", "data_length": -1}\n',
        b'{"type": "ping", "data_length": 3}\nabc', b'{"type": "ping", "data": [1]}\n', b"\xff\xfe\n",
        b'{"type": "synthesize", "data": {"text": "In the header."}}\n', DEEP_JSON.encode() + b"\n",
        b'{"type": "synthesize", "data_length": 2, "payload_length": 4}\n{}\x00\x01\x02\x03',
        b'{"type": "synthesize-chunk", "data_length": 30}\n{"text": "split',
    ]))  # fmt: skip
    def raw_bytes(self, frame: bytes) -> None:
        self.send(frame)

    def finish(self) -> list[str]:
        async def close() -> None:
            await asyncio.gather(*(client.close(abort=False) for client in self.tcp))

        self.run(close(), timeout=120)
        problems = []
        for client in self.tcp:
            for kind, data in client.events:
                if kind not in WYOMING_TYPES or (
                    kind == "error" and data.get("code") in ("internal_error", "synthesis_failed")
                ):
                    problems.append(f"wyoming: unexpected event {kind} {str(data)[:300]}")
        return problems


# ----- the tests ----------------------------------------------------------------------------------------

DIALECTS: list[type[DialectMachine]] = [SpeechStream, ElevenLabsStreamInput, ElevenLabsMultiStreamInput, Cartesia,
                                        Deepgram, Magpie, Wyoming]  # fmt: skip


@pytest.mark.parametrize("machine", DIALECTS, ids=[m.name for m in DIALECTS])
def test_dialect_survives_any_message_sequence_and_gives_everything_back(
    watched: WatchedServer, machine: type[DialectMachine]
) -> None:
    run_machine(machine)


# ----- the sequences the issue names, every run --------------------------------------------------------

PCM = {"response_format": "pcm", "stream_audio": True}
LONG = WORDS[-1]
CARTESIA_RAW = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}
CARTESIA_VOICE = "alloy"


def _received_json(machine: DialectMachine) -> list[Any]:
    return [message for client in machine.clients for message in json_messages(client.record)]


def _wait_for(machine: DialectMachine, done: Any) -> None:
    """Until ``done(messages)`` holds for the JSON messages received so far (at most 30 s)."""
    deadline = time.monotonic() + 30
    while not done(_received_json(machine)) and time.monotonic() < deadline:
        time.sleep(0.01)


def _until_the_server_closes(machine: DialectMachine) -> None:
    """Until the server has closed the connection (at most 30 s): its last answer and close frame are in before the
    test's own close, which would otherwise race them."""
    client = machine.current
    deadline = time.monotonic() + 30
    while client is not None and client.open and time.monotonic() < deadline:
        time.sleep(0.01)


def _count(messages: list[Any], kind: str) -> int:
    return sum(isinstance(e, dict) and e.get("type") == kind for e in messages)


def _stream(m: SpeechStream) -> None:
    m.config(PCM)
    m.text("Hello there. ")
    m.config({"response_format": "wav"})  # config after text: refused, the utterance goes on
    m.done()
    _wait_for(m, lambda messages: _count(messages, "session.done") == 1)
    m.text(LONG)
    m.done()
    m.wait_for_audio()
    m.cancel("input.cancel")  # cancel while the utterance after input.done (its flush) is speaking
    m.garbage(b"\x00\x01binary")
    m.garbage("{not json")
    m.garbage(DEEP_JSON)
    m.text("Still here.")
    m.done()
    _wait_for(m, lambda messages: _count(messages, "session.done") == 2)
    m.oversized()
    _until_the_server_closes(m)  # too_large, then 1009


def _stream_answers(m: SpeechStream) -> None:
    codes = [e.get("code") for e in _received_json(m) if e.get("type") == "error"]
    assert codes == ["utterance_open", "binary_not_supported", "invalid_json", "invalid_json", "too_large"], codes
    assert [e["utterance_index"] for e in _received_json(m) if e.get("type") == "session.done"] == [0, 2]
    assert m.clients[0].record.server_close is not None and m.clients[0].record.server_close[0] == 1009


def _elevenlabs_multi(m: ElevenLabsMultiStreamInput) -> None:
    m.query = "?output_format=pcm_24000"
    m.context_text("a", LONG, flush=True)
    m.wait_for_audio()
    m.close_context("a")  # races the audio still coming
    m.context_text("b", "A second context while the first drains.", flush=True)
    m.close_context("b")
    _wait_for(m, lambda messages: sum(bool(e.get("isFinal")) for e in messages) == 2)
    m.garbage(DEEP_JSON)  # ElevenLabs answers bad JSON with its error and 1008
    _until_the_server_closes(m)


def _elevenlabs_answers(m: ElevenLabsMultiStreamInput) -> None:
    messages = _received_json(m)
    assert sorted(e["contextId"] for e in messages if e.get("isFinal")) == ["a", "b"]
    assert messages[-1]["error"] == "invalid_input_message"
    assert m.clients[0].record.server_close is not None and m.clients[0].record.server_close[0] == 1008


def _cartesia(m: Cartesia) -> None:
    m.generate("a", LONG, True, True, CARTESIA_RAW, CARTESIA_VOICE, True)
    m.wait_for_audio()
    m.cancel("a")  # cancel during a flush's audio
    m.generate("b", "First context. ", False, None, CARTESIA_RAW, CARTESIA_VOICE, False)
    m.generate("c", "A second context while the first drains.", False, None, CARTESIA_RAW, CARTESIA_VOICE, False)
    m.garbage(b"binary")
    m.garbage(DEEP_JSON)
    _wait_for(m, lambda messages: _count(messages, "done") == 2)
    m.oversized()
    _wait_for(m, lambda messages: any(e.get("status_code") == 413 for e in messages))  # before the test's close


def _cartesia_answers(m: Cartesia) -> None:
    messages = _received_json(m)
    assert sorted(e["context_id"] for e in messages if e.get("type") == "done") == ["b", "c"]
    assert [e["status_code"] for e in messages if e.get("type") == "error"] == [400, 400, 413]


def _deepgram(m: Deepgram) -> None:
    m.query = "?encoding=linear16&sample_rate=24000"
    m.speak(LONG)
    m.control("Flush")
    m.wait_for_audio()
    m.control("Clear")  # clear during the flush's audio
    m.garbage("{not json")
    m.garbage(DEEP_JSON)
    m.speak("After the clear.")
    m.control("Flush")
    _wait_for(m, lambda messages: _count(messages, "Flushed") == 1)
    m.oversized()
    _until_the_server_closes(m)  # 1009


def _deepgram_answers(m: Deepgram) -> None:
    messages = _received_json(m)
    assert [e["type"] for e in messages if e["type"] != "Metadata"] == ["Cleared", "Warning", "Warning", "Flushed"]
    assert m.clients[0].record.server_close is not None and m.clients[0].record.server_close[0] == 1009


def _magpie(m: Magpie) -> None:
    m.append(LONG)
    m.control("input_text.commit")
    m.wait_for_audio()
    m.update({"output_audio_params": {"sample_rate_hz": 16000}})
    m.garbage(DEEP_JSON)
    m.control("input_text.done")
    _wait_for(m, lambda messages: _count(messages, "conversation.item.speech.completed") == 1)
    m.control("session.end")


def _magpie_answers(m: Magpie) -> None:
    messages = _received_json(m)
    errors = [e["error"]["code"] for e in messages if e["type"] == "error"]
    assert errors == ["invalid_json"], errors
    assert sum(e["type"] == "conversation.item.speech.completed" for e in messages) == 1


def _wyoming(m: Wyoming) -> None:
    m.synthesize_start(None)
    m.synthesize_chunk(LONG)
    m.wait_for_audio()
    m.event("synthesize-stop")
    m.raw_bytes(DEEP_JSON.encode() + b"\n")  # the framing is broken: an error, then the connection ends
    client = m.tcp[0]
    deadline = time.monotonic() + 30
    while client.open and time.monotonic() < deadline:
        time.sleep(0.01)


def _wyoming_answers(m: Wyoming) -> None:
    assert ("error", "invalid_frame") in [(kind, data.get("code")) for kind, data in m.tcp[0].events]


NAMED: list[tuple[type[DialectMachine], Any, Any]] = [
    (SpeechStream, _stream, _stream_answers),
    (ElevenLabsMultiStreamInput, _elevenlabs_multi, _elevenlabs_answers),
    (Cartesia, _cartesia, _cartesia_answers),
    (Deepgram, _deepgram, _deepgram_answers),
    (Magpie, _magpie, _magpie_answers),
    (Wyoming, _wyoming, _wyoming_answers),
]


@pytest.mark.parametrize(("machine", "steps", "answers"), NAMED, ids=[m.name for m, _, _ in NAMED])
def test_named_sequences_get_the_protocols_answers_and_give_everything_back(
    watched: WatchedServer, machine: type[DialectMachine], steps: Any, answers: Any
) -> None:
    """Config after text, cancel during a flush, close_context racing audio, a second context while the first
    drains, binary and bad JSON (nested deeper than the parser recurses, too) and oversized frames."""
    m = machine()
    steps(m)
    m.teardown()
    answers(m)


# ----- with an API key: each dialect's clients authenticate as its SDKs do; a wrong key gets its own refusal ------

KEY = "fuzz-key-7Qx2"
KEYED_EXAMPLES = int(os.environ.get("SPEAKWIRE_FUZZ_KEYED_EXAMPLES", "4"))
KEYED_STEPS = int(os.environ.get("SPEAKWIRE_FUZZ_KEYED_STEPS", "10"))
WRONG_KEYS = st.sampled_from([None, "wrong-key", KEY + "x", KEY.upper()])
"""What a refused client offers: no key at all (None), or a key that is not the server's."""


@dataclass(frozen=True)
class KeyWay:
    """Where a client puts the API key: a header (after ``scheme``), a query parameter, the ``Sec-WebSocket-Protocol``
    pair ``<name>, <key>`` (Deepgram's browser clients), or a field of its first message (``KeyedDialect.opener``)."""

    where: Literal["header", "query", "subprotocol", "message"]
    name: str
    scheme: str = ""

    def __str__(self) -> str:
        return f"{self.where} {self.name}"


@dataclass(frozen=True)
class KeyedDialect:
    """How a dialect's clients authenticate (``ways``), and how the server refuses a wrong or missing key."""

    ways: tuple[KeyWay, ...]
    opener: dict[str, Any] | None
    """The first message, which a ``message`` way adds the key to and a refused client sends to hear its refusal
    (None: none besides the dialect's own, ``DialectMachine.opened``)."""
    refusal: Callable[[Any], bool] | None = None
    """The one message a refused client gets before the server closes with 1008, as a predicate on the JSON; None:
    the handshake itself is refused (HTTP 401)."""


BEARER = KeyWay("header", "Authorization", "Bearer ")
QUERY = KeyWay("query", "api_key")
KEYED: dict[type[DialectMachine], KeyedDialect] = {
    # vLLM-Omni's client (OpenAI's Bearer), a browser's ?api_key=, or session.config's api_key.
    SpeechStream: KeyedDialect(
        (BEARER, QUERY, KeyWay("message", "api_key")),
        {"type": "session.config", "response_format": "pcm", "stream_audio": True},
        lambda m: m.get("type") == "error" and m.get("code") == "unauthorized",
    ),
    # The elevenlabs SDK's xi-api-key header, or the documented first message's xi_api_key.
    **dict.fromkeys(
        [ElevenLabsStreamInput, ElevenLabsMultiStreamInput],
        KeyedDialect(
            (KeyWay("header", "xi-api-key"), KeyWay("message", "xi_api_key")),
            {"text": " "},
            lambda m: m.get("error") == "invalid_api_key" and m.get("code") == 1008,
        ),
    ),
    # cartesia's SDKs: X-API-Key, ?api_key= (the older WebSocket URL), Authorization: Bearer.
    Cartesia: KeyedDialect((KeyWay("header", "X-API-Key"), QUERY, BEARER), None),
    # deepgram-sdk's Authorization: Token, a browser's Sec-WebSocket-Protocol: token, <key>.
    Deepgram: KeyedDialect((KeyWay("header", "Authorization", "Token "), KeyWay("subprotocol", "token")), None),
    # Magpie outside SageMaker: a header or ?api_key= (its first message is its own, Magpie.opened).
    Magpie: KeyedDialect(
        (BEARER, QUERY),
        None,
        lambda m: m.get("type") == "error" and m.get("error", {}).get("code") == "unauthorized",
    ),
}


class Keyed(DialectMachine):
    """A dialect's machine (the class after this one in the MRO) against the server with ``KEY``: each connection
    offers the key one of the dialect's ways (``KEYED``), drawn per connection, and never hears the refusal;
    ``wrong_key`` connects aside with a wrong or missing key (once at the end of a run at the latest), which must get
    only the dialect's refusal (a 401 handshake, or its error and 1008), nothing spoken."""

    server: ClassVar[WatchedServer]
    client_loop: ClassVar[ClientLoop]
    dialect: ClassVar[KeyedDialect]

    def __init__(self) -> None:
        super().__init__()
        self.rng = random.Random(0)
        self.way = self.dialect.ways[0]
        """The way the current connection offers the key."""
        self.ways: dict[WsClient, KeyWay] = {}
        self.refused: list[tuple[KeyWay | None, WsClient]] = []
        self.last_knock: tuple[KeyWay | None, str | None] | None = None
        """The wrong key the run ends with if ``wrong_key`` never came."""

    @initialize(rng=st.randoms(use_true_random=False), data=st.data())
    def choose_ways(self, rng: random.Random, data: st.DataObject) -> None:
        self.rng = rng
        self.last_knock = self.draw_wrong_key(data)

    def draw_wrong_key(self, data: st.DataObject) -> tuple[KeyWay | None, str | None]:
        way = data.draw(st.sampled_from([None, *self.dialect.ways]), label="wrong key way")
        return way, None if way is None else data.draw(WRONG_KEYS, label="wrong key")

    def client(self, way: KeyWay | None, key: str | None) -> WsClient:
        """A client offering ``key`` (None: none) the ``way`` way."""
        url, headers, subprotocols = self.url(), {}, None
        if way is not None and key is not None:
            if way.where == "header":
                headers[way.name] = way.scheme + key
            elif way.where == "query":
                url += ("&" if "?" in url else "?") + f"{way.name}={key}"
            elif way.where == "subprotocol":
                subprotocols = [way.name, key]
        return WsClient(url, headers=headers, subprotocols=subprotocols)

    def new_client(self) -> WsClient:
        self.way = self.rng.choice(self.dialect.ways)
        STATS[f"{self.name} key {self.way}"] += 1
        client = self.client(self.way, KEY)
        self.ways[client] = self.way
        return client

    def opened(self, client: WsClient) -> None:
        if self.way.where == "message":
            assert self.dialect.opener is not None
            self.run(client.send(dumps({**self.dialect.opener, self.way.name: KEY})))
        super().opened(client)

    @rule(data=st.data())
    def wrong_key(self, data: st.DataObject) -> None:
        self.knock(*self.draw_wrong_key(data))

    def knock(self, way: KeyWay | None, key: str | None) -> None:
        """A connection aside offering ``key`` (None: none) the ``way`` way, until the server has answered it."""
        client = self.client(way, key)
        self.refused.append((way, client))
        STATS[f"{self.name} refused connections"] += 1
        if not self.run(client.connect()):
            return
        if self.dialect.opener is not None:
            field = {way.name: key} if way is not None and way.where == "message" and key is not None else {}
            self.run(client.send(dumps({**self.dialect.opener, **field})))
        super().opened(client)  # the dialect's own first message (Magpie's)
        self.run(client.wait_closed(10))
        self.run(client.close(1000))

    def finish(self) -> list[str]:
        if not self.refused and self.last_knock is not None:
            self.knock(*self.last_knock)
        problems = super().finish()
        refusal = self.dialect.refusal or (lambda _: False)
        for client in self.clients:
            refused = [m for m in json_messages(client.record) if isinstance(m, dict) and refusal(m)]
            way = self.ways.get(client)
            problems += [f"{client.record.url} ({way}): refused with the key: {str(m)[:200]}" for m in refused]
        for way, client in self.refused:
            problems += [f"{client.record.url} (wrong key, {way}): {p}" for p in self.refusal_problems(client.record)]
        return problems

    def refusal_problems(self, record: WsRecord) -> list[str]:
        """What a client with a wrong or missing key got besides the dialect's refusal."""
        if self.dialect.refusal is None:
            if record.refused is not None and "401" in record.refused:
                return []
            return [f"not refused with HTTP 401: {record.refused or record.received[:3]} {record.server_close}"]
        if record.refused is not None:
            return [f"handshake refused: {record.refused}"]
        messages = list(json_messages(record))
        problems = []
        if len(record.received) != 1 or len(messages) != 1 or not self.dialect.refusal(messages[0]):
            problems.append(f"not just the refusal: {[str(m)[:200] for m in record.received]}")
        if record.server_close is None or record.server_close[0] != 1008:
            problems.append(f"closed {record.server_close}, not 1008 (client closed: {record.client_closed})")
        return problems


def _keyed(machine: type[DialectMachine]) -> type[Keyed]:
    return type(f"Keyed{machine.__name__}", (Keyed, machine), {"name": f"{machine.name} keyed",
                                                                "dialect": KEYED[machine]})  # fmt: skip


KEYED_DIALECTS = [_keyed(machine) for machine in KEYED]
"""Wyoming is not among them: the protocol has no credentials (the port is for a trusted network)."""


@pytest.fixture(scope="module")
def keyed(piper_engine: PiperEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WatchedServer]:
    warm_up = cast("type[SpeechStream]", KEYED_DIALECTS[0])
    with _serve(tmp_path_factory, piper_engine, Keyed, warm_up, api_key=KEY) as server:
        yield server


@pytest.mark.parametrize("machine", KEYED_DIALECTS, ids=[m.name for m in KEYED_DIALECTS])
def test_with_an_api_key_each_sdks_way_is_let_in_and_a_wrong_key_gets_only_the_refusal(
    keyed: WatchedServer, machine: type[Keyed]
) -> None:
    run_machine(machine, KEYED_EXAMPLES, KEYED_STEPS)


# ----- a drain while connections are open ---------------------------------------------------------------

DRAIN_EXAMPLES = int(os.environ.get("SPEAKWIRE_FUZZ_DRAIN_EXAMPLES", "4"))
DRAIN_STEPS = int(os.environ.get("SPEAKWIRE_FUZZ_DRAIN_STEPS", "10"))
DRAIN_TIMEOUTS = st.sampled_from([0.0, 0.3, 1.0])
"""How long a drain waits for the utterances in flight (short: an utterance the run left open holds it so long)."""
GOING_AWAY: dict[type[DialectMachine], Callable[[Any], bool]] = {
    SpeechStream: lambda m: m.get("type") == "error" and m.get("code") == "shutting_down",
    **dict.fromkeys(
        [ElevenLabsStreamInput, ElevenLabsMultiStreamInput],
        lambda m: m.get("error") == "shutting_down" and m.get("code") == 1001,
    ),
    Cartesia: lambda m: m.get("type") == "error" and m.get("status_code") == 503,
    Deepgram: lambda m: m.get("type") == "Warning" and m.get("code") == "SHUTTING_DOWN",
    Magpie: lambda m: m.get("type") == "error" and m.get("error", {}).get("code") == "shutting_down",
}
"""Each dialect's notice before its going-away close (1001) at the end of a drain (``WebSocketSession.going_away``)."""


class Draining(DialectMachine):
    """A dialect's machine (the class after this one in the MRO) on a server that begins SIGTERM's drain
    (``server.drain.drain``, in process) after a drawn step with a connection open, or at the end of a run that
    stopped sooner; the steps after it run while the drain waits for the utterances in flight, and after. Every
    connection must then end the protocol's way: the sessions the drain found with 1001 after the dialect's notice
    (``GOING_AWAY``), later ones refused with 1013, none left open, and a new one is refused too. After the run the
    server stops draining, as the next process would start (a drain's hand-over to uvicorn's shutdown is
    ``tests/server/test_drain.py``'s)."""

    server: ClassVar[WatchedServer]
    client_loop: ClassVar[ClientLoop]
    dialect: ClassVar[type[DialectMachine]]
    """The machine drained (its notice: ``GOING_AWAY``)."""

    def __init__(self) -> None:
        super().__init__()
        self.drain: concurrent.futures.Future[DrainEnd] | None = None
        self.steps = 0
        self.drain_at, self.drain_timeout = 0, 0.0

    @initialize(at=st.integers(0, DRAIN_STEPS - 1), timeout=DRAIN_TIMEOUTS)
    def schedule_drain(self, at: int, timeout: float) -> None:
        self.drain_at, self.drain_timeout = at, timeout

    @invariant()
    def drain_when_due(self) -> None:
        """An invariant runs after every step: the drain begins after the drawn one."""
        if self.drain is None and self.steps == self.drain_at:
            self.begin_drain(self.drain_timeout)
        self.steps += 1

    def begin_drain(self, timeout: float) -> None:
        self.touch()
        note(f"the drain begins after step {self.steps} (timeout {timeout:g} s)")
        STATS[f"{self.name} drains"] += 1
        self.drain = asyncio.run_coroutine_threadsafe(drain(self.server.live.state, timeout), self.server.loop)

    def touch(self) -> None:
        """Open a connection unless one is."""
        self.connection()

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            if self.drain is not None:
                with contextlib.suppress(Exception):
                    self.drain.result(60)
            self.server.live.state.draining = False

    def finish(self) -> list[str]:
        if self.drain is None:
            STATS[f"{self.name} drains at the end"] += 1
            self.begin_drain(0.0)
        assert self.drain is not None
        self.drain.result(60)
        problems = self.after_drain()
        problems += super().finish()
        for client in self.clients:
            record = client.record
            code = record.server_close[0] if record.server_close is not None else None
            STATS[f"{self.name} closes {code}{' (echo)' if record.client_closed else ''}"] += 1
            # The server's own 1001 (not its echo of a client's close) comes after the dialect's notice.
            notice = any(isinstance(m, dict) and GOING_AWAY[self.dialect](m) for m in json_messages(record))
            if code == 1001 and record.client_closed is None and not notice:
                problems.append(f"{record.url}: 1001 without its notice: {record.received[-3:]}")
        return problems

    def after_drain(self) -> list[str]:
        """Once the drain is done: no connection is left open, and a new one is refused with 1013."""

        async def ended() -> None:
            await asyncio.gather(*(client.wait_closed(10) for client in self.clients))

        self.run(ended())
        problems = [f"{client.record.url}: still open after the drain" for client in self.clients if client.open]
        late = self.new_client()
        self.clients.append(late)
        if self.run(late.connect()):
            self.opened(late)
            self.run(late.wait_closed(10))
            self.run(late.close(1000))
        if late.record.server_close is None or late.record.server_close[0] != 1013:
            problems.append(f"{late.record.url}: a connection after the drain: {late.record.server_close}, "
                            f"{late.record.refused}, not 1013")  # fmt: skip
        return problems


def _draining(machine: type[DialectMachine]) -> type[Draining]:
    return type(f"Draining{machine.__name__}", (Draining, machine), {
        "name": f"{machine.name} drain", "closes": machine.closes | {1001}, "dialect": machine,
    })  # fmt: skip


class DrainingWyoming(Draining, Wyoming):
    """Wyoming's connections are sessions the drain ends too (TCP has no close code: its error ``shutting_down``,
    then its requests' endings); one opened after the drain's last look is left to the listener's stop, so only its
    requests are checked: a new connection's ``synthesize`` is refused with ``shutting_down``, and it closes."""

    name = "wyoming drain"
    dialect = Wyoming

    def touch(self) -> None:
        self.tcp_client()

    def after_drain(self) -> list[str]:
        late = WyomingClient(self.server.live.settings.wyoming_port or 0)
        self.tcp.append(late)
        self.run(late.connect())
        self.run(late.send(wyoming_frame("synthesize", {"text": "Refused while draining."})))

        async def closed() -> None:
            deadline = time.monotonic() + 10
            while late.open and time.monotonic() < deadline:
                await asyncio.sleep(0.01)

        self.run(closed())
        got = [(kind, data.get("code")) for kind, data in late.events]
        if got != [("error", "shutting_down")] or late.open:
            return [f"wyoming: a connection after the drain got {got} (open: {late.open}), not its refusal"]
        return []


DRAINING_DIALECTS: list[type[Draining]] = [*(_draining(machine) for machine in GOING_AWAY), DrainingWyoming]


@pytest.fixture(scope="module")
def draining(piper_engine: PiperEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WatchedServer]:
    warm_up = cast("type[SpeechStream]", DRAINING_DIALECTS[0])
    with _serve(tmp_path_factory, piper_engine, Draining, warm_up, wyoming_port=free_port()) as server:
        yield server


@pytest.mark.parametrize("machine", DRAINING_DIALECTS, ids=[m.name for m in DRAINING_DIALECTS])
def test_a_drain_ends_every_connection_the_protocols_way_and_gives_everything_back(
    draining: WatchedServer, machine: type[Draining]
) -> None:
    run_machine(machine, DRAIN_EXAMPLES, DRAIN_STEPS)
