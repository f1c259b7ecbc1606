"""What a voice upload must be: a safe name, consent, a real 1–30 s clip under 10 MiB — or a clear 4xx."""

from __future__ import annotations

import io

import httpx
import numpy as np
import pytest
import soundfile as sf
from voice_testing import data_uri, upload, wav_clip

from support.live_server import LiveServer


def saved_names(server: LiveServer) -> list[str]:
    return [v["name"] for v in httpx.get(f"{server.url}/v1/audio/voices").json()["uploaded_voices"]]


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("../x", "Invalid voice name"),
        ("a/b", "Invalid voice name"),
        ("..", "Invalid voice name"),
        (".hidden", "Invalid voice name"),
        ("-rf", "Invalid voice name"),
        ("two words", "Invalid voice name"),
        ("émilie", "Invalid voice name"),
        ("x" * 65, "the limit is 64"),
        ("", "needs a name"),
        ("   ", "needs a name"),
    ],
)
def test_a_bad_name_is_refused_with_the_naming_rule(library_server: LiveServer, name: str, says: str) -> None:
    response = upload(library_server, name, wav_clip())
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["success"] is False and body["param"] == "name"
    assert says in body["error"] and "letters" in body["error"]
    assert saved_names(library_server) == []


def test_the_longest_allowed_name_is_accepted(library_server: LiveServer) -> None:
    name = "v" + "x" * 62 + "9"
    assert upload(library_server, name, wav_clip()).status_code == 200
    assert saved_names(library_server) == [name]


def test_consent_is_required(library_server: LiveServer) -> None:
    files = {"audio_sample": ("ref.wav", wav_clip(), "audio/wav")}
    for form in ({"name": "jane"}, {"name": "jane", "consent": "  "}):
        response = httpx.post(f"{library_server.url}/v1/audio/voices", data=form, files=files)
        assert response.status_code == 400
        assert response.json()["param"] == "consent" and "who recorded" in response.json()["error"]
    assert saved_names(library_server) == []


def test_missing_audio_is_refused_naming_the_field(library_server: LiveServer) -> None:
    response = httpx.post(f"{library_server.url}/v1/audio/voices", json={"name": "jane", "consent": "Agreed."})
    assert response.status_code == 400
    assert response.json()["param"] == "audio_sample" and "required" in response.json()["error"]


@pytest.mark.parametrize(
    ("seconds", "says"), [(32, "audio_sample is 11.7 MiB; the limit is 10 MiB"), (60, "Request body is 22.")]
)
def test_audio_over_10_mib_is_too_large(library_server: LiveServer, seconds: int, says: str) -> None:
    rng = np.random.default_rng(0)
    buffer = io.BytesIO()  # 48 kHz stereo float WAV: 384 KB a second, refused before any decoding
    wave = rng.standard_normal((48_000 * seconds, 2)).astype(np.float32) * 0.1
    sf.write(buffer, wave, 48_000, format="WAV", subtype="FLOAT")
    response = upload(library_server, "huge", buffer.getvalue())
    assert response.status_code == 413
    assert says in response.json()["error"]


@pytest.mark.parametrize(("seconds", "says"), [(0.5, "0.50 s long"), (31.0, "between 1 and 30 s")])
def test_audio_shorter_than_1_s_or_longer_than_30_s_is_refused(
    library_server: LiveServer, seconds: float, says: str
) -> None:
    response = upload(library_server, "odd-length", wav_clip(seconds))
    assert response.status_code == 400
    body = response.json()
    assert body["param"] == "audio_sample" and says in body["error"] and "audio_sample" in body["error"]


def test_a_file_that_is_not_audio_is_refused(library_server: LiveServer) -> None:
    response = upload(library_server, "junk", b"this is not a recording" * 100)
    assert response.status_code == 400
    assert "could not be decoded as audio" in response.json()["error"]


def test_bad_base64_in_json_is_refused(library_server: LiveServer) -> None:
    body = {"name": "jane", "consent": "Agreed.", "audio_sample": "%%% not base64 %%%"}
    response = httpx.post(f"{library_server.url}/v1/audio/voices", json=body)
    assert response.status_code == 400 and response.json()["param"] == "audio_sample"


def test_an_unknown_field_is_refused_rather_than_ignored(library_server: LiveServer) -> None:
    body = {"name": "jane", "consent": "Agreed.", "audio_sample": data_uri(wav_clip()), "transcript": "Hello."}
    response = httpx.post(f"{library_server.url}/v1/audio/voices", json=body)
    assert response.status_code == 400
    assert "transcript" in response.json()["error"] and "ref_text" in response.json()["error"]


def test_an_unknown_language_lists_the_valid_ones(library_server: LiveServer) -> None:
    response = upload(library_server, "jane", wav_clip(), language="Klingon")
    assert response.status_code == 400 and "English" in response.json()["error"]


def test_a_body_that_is_not_json_or_a_form_is_refused(library_server: LiveServer) -> None:
    response = httpx.post(
        f"{library_server.url}/v1/audio/voices", content=b"name=jane", headers={"Content-Type": "text/plain"}
    )
    assert response.status_code == 400 and "multipart/form-data" in response.json()["error"]
