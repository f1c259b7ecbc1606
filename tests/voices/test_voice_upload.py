"""Saving voices over the API on a Piper server (which stores voices but cannot speak with them)."""

from __future__ import annotations

import base64
import json

import httpx
import pytest
from voice_testing import FORMATS, data_uri, encoded_clip, upload, wav_clip
from websockets.asyncio.client import connect

from support.live_server import LiveServer

UPLOADED_FIELDS = {
    "name",
    "consent",
    "created_at",
    "duration",
    "ref_text",
    "speaker_description",
    "language",
    "file_size",
    "mime_type",
    "embedding_source",
    "compatibility",
}


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_voice_is_saved_from_a_multipart_upload_in_every_recorder_format(
    library_server: LiveServer, fmt: str
) -> None:
    clip = encoded_clip(fmt, seconds=2.0)
    response = upload(library_server, f"voice-{fmt}", clip, media_type=FORMATS[fmt][2], ref_text="Hello there.")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["success"] is True
    voice = body["voice"]
    assert voice["name"] == f"voice-{fmt}" and voice["ref_text"] == "Hello there."
    assert voice["duration"] == pytest.approx(2.0, abs=0.05)
    assert voice["file_size"] == len(clip) and voice["mime_type"] == FORMATS[fmt][2]


def test_a_voice_is_saved_from_json_with_a_data_uri_or_plain_base64(library_server: LiveServer) -> None:
    clip = encoded_clip("mp3")
    as_uri = httpx.post(
        f"{library_server.url}/v1/audio/voices",
        json={
            "name": "from-uri",
            "consent": "Recorded by Ann, who agreed.",
            "audio_sample": data_uri(clip, "audio/mpeg"),
            "speaker_description": "warm, low",
            "language": "english",
        },
    )
    assert as_uri.status_code == 200, as_uri.text
    assert as_uri.json()["voice"]["mime_type"] == "audio/mpeg"
    assert as_uri.json()["voice"]["language"] == "English"  # canonical spelling
    as_base64 = httpx.post(
        f"{library_server.url}/v1/audio/voices",
        json={
            "name": "from-base64",
            "consent": "Recorded by Ben, who agreed.",
            "audio_sample": base64.b64encode(wav_clip()).decode(),
        },
    )
    assert as_base64.status_code == 200, as_base64.text
    assert as_base64.json()["voice"]["mime_type"] == "audio/wav"  # sniffed from the bytes


def test_the_catalogue_lists_built_in_voices_as_before_and_saved_ones_with_metadata(
    library_server: LiveServer,
) -> None:
    upload(library_server, "Narrator", wav_clip(3.0), ref_text="Once upon a time.", speaker_description="calm")
    upload(library_server, "whisper", wav_clip(1.5))
    catalogue = httpx.get(f"{library_server.url}/v1/audio/voices").json()
    assert catalogue["voices"] == ["en_US-joe-medium"] and catalogue["engine"] == "piper"
    assert {"default_voice", "aliases", "model", "languages", "supports_cloning"} <= set(catalogue)
    saved = {v["name"]: v for v in catalogue["uploaded_voices"]}
    assert list(saved) == ["Narrator", "whisper"]
    narrator, whisper = saved["Narrator"], saved["whisper"]
    assert set(narrator) >= UPLOADED_FIELDS
    assert narrator["duration"] == pytest.approx(3.0, abs=0.01) and narrator["speaker_description"] == "calm"
    assert narrator["x_vector_only_mode"] is False and whisper["x_vector_only_mode"] is True
    compatibility = narrator["compatibility"]
    assert compatibility["engines"] == ["qwen3"] and compatibility["usable_here"] is False
    assert compatibility["prompts"] == [] and "cannot clone" in compatibility["reason"]


