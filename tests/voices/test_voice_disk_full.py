"""A full disk while a voice is saved: 507 with the reason, the library as it was, and the server serving on.

The disk is real: a small tmpfs of the test's own, filled with a filler file until exactly
the space under test is left, so ENOSPC (and SQLite's "database or disk is full") comes
from the kernel at whichever write reaches it first — the audio file, SQLite's journal or
its database. Mounting needs root (CAP_SYS_ADMIN); elsewhere these tests skip, saying so.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from voice_testing import upload, wav_clip
from websockets.asyncio.client import connect

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from speakwire.voices.audio import normalise_reference
from speakwire.voices.fields import VoiceFields
from speakwire.voices.s3 import S3Location
from speakwire.voices.shared import SharedVoiceStore
from speakwire.voices.store import PromptFile
from support.live_server import LiveServer, start_server
from support.s3_server import LoopbackS3

DISK_BYTES = 2 * 1024 * 1024
PAGE = 4096
"""tmpfs hands out space a page at a time."""
CLIP_S = 1.2


@pytest.fixture(scope="module")
def disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A ``DISK_BYTES`` tmpfs mounted for these tests alone."""
    if shutil.which("mount") is None:
        pytest.skip("no mount command here: the full-disk tests need one (and root) to mount a small tmpfs")
    mount_point = tmp_path_factory.mktemp("disk")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES},mode=0755", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "--lazy", str(mount_point)], check=False)


@pytest.fixture(scope="module")
def server(piper_engine: PiperEngine, disk: Path) -> Iterator[LiveServer]:
    """One server on the small disk for every test here (each names its own voices)."""
    live = start_server(Settings(data_dir=str(disk / "data")), engine=piper_engine)
    yield live
    live.stop()


@pytest.fixture(autouse=True)
def room_after_each_test(disk: Path) -> Iterator[None]:
    yield
    space_back(disk)


def free_bytes(disk: Path) -> int:
    stat = os.statvfs(disk)
    return stat.f_bavail * stat.f_frsize


def leave_free(disk: Path, free: int) -> None:
    """Grow or shrink the filler file until exactly ``free`` bytes (whole pages) are left on the disk."""
    filler = disk / "filler"
    filler.unlink(missing_ok=True)
    room = free_bytes(disk) - free
    assert room >= 0, f"only {free_bytes(disk)} bytes free, wanted {free}"
    with filler.open("wb") as out:
        out.write(b"\xff" * room)  # written, not truncated: a sparse file would take no space
    assert free_bytes(disk) == free


def space_back(disk: Path) -> None:
    (disk / "filler").unlink(missing_ok=True)


def library_state(server: LiveServer, disk: Path) -> tuple[list[dict[str, object]], dict[str, list[str]]]:
    """What a client sees (the listing) and what is on disk (every file under ``voices/``, by folder)."""
    listing = httpx.get(f"{server.url}/v1/audio/voices").json()["uploaded_voices"]
    root = disk / "data" / "voices"
    files = {
        str(folder.relative_to(root)): sorted(p.name for p in folder.iterdir())
        for folder in [root, *sorted(p for p in root.rglob("*") if p.is_dir())]
    }
    return listing, files


def speaks(server: LiveServer) -> bool:
    body = {"input": "Still here.", "voice": "alloy", "response_format": "wav"}
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
    return response.status_code == 200 and response.content[:4] == b"RIFF" and len(response.content) > 1000


def assert_refused_as_full(response: httpx.Response) -> None:
    """507 in the voice routes' error shape (vLLM-Omni's ``success``/``error``, OpenAI's fields beside it)."""
    assert response.status_code == 507, response.text
    body = response.json()
    assert body["success"] is False and body["code"] == 507 and body["type"] == "InsufficientStorageError"
    assert "is full" in body["error"] and "Free some space" in body["error"] and body["message"] == body["error"]


def test_a_save_on_a_full_disk_answers_507_leaves_the_library_as_it_was_and_the_server_serves_on(
    server: LiveServer, disk: Path
) -> None:
    assert upload(server, "kept", wav_clip(CLIP_S, seed=1)).status_code == 200
    before = library_state(server, disk)
    leave_free(disk, 0)

    assert_refused_as_full(upload(server, "newcomer", wav_clip(CLIP_S, seed=2)))
    assert library_state(server, disk) == before  # no partial voice, no temporary file, no row
    assert speaks(server)

    space_back(disk)
    saved = upload(server, "newcomer", wav_clip(CLIP_S, seed=2))  # the name was never taken
    assert saved.status_code == 200, saved.text
    exported = httpx.get(f"{server.url}/v1/audio/voices/newcomer/export")
    audio = zipfile.ZipFile(io.BytesIO(exported.content)).read("audio.flac")
    assert audio == normalise_reference(wav_clip(CLIP_S, seed=2)).flac


