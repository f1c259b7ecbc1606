"""The speech stream's protocol object (no I/O) on Baseten's voice.add / voice.list messages."""

from __future__ import annotations

import base64
import json

from speakwire.server.stream import protocol as p

CLIP = b"RIFF" + bytes(64)
ADD = {"type": "voice.add", "name": "jane", "consent": "Jane agreed.", "audio_data": base64.b64encode(CLIP).decode(),
       "audio_format": "wav", "ref_text": "Hello."}  # fmt: skip


def test_voice_messages_are_taken_before_any_session_config() -> None:
    protocol = p.StreamProtocol(None, None)
    added = protocol.receive(json.dumps(ADD))
    assert isinstance(added, p.AddVoice)
    assert added.upload.audio == CLIP and added.upload.mime_type == "audio/wav"
    assert (added.upload.fields.name, added.upload.fields.ref_text) == ("jane", "Hello.")
    assert isinstance(protocol.receive(json.dumps({"type": "voice.list"})), p.ListVoices)
    assert protocol.config is None


def upload_of(message: dict) -> p.VoiceUpload:
    action = p.StreamProtocol(None, None).receive(json.dumps(message))
    assert isinstance(action, p.AddVoice), action
    return action.upload


def test_a_data_uri_names_its_own_media_type_and_formats_map_to_media_types() -> None:
    uri = upload_of({**ADD, "audio_data": "data:audio/flac;base64," + base64.b64encode(CLIP).decode()})
    assert (uri.audio, uri.mime_type) == (CLIP, "audio/flac")
    assert upload_of({**ADD, "audio_format": "MP3"}).mime_type == "audio/mpeg"
    assert upload_of({**ADD, "audio_format": None}).mime_type is None  # the library sniffs it


def test_a_bad_voice_add_is_an_error_reply_naming_its_field_and_the_session_goes_on() -> None:
    protocol = p.StreamProtocol(None, None)
    for message, param in [({**ADD, "consent": None}, "consent"), ({**ADD, "audio_data": "%%%"}, "audio_data"),
                           ({**ADD, "audio_data": None}, "audio_data"), ({**ADD, "name": ""}, "name"),
                           ({**ADD, "voice_id": "x"}, "voice_id")]:  # fmt: skip
        reply = protocol.receive(json.dumps(message))
        assert isinstance(reply, p.Reply), message
        assert (reply.event["type"], reply.event["code"], reply.event["param"]) == ("error", "invalid_voice", param)
        assert reply.event["success"] is False
    assert isinstance(protocol.receive(json.dumps(ADD)), p.AddVoice)


def test_without_the_key_voice_messages_are_refused_as_a_session_config_is() -> None:
    for kind in ({"type": "voice.list"}, ADD, {"type": "session.config"}):
        refused = p.StreamProtocol("sekret", None).receive(json.dumps(kind))
        assert isinstance(refused, p.Fatal)
        assert (refused.event["code"], refused.code) == ("unauthorized", p.CLOSE_POLICY)
    keyed = p.StreamProtocol("sekret", None).receive(json.dumps({**ADD, "api_key": "sekret"}))
    assert isinstance(keyed, p.AddVoice)
    assert isinstance(p.StreamProtocol("sekret", "sekret").receive(json.dumps({"type": "voice.list"})), p.ListVoices)


def test_only_a_voice_add_may_be_larger_than_a_config() -> None:
    big = "A" * (p.MAX_CONFIG_BYTES + 4)  # valid base64, over the configuration limit
    assert isinstance(p.StreamProtocol(None, None).receive(json.dumps({**ADD, "audio_data": big})), p.AddVoice)
    config = p.StreamProtocol(None, None).receive(json.dumps({"type": "session.config", "ref_audio": big}))
    assert isinstance(config, p.Fatal) and config.code == p.CLOSE_TOO_BIG
    huge = "A" * (p.MAX_VOICE_ADD_BYTES + 4)
    too_big = p.StreamProtocol(None, None).receive(json.dumps({**ADD, "audio_data": huge}))
    assert isinstance(too_big, p.Fatal) and too_big.code == p.CLOSE_TOO_BIG