def test_one_voice_is_read_and_deleted_by_name_in_any_case(library_server: LiveServer) -> None:
    upload(library_server, "Jane", wav_clip())
    one = httpx.get(f"{library_server.url}/v1/audio/voices/JANE")
    assert one.status_code == 200 and one.json()["voice"]["name"] == "Jane"
    deleted = httpx.delete(f"{library_server.url}/v1/audio/voices/jane")
    assert deleted.status_code == 200
    assert deleted.json() == {"success": True, "message": "Voice 'Jane' deleted successfully"}
    assert httpx.get(f"{library_server.url}/v1/audio/voices").json()["uploaded_voices"] == []
    again = httpx.delete(f"{library_server.url}/v1/audio/voices/jane")
    assert again.status_code == 404
    body = again.json()
    assert body["success"] is False and body["error"] == "Voice 'jane' not found"
    assert body["type"] == "NotFoundError" and body["code"] == 404  # OpenAI's fields, beside vLLM-Omni's
    assert httpx.get(f"{library_server.url}/v1/audio/voices/jane").status_code == 404


def test_a_name_is_taken_whatever_its_case(library_server: LiveServer) -> None:
    assert upload(library_server, "Jane", wav_clip()).status_code == 200
    clash = upload(library_server, "JANE", wav_clip())
    assert clash.status_code == 409
    assert "already exists" in clash.json()["error"]


def test_sagemaker_invocations_save_list_and_delete_voices_with_post_only(library_server: LiveServer) -> None:
    def invoke(route: str, body: object) -> httpx.Response:
        headers = {"X-Amzn-SageMaker-Custom-Attributes": f"route={route}", "Content-Type": "application/json"}
        return httpx.post(f"{library_server.url}/invocations", content=json.dumps(body), headers=headers, timeout=60)

    saved = invoke("/v1/audio/voices", {"name": "sm-voice", "consent": "Agreed.", "audio_sample": data_uri(wav_clip())})
    assert saved.status_code == 200, saved.text
    listed = invoke("/v1/audio/voices", {})  # an empty body lists, as a GET would
    assert listed.status_code == 200 and [v["name"] for v in listed.json()["uploaded_voices"]] == ["sm-voice"]
    assert invoke("/v1/audio/voices/sm-voice", {}).json()["voice"]["name"] == "sm-voice"
    assert invoke("/v1/audio/voices/sm-voice/delete", {}).json()["success"] is True
    assert invoke("/v1/audio/voices", {}).json()["uploaded_voices"] == []


def test_using_a_saved_voice_on_piper_is_refused_with_what_would_work(library_server: LiveServer) -> None:
    upload(library_server, "clone-me", wav_clip(), ref_text="Hi.")
    response = httpx.post(f"{library_server.url}/v1/audio/speech", json={"input": "Hello.", "voice": "clone-me"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "voice"
    assert "saved (cloned) voice" in error["message"] and "cannot clone" in error["message"]
    assert "Qwen3-TTS Base" in error["message"] and "en_US-joe-medium" in error["message"]


async def test_using_a_saved_voice_on_piper_over_the_websocket_is_a_config_error(library_server: LiveServer) -> None:
    upload(library_server, "clone-me", wav_clip(), ref_text="Hi.")
    async with connect(library_server.ws_url) as ws:
        await ws.send(json.dumps({"type": "session.config", "voice": "clone-me", "response_format": "pcm"}))
        event = json.loads(await ws.recv())
    assert event["type"] == "error" and "cannot clone" in event["message"]


def test_built_in_voices_win_over_a_saved_voice_of_the_same_name(library_server: LiveServer) -> None:
    assert upload(library_server, "en_US-joe-medium", wav_clip()).status_code == 200
    body = {"input": "Still Joe.", "voice": "EN_US-joe-medium", "response_format": "wav"}
    response = httpx.post(f"{library_server.url}/v1/audio/speech", json=body)
    assert response.status_code == 200 and response.content[:4] == b"RIFF"


def test_a_server_that_never_saves_a_voice_writes_nothing_to_its_data_dir(library_server: LiveServer, data_dir) -> None:  # type: ignore[no-untyped-def]
    assert httpx.get(f"{library_server.url}/v1/audio/voices").json()["uploaded_voices"] == []
    assert httpx.get(f"{library_server.url}/v1/audio/voices/nobody").status_code == 404
    assert not data_dir.exists()