def test_at_every_amount_of_space_left_a_save_is_whole_or_refused_with_507_and_nothing_kept(
    server: LiveServer, disk: Path
) -> None:
    """From a page short of the audio file to enough, a page at a time: the disk fills in the audio file, then at
    SQLite's journal or database, and each step must undo itself (no room at all: the test above)."""
    assert upload(server, "kept-too", wav_clip(CLIP_S, seed=1)).status_code == 200
    clip = wav_clip(CLIP_S, seed=3)
    flac_pages = -(-len(normalise_reference(clip).flac) // PAGE)
    answers: list[int] = []
    for pages in range(flac_pages - 1, flac_pages + 8):
        before = library_state(server, disk)
        leave_free(disk, pages * PAGE)
        response = upload(server, "tight", clip)
        answers.append(response.status_code)
        space_back(disk)
        if response.status_code == 200:
            assert httpx.delete(f"{server.url}/v1/audio/voices/tight").status_code == 200
        else:
            assert_refused_as_full(response)
        assert library_state(server, disk) == before, f"{pages} pages free"
    assert answers[0] == 507 and answers[-1] == 200 and set(answers) == {200, 507}, answers
    assert answers[1] == 507, f"none refused once the audio fitted (at SQLite's writes): {answers}"
    assert speaks(server)


def test_a_delete_on_a_full_disk_answers_507_and_keeps_the_voice_whole(server: LiveServer, disk: Path) -> None:
    """SQLite needs room for its journal even to delete: the voice stays, usable, until space is back."""
    clip = wav_clip(CLIP_S, seed=4)
    assert upload(server, "stays", clip).status_code == 200
    before = library_state(server, disk)
    leave_free(disk, 0)

    assert_refused_as_full(httpx.delete(f"{server.url}/v1/audio/voices/stays"))
    assert library_state(server, disk) == before
    exported = httpx.get(f"{server.url}/v1/audio/voices/stays/export")
    assert zipfile.ZipFile(io.BytesIO(exported.content)).read("audio.flac") == normalise_reference(clip).flac

    space_back(disk)
    assert httpx.delete(f"{server.url}/v1/audio/voices/stays").status_code == 200
    assert "stays" not in [voice["name"] for voice in library_state(server, disk)[0]]


def test_a_websocket_voice_add_on_a_full_disk_is_an_insufficient_storage_error_and_the_session_goes_on(
    server: LiveServer, disk: Path
) -> None:
    """Baseten's ``voice.add`` on the speech stream saves through the same library: a full disk is its ``error``
    event with the same reason (``insufficient_storage``, as the HTTP routes' 507), nothing is kept, and the
    same socket then lists the library and, once there is room, saves the voice."""
    clip = base64.b64encode(wav_clip(CLIP_S, seed=3)).decode()
    add = {"type": "voice.add", "name": "socket-voice", "consent": "Recorded and agreed.", "audio_data": clip}
    before = library_state(server, disk)
    leave_free(disk, 0)

    async def exchange() -> list[dict[str, object]]:
        replies = []
        async with connect(server.ws_url, max_size=None) as ws:
            for message in (add, {"type": "voice.list"}):
                await ws.send(json.dumps(message))
                replies.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
            space_back(disk)
            await ws.send(json.dumps(add))
            replies.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
        return replies

    full, listed, saved = asyncio.run(exchange())
    assert (full["type"], full["code"], full["success"]) == ("error", "insufficient_storage", False), full
    assert "is full" in str(full["message"]) and "Free some space" in str(full["message"])
    assert listed["type"] == "voice.listed"
    assert (saved["type"], saved["success"]) == ("voice.added", True), saved
    listing, _ = library_state(server, disk)
    assert [v["name"] for v in listing] == [v["name"] for v in before[0]] + ["socket-voice"]


def test_a_prompt_another_instance_shared_is_used_even_when_this_cache_has_no_room_for_it(
    disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A shared library (S3) caches what this instance reads on its own disk. Should that disk be full, a clone
    # prompt another instance computed is still used as read (it was: the cache's 507 failed the speech request),
    # and is cached once there is room.
    s3 = LoopbackS3().start()
    stores: list[SharedVoiceStore] = []
    try:
        for name, value in s3.env().items():
            monkeypatch.setenv(name, value)
        s3.create_bucket("speakwire-disk-full")
        location = S3Location.parse("s3://speakwire-disk-full/voices")
        prompt = PromptFile("qwen3", "tiny", os.urandom(16 * PAGE))
        elsewhere = SharedVoiceStore.connect(location, tmp_path / "elsewhere").open()
        stores.append(elsewhere)
        voice = elsewhere.add(VoiceFields(name="shared-prompt", consent="test"), normalise_reference(wav_clip(CLIP_S)))
        here = SharedVoiceStore.connect(location, disk / "cache").open()
        stores.append(here)
        found = here.find("shared-prompt")  # the voice comes into this cache while there is room
        assert found is not None and found.id == voice.id
        assert here.read_prompt(found, "qwen3", "tiny") is None  # no prompt yet, anywhere

        assert elsewhere.save_prompt(voice, prompt) is not None  # the other instance computes one and shares it
        leave_free(disk, 4 * PAGE)  # less than the prompt needs here
        assert here.read_prompt(found, "qwen3", "tiny") == prompt.data

        def cached() -> bytes | None:
            voice_here = here.cache.find("shared-prompt")
            assert voice_here is not None  # the voice itself stays cached whole
            return here.cache.read_prompt(voice_here, "qwen3", "tiny")

        assert cached() is None  # not cached, and nothing half-written beside the voice
        assert not [p for p in (disk / "cache").rglob("*.tmp")]

        space_back(disk)
        assert here.read_prompt(found, "qwen3", "tiny") == prompt.data
        assert cached() == prompt.data  # cached now
    finally:
        for store in stores:
            store.close()
        s3.stop()
