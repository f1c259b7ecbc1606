"""One-file voices (.swv): export and import through the API and the CLI, and archives that must be refused."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest
from voice_testing import encoded_clip, upload, wav_clip

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.live_server import LiveServer, start_server

SPEAKWIRE = [sys.executable, "-m", "speakwire"]
SAME_FIELDS = (
    "name",
    "consent",
    "created_at",
    "duration",
    "ref_text",
    "speaker_description",
    "language",
    "file_size",
    "mime_type",
    "x_vector_only_mode",
)


def speakwire(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SPEAKWIRE, *args], capture_output=True, text=True, timeout=120, check=False)


def export(server: LiveServer, name: str) -> httpx.Response:
    return httpx.get(f"{server.url}/v1/audio/voices/{name}/export")


def import_file(server: LiveServer, data: bytes, **form: str) -> httpx.Response:
    files = {"file": ("voice.swv", data, "application/zip")}
    return httpx.post(f"{server.url}/v1/audio/voices/import", data=form, files=files, timeout=60)


def rezip(
    data: bytes, *, drop: str = "", replace: dict[str, bytes] | None = None, add: dict[str, bytes] | None = None
) -> bytes:
    """A copy of an archive with members dropped, replaced or added (a hand-edited or hostile file)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            if info.filename != drop:
                target.writestr(info.filename, (replace or {}).get(info.filename, source.read(info.filename)))
        for name, content in (add or {}).items():
            target.writestr(name, content)
    return out.getvalue()


@pytest.fixture
def other_server(piper_engine: PiperEngine, tmp_path: Path) -> LiveServer:
    live = start_server(Settings(data_dir=str(tmp_path / "other")), engine=piper_engine)
    yield live  # type: ignore[misc]
    live.stop()


def test_a_voice_exported_from_one_server_imports_into_another_unchanged(
    library_server: LiveServer, other_server: LiveServer
) -> None:
    upload(
        library_server,
        "Narrator",
        encoded_clip("mp3", 2.5),
        media_type="audio/mpeg",
        ref_text="Once upon.",
        speaker_description="calm",
        language="English",
    )
    exported = export(library_server, "narrator")
    assert exported.status_code == 200 and exported.headers["content-type"] == "application/zip"
    assert exported.headers["content-disposition"] == 'attachment; filename="Narrator.swv"'
    assert sorted(zipfile.ZipFile(io.BytesIO(exported.content)).namelist()) == ["audio.flac", "metadata.json"]

    imported = import_file(other_server, exported.content)
    assert imported.status_code == 200, imported.text
    original = httpx.get(f"{library_server.url}/v1/audio/voices/Narrator").json()["voice"]
    copy = imported.json()["voice"]
    assert {k: copy[k] for k in SAME_FIELDS} == {k: original[k] for k in SAME_FIELDS}
    again = export(other_server, "Narrator").content
    assert zipfile.ZipFile(io.BytesIO(again)).read("audio.flac") == zipfile.ZipFile(io.BytesIO(exported.content)).read(
        "audio.flac"
    )


def test_an_import_can_rename_and_comes_as_base64_json_too(library_server: LiveServer) -> None:
    upload(library_server, "jane", wav_clip())
    data = export(library_server, "jane").content
    clash = import_file(library_server, data)
    assert clash.status_code == 409 and "already exists" in clash.json()["error"]
    renamed = import_file(library_server, data, name="jane-copy")
    assert renamed.status_code == 200 and renamed.json()["voice"]["name"] == "jane-copy"
    as_json = httpx.post(
        f"{library_server.url}/v1/audio/voices/import", json={"file": base64.b64encode(data).decode(), "name": "jane-3"}
    )
    assert as_json.status_code == 200 and as_json.json()["voice"]["name"] == "jane-3"


def test_sagemaker_imports_a_voice_file_through_invocations(
    library_server: LiveServer, other_server: LiveServer
) -> None:
    upload(library_server, "shipped", wav_clip())
    data = export(library_server, "shipped").content
    headers = {"X-Amzn-SageMaker-Custom-Attributes": "route=/v1/audio/voices/import"}
    response = httpx.post(
        f"{other_server.url}/invocations", json={"file": base64.b64encode(data).decode()}, headers=headers, timeout=60
    )
    assert response.status_code == 200, response.text
    assert response.json()["voice"]["name"] == "shipped"


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("not a zip", "Not a speakwire voice file"),
        ("unknown member", "unexpected members: ../../etc/passwd"),
        ("no audio", "has no audio.flac"),
        ("bad checksum", "checksum mismatch"),
        ("newer version", "format version 2"),
        ("bad name", "Invalid voice name"),
        ("no consent", "consent is required"),
        ("audio not audio", "could not be decoded as audio"),
    ],
)
def test_a_damaged_or_hostile_voice_file_is_refused_with_what_is_wrong(
    library_server: LiveServer, damage: str, says: str
) -> None:
    upload(library_server, "source", wav_clip())
    good = export(library_server, "source").content
    metadata = json.loads(zipfile.ZipFile(io.BytesIO(good)).read("metadata.json"))

    def with_metadata(**changes: object) -> bytes:
        edited = json.loads(json.dumps(metadata))
        for path, value in changes.items():
            section, key = path.split("__")
            edited[section][key] = value
        return rezip(good, replace={"metadata.json": json.dumps(edited).encode()})

    bad = {
        "not a zip": b"PK\x03\x04 but not really a zip",
        "unknown member": rezip(good, add={"../../etc/passwd": b"root"}),
        "no audio": rezip(good, drop="audio.flac"),
        "bad checksum": rezip(good, replace={"audio.flac": wav_clip(2.0, seed=9)}),
        "newer version": rezip(good, replace={"metadata.json": json.dumps({**metadata, "version": 2}).encode()}),
        "bad name": with_metadata(voice__name="../escape"),
        "no consent": with_metadata(voice__consent=""),
        "audio not audio": rezip(
            with_metadata(audio__sha256=None), replace={"audio.flac": b"fLaC but nothing else" * 10}
        ),
    }[damage]
    response = import_file(library_server, bad)
    assert response.status_code == 400, response.text
    assert says in response.json()["error"]
    names = [v["name"] for v in httpx.get(f"{library_server.url}/v1/audio/voices").json()["uploaded_voices"]]
    assert names == ["source"]


