"""NVIDIA Magpie's protocols: the NIM realtime session on SageMaker's default bidirectional path, and its HTTP body.

The sans-I/O state machine first (``server.magpie.protocol``), then a real server on loopback spoken to on the
raw wire, as NVIDIA's wrapper forwards it. pipecat's own NVIDIA SageMaker services drive the same server in
``tests/deploy/test_pipecat_nvidia_sagemaker.py`` (Python >= 3.12). A seeded server makes each commit's audio
comparable, sample for sample, with the same text from ``/v1/audio/speech``.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets.exceptions
import websockets.sync.client

from speakwire.engines.piper import PiperEngine
from speakwire.server.limits import CLOSE_TOO_BIG, MAX_CONFIG_BYTES, MAX_TEXT_MESSAGE_BYTES
from speakwire.server.magpie import protocol as p
from speakwire.server.sagemaker.routing import peek_body
from speakwire.settings import Settings
from speakwire.voice_presets import is_preset_voice
from support.audio import pcm_to_float
from support.live_server import LiveServer, start_server

SEED = 7
PIPECAT_VOICE = "Magpie-Multilingual.EN-US.Aria"
FIRST, SECOND = "Hello from the Magpie protocol.", "A second commit speaks after the first."
LONG = " ".join(f"This is sentence number {n} of a long answer that keeps going." for n in range(1, 9))


@pytest.fixture(scope="module")
def seeded(piper_engine: PiperEngine) -> Iterator[LiveServer]:
    live = start_server(Settings(default_seed=SEED), engine=piper_engine)
    yield live
    live.stop()


def http_pcm(server: LiveServer, text: str, rate: int) -> bytes:
    body = {"input": text, "response_format": "pcm", "sample_rate": rate, "stream_format": "audio"}
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.content


# ----- the protocol, without I/O ------------------------------------------------------------------


def send(connection: p.RealtimeConnection, kind: str, **fields: Any) -> list[p.Action]:
    return connection.receive(json.dumps({"type": kind, **fields}))


def error_code(actions: list[p.Action]) -> str:
    [reply] = actions
    assert isinstance(reply, p.Reply) and reply.event["type"] == "error"
    return str(reply.event["error"]["code"])


def test_a_commit_speaks_the_text_appended_since_the_last_commit() -> None:
    connection = p.RealtimeConnection(max_commit_chars=1000)
    assert send(connection, "input_text.append", text="Hello ") == []
    assert send(connection, "input_text.append", text="world.") == []
    assert connection.has_text
    assert send(connection, "input_text.commit", event_id="c1") == [p.Commit("Hello world.", "c1")]
    assert not connection.has_text
    assert error_code(send(connection, "input_text.commit")) == "out_of_order"  # nothing appended since
    assert send(connection, "input_text.append", text="Again.") == []
    assert send(connection, "input_text.commit") == [p.Commit("Again.", None)]


def test_done_commits_what_waits_then_ends_the_turn_and_a_new_turn_may_follow() -> None:
    connection = p.RealtimeConnection(max_commit_chars=1000)
    send(connection, "input_text.append", text="The rest.")
    assert send(connection, "input_text.done", event_id="d1") == [p.Commit("The rest.", "d1"), p.Finish("d1")]
    assert send(connection, "input_text.done") == [p.Finish()]  # nothing waiting: the turn just ends
    send(connection, "input_text.append", text="   ")
    assert send(connection, "input_text.done") == [p.Finish()]
    assert not connection.has_text
    send(connection, "input_text.append", text="!!!")  # nothing to speak: refused, and the turn still ends
    reply, finish = send(connection, "input_text.done")
    assert isinstance(reply, p.Reply) and reply.event["error"]["code"] == "invalid_value"
    assert finish == p.Finish()
    send(connection, "input_text.append", text="New turn.")
    assert send(connection, "input_text.commit") == [p.Commit("New turn.", None)]
    assert send(connection, "session.end") == [p.End()]


def test_a_session_update_overrides_only_the_fields_it_gives() -> None:
    connection = p.RealtimeConnection(max_commit_chars=1000)
    assert connection.config == p.SynthesisConfig(None, None, p.DEFAULT_SAMPLE_RATE_HZ)
    session = {"input_text_synthesis": {"voice_name": PIPECAT_VOICE, "language_code": "en-US"},
               "output_audio_params": {"sample_rate_hz": 16000}}  # fmt: skip
    [configure] = send(connection, "synthesize_session.update", session=session, event_id="u1")
    assert configure == p.Configure(p.SynthesisConfig(PIPECAT_VOICE, "en-US", 16000), "u1")
    assert isinstance(configure, p.Configure)
    updated = connection.configured(configure.config, "u1")
    assert updated["type"] == "synthesize_session.updated" and updated["previous_event_id"] == "u1"
    assert updated["session"]["input_text_synthesis"] == {"language_code": "en-US", "voice_name": PIPECAT_VOICE}
    assert updated["session"]["output_audio_params"] == {"sample_rate_hz": 16000, "num_channels": 1,
                                                         "audio_format": "LINEAR_PCM"}  # fmt: skip
    [later] = send(connection, "synthesize_session.update", session={"output_audio_params": {"sample_rate_hz": 24000}})
    assert later == p.Configure(p.SynthesisConfig(PIPECAT_VOICE, "en-US", 24000), None)
    assert configure.config.speech_options() == p.SynthesisConfig(PIPECAT_VOICE, "en-US", 16000).speech_options()
    options = configure.config.speech_options()
    assert (options.voice, options.language, options.sample_rate, options.response_format) == (
        PIPECAT_VOICE, "English", 16000, "pcm")  # fmt: skip


def test_an_update_while_appended_text_waits_is_out_of_order_and_changes_nothing() -> None:
    connection = p.RealtimeConnection(max_commit_chars=1000)
    send(connection, "input_text.append", text="Half a sent")
    update = {"input_text_synthesis": {"voice_name": "other"}}
    assert error_code(send(connection, "synthesize_session.update", session=update)) == "out_of_order"
    assert connection.config == p.SynthesisConfig()
    assert send(connection, "input_text.commit") == [p.Commit("Half a sent", None)]  # the session went on


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (b"\x00\x01", "invalid_event"),
        ("{not json", "invalid_json"),
        ('["input_text.append"]', "unknown_event"),
        ('{"type": "response.create"}', "unknown_event"),
        ('{"type": "input_text.append"}', "invalid_value"),
        ('{"type": "input_text.append", "text": 5}', "invalid_value"),
        ('{"type": "synthesize_session.update", "session": []}', "invalid_value"),
        ('{"type": "synthesize_session.update", "session": {"voice": "x"}}', "invalid_value"),
        ('{"type": "synthesize_session.update", "session": {"output_audio_params": {"sample_rate_hz": "fast"}}}',
         "invalid_value"),
        ('{"type": "synthesize_session.update", "session": {"output_audio_params": {"sample_rate_hz": 1e999}}}',
         "invalid_value"),
        ('{"type": "synthesize_session.update", "session": {"output_audio_params": {"sample_rate_hz": NaN}}}',
         "invalid_value"),
        ('{"type": "synthesize_session.update", "session": {"output_audio_params": {"num_channels": 2}}}',
         "invalid_value"),
        ('{"type": "synthesize_session.update", "session": {"output_audio_params": {"audio_format": "OGG_OPUS"}}}',
         "invalid_value"),
        ('{"type": "synthesize_session.update", "session": {"zero_shot_config": {"audio_prompt_bytes": "AAAA"}}}',
         "invalid_value"),
    ],
)  # fmt: skip
def test_bad_messages_get_nims_error_and_the_session_goes_on(message: str | bytes, code: str) -> None:
    connection = p.RealtimeConnection(max_commit_chars=1000)
    [reply] = connection.receive(message)
    assert isinstance(reply, p.Reply)
    event = reply.event
    assert event["type"] == "error" and event["event_id"].startswith("event_") and event["error"]["code"] == code
    assert event["error"]["type"] == "invalid_request_error" and event["error"]["message"]
    assert connection.config == p.SynthesisConfig() and not connection.has_text
    send(connection, "input_text.append", text="Kept.")
    assert send(connection, "input_text.commit") == [p.Commit("Kept.", None)]


def test_an_error_names_the_client_event_it_answers() -> None:
    connection = p.RealtimeConnection(max_commit_chars=1000)
    [reply] = send(connection, "input_text.commit", event_id="event_abc")
    assert isinstance(reply, p.Reply) and reply.event["error"]["event_id"] == "event_abc"


def test_over_long_text_is_refused_and_an_oversized_message_closes_1009() -> None:
    connection = p.RealtimeConnection(max_commit_chars=20)
    assert send(connection, "input_text.append", text="Short text. ") == []
    # An append past what one commit speaks is refused at once; the text appended before it is kept and commits.
    assert error_code(send(connection, "input_text.append", text="This is longer than twenty.")) == "input_too_long"
    [commit] = send(connection, "input_text.commit")
    assert isinstance(commit, p.Commit) and commit.text == "Short text. "
    big = json.dumps({"type": "input_text.append", "text": "a" * MAX_TEXT_MESSAGE_BYTES})
    [fatal] = connection.receive(big)
    assert isinstance(fatal, p.Fatal) and fatal.code == CLOSE_TOO_BIG
    assert fatal.event["error"]["code"] == "message_too_large"
    huge = json.dumps({"type": "synthesize_session.update", "session": {"custom_dictionary": "a" * MAX_CONFIG_BYTES}})
    assert isinstance(connection.receive(huge)[0], p.Fatal)


def test_the_first_message_tells_magpie_from_the_speech_stream() -> None:
    for kind in p.CLIENT_EVENT_TYPES:
        assert p.is_realtime_event(json.dumps({"type": kind}))
    assert not p.is_realtime_event(json.dumps({"type": "session.config", "response_format": "pcm"}))
    # A speech-stream config that merely mentions a Magpie event type is still the speech stream's.
    assert not p.is_realtime_event(json.dumps({"type": "session.config", "instructions": '"input_text.append"'}))
    assert not p.is_realtime_event('{"type": "input_text.append"')  # not JSON
    assert not p.is_realtime_event(None)


def test_the_http_body_is_magpies_when_it_has_text_and_no_input() -> None:
    assert p.is_http_body({"text": "Hi", "voice_name": PIPECAT_VOICE})
    assert p.is_http_body({"text": "Hi"})
    assert not p.is_http_body({"input": "Hi", "text": "Hi"})
    assert not p.is_http_body({"voice_name": PIPECAT_VOICE})
    assert not p.is_http_body(["text"])
    body = {"text": "Hi.", "voice_name": PIPECAT_VOICE, "language_code": "en-US", "sample_rate_hz": 24000}
    assert p.parse_http_body(json.dumps(body).encode()) == p.HttpRequest(
        "Hi.", p.SynthesisConfig(PIPECAT_VOICE, "en-US", 24000))  # fmt: skip
    assert p.parse_http_body(b'{"text": "Hi."}').config == p.SynthesisConfig()  # the wrapper's defaults: 22050 Hz
    refusals = [(b"{", "invalid JSON body"), (b'{"text": " "}', "text field is required"),
                (b'{"text": "Hi", "sample_rate_hz": "x"}', "sample_rate_hz must be an integer, got 'x'."),
                (b'{"text": "Hi", "sample_rate_hz": 1e999}', "sample_rate_hz must be an integer, got inf."),
                (b'{"text": "Hi", "sample_rate_hz": NaN}', "sample_rate_hz must be an integer, got nan.")]  # fmt: skip
    for bad, message in refusals:
        with pytest.raises(p.MagpieError) as refused:
            p.parse_http_body(bad)
        assert refused.value.message == message and refused.value.status == 400


async def test_peeking_at_an_invocation_body_hands_it_on_unchanged() -> None:
    parts = [{"type": "http.request", "body": b"ab", "more_body": True},
             {"type": "http.request", "body": b"cd", "more_body": True},
             {"type": "http.request", "body": b"", "more_body": False}]  # fmt: skip
    for limit, body in ((10, b"abcd"), (1, None), (3, None)):  # None: longer than the limit, not Magpie's
        receive = iter(list(parts)).__next__

        async def next_part(receive: Any = receive) -> dict[str, Any]:
            return dict(receive())

        replay, peeked = await peek_body(next_part, limit)
        assert peeked == body
        assert [await replay() for _ in parts] == parts  # whatever was read first, then the rest, in order


def test_magpie_and_riva_voice_names_are_stock_names() -> None:
    stock = [PIPECAT_VOICE, "Magpie-Multilingual.FR-FR.Pascal.Calm", "Magpie-ZeroShot.Male-Angry",
             "English-US-Magpie-Flow.Male.Happy", "English-US.Female-1", "magpie-multilingual.en-us.aria"]  # fmt: skip
    for name in stock:
        assert is_preset_voice(name), name
    for name in ("en_US-joe-medium", "Aria", "English", "my-saved-voice"):
        assert not is_preset_voice(name), name


# ----- a real server, on the raw wire -------------------------------------------------------------


def bidi_url(server: LiveServer, query: str = "") -> str:
    return f"ws://127.0.0.1:{server.settings.port}/invocations-bidirectional-stream{query}"


def send_event(ws: Any, kind: str, **fields: Any) -> None:
    ws.send(json.dumps({"type": kind, **fields}))


def read_until(ws: Any, kind: str) -> list[dict[str, Any]]:
    """Events up to and including the first of ``kind``."""
    events: list[dict[str, Any]] = []
    while True:
        event = json.loads(ws.recv(timeout=60))
        events.append(event)
        if event["type"] == kind:
            return events


def configure(ws: Any, rate: int, voice: str | None = PIPECAT_VOICE) -> dict[str, Any]:
    synthesis = {"language_code": "en-US", **({"voice_name": voice} if voice else {})}
    send_event(ws, "synthesize_session.update", session={"input_text_synthesis": synthesis,
                                                          "output_audio_params": {"sample_rate_hz": rate}})  # fmt: skip
    return read_until(ws, "synthesize_session.updated")[-1]


def speak(ws: Any, *texts: str) -> list[dict[str, Any]]:
    for text in texts:
        send_event(ws, "input_text.append", text=text)
        send_event(ws, "input_text.commit")
    send_event(ws, "input_text.done")
    return read_until(ws, "conversation.item.speech.completed")


def audio_by_item(events: list[dict[str, Any]]) -> dict[str, bytes]:
    audio: dict[str, bytes] = {}
    for event in events:
        if event["type"] == "conversation.item.speech.data":
            audio[event["item_id"]] = audio.get(event["item_id"], b"") + base64.b64decode(event["audio"])
    return audio


def test_a_session_configures_speaks_each_commit_in_order_then_completes(seeded: LiveServer) -> None:
    rate = 16000
    with websockets.sync.client.connect(bidi_url(seeded), additional_headers={"X-Request-ID": "mag-1"}) as ws:
        updated = configure(ws, rate)
        events = speak(ws, FIRST, SECOND)
    assert updated["session"]["input_text_synthesis"]["voice_name"] == PIPECAT_VOICE
    assert updated["session"]["output_audio_params"]["sample_rate_hz"] == rate
    kinds = [e["type"] for e in events]
    assert "error" not in kinds
    committed = [e["item_id"] for e in events if e["type"] == "input_text.committed"]
    assert committed == ["mag-1-1", "mag-1-2"]

    def where(kind: str, item: str) -> list[int]:
        return [i for i, e in enumerate(events) if e["type"] == kind and e.get("item_id") == item]

    # Each commit: committed before its audio, all its audio before the next commit's, an empty last chunk at its end.
    data = {item: where("conversation.item.speech.data", item) for item in committed}
    for item in committed:
        assert where("input_text.committed", item)[0] < data[item][0]
        chunks = [events[i] for i in data[item]]
        assert [e["is_last_chunk"] for e in chunks] == [False] * (len(chunks) - 1) + [True]
        assert chunks[-1]["audio"] == "" and all(e["audio"] for e in chunks[:-1])
    assert max(data["mag-1-1"]) < min(data["mag-1-2"])
    # input_text.done is taken at once (input_text.ended); one speech.completed, last, counting the turn's audio.
    assert kinds.count("input_text.ended") == 1
    assert kinds[-1] == "conversation.item.speech.completed" and kinds.count("conversation.item.speech.completed") == 1
    completed = events[-1]
    sent = sum(1 for e in events if e["type"] == "conversation.item.speech.data" and e["audio"])
    assert completed["is_last_result"] is True and completed["total_audio_chunks"] == sent
    # Each commit's audio is the same text's from /v1/audio/speech at the session's rate, sample for sample.
    audio = audio_by_item(events)
    assert audio["mag-1-1"] == http_pcm(seeded, FIRST, rate) and audio["mag-1-2"] == http_pcm(seeded, SECOND, rate)
    total_ms = sum(len(pcm) for pcm in audio.values()) / 2 / rate * 1000
    assert abs(completed["synthesis_metadata"]["audio_duration_ms"] - total_ms) <= 1


def test_the_first_server_event_is_conversation_created(seeded: LiveServer) -> None:
    with websockets.sync.client.connect(bidi_url(seeded)) as ws:
        send_event(ws, "synthesize_session.update", session={})
        created, updated = json.loads(ws.recv(timeout=30)), json.loads(ws.recv(timeout=30))
    assert created["type"] == "conversation.created" and created["conversation"]["id"].startswith("conv_")
    assert updated["type"] == "synthesize_session.updated"
    assert updated["session"]["input_text_synthesis"] == {"language_code": "en-US", "voice_name": PIPECAT_VOICE}
    assert updated["session"]["output_audio_params"]["sample_rate_hz"] == p.DEFAULT_SAMPLE_RATE_HZ


def test_after_completed_nothing_more_of_the_turn_comes_and_a_new_turn_speaks(seeded: LiveServer) -> None:
    rate = 24000
    with websockets.sync.client.connect(bidi_url(seeded)) as ws:
        configure(ws, rate)
        first_turn = speak(ws, LONG)
        send_event(ws, "input_text.append", text=SECOND)
        send_event(ws, "input_text.commit")
        second_turn = read_until(ws, "input_text.committed")
        send_event(ws, "input_text.done")
        second_turn += read_until(ws, "conversation.item.speech.completed")
    # The next event after the first turn's completed is the new commit's: no audio of the old turn in between.
    assert [e["type"] for e in second_turn[:1]] == ["input_text.committed"]
    assert audio_by_item(first_turn) and list(audio_by_item(second_turn).values()) == [http_pcm(seeded, SECOND, rate)]


def test_done_with_nothing_committed_completes_at_once(seeded: LiveServer) -> None:
    with websockets.sync.client.connect(bidi_url(seeded)) as ws:
        send_event(ws, "input_text.done")  # a first message that is Magpie's too
        events = read_until(ws, "conversation.item.speech.completed")
    kinds = [e["type"] for e in events]
    assert kinds == ["conversation.created", "input_text.ended", "conversation.item.speech.completed"]
    assert events[1]["pending_items"] == 0 and events[-1]["total_audio_chunks"] == 0


def test_bad_messages_get_errors_and_the_session_goes_on(seeded: LiveServer) -> None:
    rate = 16000
    with websockets.sync.client.connect(bidi_url(seeded)) as ws:
        configure(ws, rate)
        send_event(ws, "input_text.commit", event_id="early")  # nothing appended yet
        send_event(ws, "response.create")
        ws.send("{not json")
        ws.send(b"\x00\x01")
        send_event(ws, "synthesize_session.update", session={"input_text_synthesis": {"voice_name": "nobody-here"}},
                   event_id="who")  # fmt: skip
        send_event(ws, "input_text.append", text="Waiting here. ")
        send_event(ws, "synthesize_session.update", session={}, event_id="late")  # text waits for its commit
        errors = [read_until(ws, "error")[-1]["error"] for _ in range(6)]
        events = speak(ws, FIRST)  # committed with the text that waited
    codes = [(e["code"], e.get("event_id")) for e in errors]
    assert codes == [("out_of_order", "early"), ("unknown_event", None), ("invalid_json", None),
                     ("invalid_event", None), ("invalid_voice", "who"), ("out_of_order", "late")]  # fmt: skip
    [audio] = audio_by_item(events).values()
    assert audio == http_pcm(seeded, "Waiting here. " + FIRST, rate)  # the voice and rate did not change


def test_session_end_stops_the_speech_and_closes_1000(seeded: LiveServer) -> None:
    with websockets.sync.client.connect(bidi_url(seeded)) as ws:
        configure(ws, 24000)
        for _ in range(3):
            send_event(ws, "input_text.append", text=LONG)
            send_event(ws, "input_text.commit")
        read_until(ws, "conversation.item.speech.data")
        send_event(ws, "session.end")
        with pytest.raises(websockets.exceptions.ConnectionClosedOK):
            while True:
                ws.recv(timeout=30)
    assert ws.close_code == 1000
    assert settles(seeded)


def test_a_client_that_leaves_mid_speech_leaves_nothing_running(seeded: LiveServer) -> None:
    with websockets.sync.client.connect(bidi_url(seeded)) as ws:
        send_event(ws, "input_text.append", text=LONG)
        send_event(ws, "input_text.commit")
        read_until(ws, "conversation.item.speech.data")
    assert settles(seeded)


def settles(server: LiveServer, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.state.pipeline.active == 0 and server.state.pipeline.scheduler.busy == 0:
            return True
        time.sleep(0.05)
    return False


def test_unknown_magpie_voices_speak_with_the_default_voice(seeded: LiveServer) -> None:
    with websockets.sync.client.connect(bidi_url(seeded)) as ws:
        updated = configure(ws, 16000, voice="Magpie-Multilingual.DE-DE.Leo.Happy")
        events = speak(ws, FIRST)
    assert updated["session"]["input_text_synthesis"]["voice_name"] == "Magpie-Multilingual.DE-DE.Leo.Happy"
    assert list(audio_by_item(events).values()) == [http_pcm(seeded, FIRST, 16000)]


def speak_as_the_speech_stream(ws: Any, text: str) -> tuple[list[str], bytes]:
    """vLLM-Omni's protocol on the default path: the events' types through ``session.done``, and the PCM."""
    ws.send(json.dumps({"type": "session.config", "response_format": "pcm", "stream_audio": True}))
    ws.send(json.dumps({"type": "input.text", "text": text}))
    ws.send(json.dumps({"type": "input.done"}))
    kinds: list[str] = []
    pcm = b""
    while "session.done" not in kinds:
        message = ws.recv(timeout=60)
        if isinstance(message, bytes):
            pcm += message
        else:
            kinds.append(json.loads(message)["type"])
    return kinds, pcm


def test_the_speech_stream_still_answers_on_the_default_path(seeded: LiveServer) -> None:
    with websockets.sync.client.connect(bidi_url(seeded)) as ws:
        kinds, pcm = speak_as_the_speech_stream(ws, FIRST)
    assert kinds[0] == "audio.start" and kinds[-1] == "session.done" and pcm == http_pcm(seeded, FIRST, 24000)


def test_a_client_that_waits_for_the_greeting_gets_it_and_its_session(seeded: LiveServer) -> None:
    """NIM's realtime clients wait for conversation.created before they send: the default path greets a silent
    client after its grace, once, and the session that follows is that conversation."""
    with websockets.sync.client.connect(bidi_url(seeded)) as ws:
        created = json.loads(ws.recv(timeout=30))  # sent nothing yet
        configure(ws, 16000)
        events = speak(ws, FIRST)
    assert created["type"] == "conversation.created" and created["conversation"]["id"].startswith("conv_")
    assert [e["type"] for e in events].count("conversation.created") == 0
    assert list(audio_by_item(events).values()) == [http_pcm(seeded, FIRST, 16000)]


def test_a_speech_stream_client_slower_than_the_grace_still_gets_its_session(seeded: LiveServer) -> None:
    with websockets.sync.client.connect(bidi_url(seeded)) as ws:
        greeting = json.loads(ws.recv(timeout=30))  # the greeting a silent client gets; vLLM-Omni clients skip it
        kinds, pcm = speak_as_the_speech_stream(ws, FIRST)
    assert greeting["type"] == "conversation.created"
    assert kinds[0] == "audio.start" and kinds[-1] == "session.done" and pcm == http_pcm(seeded, FIRST, 24000)


def test_a_silent_client_is_closed_once_after_the_config_timeout(piper_engine: PiperEngine) -> None:
    live = start_server(Settings(ws_config_timeout_s=1.5), engine=piper_engine)
    try:
        with websockets.sync.client.connect(bidi_url(live)) as ws:
            opened = time.monotonic()
            assert json.loads(ws.recv(timeout=30))["type"] == "conversation.created"
            with pytest.raises(websockets.exceptions.ConnectionClosedError):
                ws.recv(timeout=30)
            waited = time.monotonic() - opened
        assert ws.close_code == 1008 and "No message within 1.5 s" in (ws.close_reason or "")
        assert waited < 2 * 1.5  # one timeout, not the path's and then the session's
    finally:
        live.stop()


def test_with_a_key_the_session_needs_it_unless_sagemaker_authenticated_the_stream(piper_engine: PiperEngine) -> None:
    keyed = start_server(Settings(api_key="k3y"), engine=piper_engine)
    trusted = start_server(Settings(api_key="k3y", sagemaker=True), engine=piper_engine)
    try:
        with websockets.sync.client.connect(bidi_url(keyed)) as ws:
            send_event(ws, "input_text.done")
            refusal = json.loads(ws.recv(timeout=30))
            with pytest.raises(websockets.exceptions.ConnectionClosedError):
                ws.recv(timeout=30)
        assert refusal["error"]["code"] == "unauthorized" and ws.close_code == 1008
        refused = httpx.post(f"{keyed.url}/v1/magpie/invocations", json={"text": "Hi."}, timeout=30)
        assert refused.status_code == 401 and set(refused.json()) == {"error"}  # the wrapper's own error shape
        for server, query in ((keyed, "?api_key=k3y"), (trusted, "")):
            with websockets.sync.client.connect(bidi_url(server, query)) as ws:
                send_event(ws, "input_text.done")
                assert read_until(ws, "conversation.item.speech.completed")[0]["type"] == "conversation.created"
    finally:
        keyed.stop()
        trusted.stop()


# ----- HTTP: /invocations ---------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [16000, 24000, None])
def test_invocations_with_magpies_body_answers_raw_pcm_at_its_rate(seeded: LiveServer, rate: int | None) -> None:
    body: dict[str, Any] = {"text": FIRST, "voice_name": PIPECAT_VOICE, "language_code": "en-US"}
    if rate is not None:
        body["sample_rate_hz"] = rate
    headers = {"Accept": "application/octet-stream"}  # what pipecat's service sends, as SageMaker forwards it
    response = httpx.post(f"{seeded.url}/invocations", json=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/octet-stream"
    expected_rate = rate or p.DEFAULT_SAMPLE_RATE_HZ
    assert response.content == http_pcm(seeded, FIRST, expected_rate)
    samples = pcm_to_float(response.content)
    assert float((samples**2).mean() ** 0.5) > 0.02 and float(abs(samples).max()) < 1.0  # speech, not silence


def test_a_body_with_neither_input_nor_text_gets_the_default_routes_error(seeded: LiveServer) -> None:
    response = httpx.post(f"{seeded.url}/invocations", json={"voice_name": PIPECAT_VOICE}, timeout=30)
    assert response.status_code == 400
    error = response.json()["error"]
    assert "input" in error["message"] and error["code"] == 400


def test_a_route_attribute_still_wins_over_the_body(seeded: LiveServer) -> None:
    headers = {"X-Amzn-SageMaker-Custom-Attributes": "route=/v1/audio/speech"}
    response = httpx.post(f"{seeded.url}/invocations", json={"text": FIRST}, headers=headers, timeout=30)
    assert response.status_code == 400 and "input" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"text": ""}, 400, "text field is required"),
        ({"text": "?!"}, 400, "nothing to speak"),
        ({"text": FIRST, "voice_name": "nobody-here"}, 404, "nobody-here"),
        ({"text": FIRST, "sample_rate_hz": 1000}, 400, "sample_rate"),
        ({"text": FIRST, "language_code": "ja-JP"}, 400, "Japanese"),
    ],
)
def test_magpie_http_errors_are_the_wrappers_shape(seeded: LiveServer, body: dict[str, Any], status: int,
                                                   needle: str) -> None:  # fmt: skip
    response = httpx.post(f"{seeded.url}/invocations", json=body, timeout=30)
    assert response.status_code == status
    assert set(response.json()) == {"error"} and needle in response.json()["error"]