def test_the_cli_manages_a_local_library_and_round_trips_a_voice_file(tmp_path: Path) -> None:
    library, copy = tmp_path / "lib", tmp_path / "copy"
    clip = tmp_path / "ref.m4a"
    clip.write_bytes(encoded_clip("m4a-aac", 2.0))
    added = speakwire(
        "voices",
        "add",
        "jane",
        "--audio",
        str(clip),
        "--text",
        "Hello there.",
        "--consent",
        "Recorded by Jane, who agreed.",
        "--language",
        "english",
        "--data-dir",
        str(library),
    )
    assert added.returncode == 0, added.stderr
    assert "saved voice 'jane'" in added.stdout and "with transcript" in added.stdout

    listed = speakwire("voices", "list", "--data-dir", str(library))
    assert listed.returncode == 0 and "jane" in listed.stdout and "English" in listed.stdout

    out = tmp_path / "jane.swv"
    assert speakwire("voices", "export", "JANE", "-o", str(out), "--data-dir", str(library)).returncode == 0
    imported = speakwire("voices", "import", str(out), "--data-dir", str(copy))
    assert imported.returncode == 0, imported.stderr
    entries = json.loads(speakwire("voices", "list", "--json", "--data-dir", str(copy)).stdout)
    assert [(v["name"], v["ref_text"], v["language"]) for v in entries] == [("jane", "Hello there.", "English")]
    assert entries[0]["mime_type"] == "audio/mp4"

    removed = speakwire("voices", "rm", "jane", "--data-dir", str(library))
    assert removed.returncode == 0 and "deleted successfully" in removed.stdout
    missing = speakwire("voices", "rm", "jane", "--data-dir", str(library))
    assert missing.returncode == 1 and "not found" in missing.stderr


def test_the_cli_refuses_a_bad_upload_with_the_servers_message(tmp_path: Path) -> None:
    clip = tmp_path / "short.wav"
    clip.write_bytes(wav_clip(0.4))
    result = speakwire(
        "voices", "add", "jane", "--audio", str(clip), "--consent", "Agreed.", "--data-dir", str(tmp_path / "lib")
    )
    assert result.returncode == 1 and "between 1 and 30 s" in result.stderr


def test_the_cli_ships_a_local_voice_to_a_running_server_and_back(library_server: LiveServer, tmp_path: Path) -> None:
    library = tmp_path / "laptop"
    clip = tmp_path / "ref.ogg"
    clip.write_bytes(encoded_clip("ogg-opus", 2.0))
    assert (
        speakwire(
            "voices",
            "add",
            "laptop-voice",
            "--audio",
            str(clip),
            "--consent",
            "Mine, agreed.",
            "--data-dir",
            str(library),
        ).returncode
        == 0
    )
    out = tmp_path / "laptop-voice.swv"
    assert speakwire("voices", "export", "laptop-voice", "-o", str(out), "--data-dir", str(library)).returncode == 0

    shipped = speakwire("voices", "import", str(out), "--url", library_server.url)
    assert shipped.returncode == 0, shipped.stderr
    listed = speakwire("voices", "list", "--url", library_server.url)
    assert "laptop-voice" in listed.stdout

    back = tmp_path / "back.swv"
    fetched = speakwire("voices", "export", "laptop-voice", "-o", str(back), "--url", library_server.url)
    assert fetched.returncode == 0, fetched.stderr
    original = zipfile.ZipFile(out).read("audio.flac")
    assert zipfile.ZipFile(back).read("audio.flac") == original

    second = tmp_path / "ref2.wav"
    second.write_bytes(wav_clip(1.5))
    added = speakwire(
        "voices", "add", "remote-added", "--audio", str(second), "--consent", "Agreed.", "--url", library_server.url
    )
    assert added.returncode == 0, added.stderr
    assert speakwire("voices", "rm", "remote-added", "--url", library_server.url).returncode == 0
    clash = speakwire("voices", "import", str(out), "--url", library_server.url)
    assert clash.returncode == 1 and "HTTP 409" in clash.stderr and "already exists" in clash.stderr
