"""Saved voices outlive the process, and a crash at any step leaves a whole voice or none — never half.

Crashes are real: a child process saves (or deletes) a voice and dies with ``os._exit``
at a chosen step, with nothing cleaned up on the way out; then a server starts on the
same data dir and must show a consistent library with the leftovers gone.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
from voice_testing import upload, wav_clip

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from speakwire.voices.audio import normalise_reference
from speakwire.voices.fields import voice_fields
from speakwire.voices.store import VoiceStore
from support.live_server import LiveServer, start_server

CRASHING_CHILD = textwrap.dedent(
    """
    import os, sys
    from speakwire.voices import store as store_module
    from speakwire.voices.audio import normalise_reference
    from speakwire.voices.fields import voice_fields

    data_dir, action, step, when, clip, name = sys.argv[1:7]
    target = store_module if step == "_write_file" else store_module.VoiceStore
    original = getattr(target, step)

    def crashing(*args, **kwargs):
        if step == "_write_file":  # a torn write: half the bytes, then the power goes
            path, data = args
            with open(path, "wb") as f:
                f.write(data[: len(data) // 2])
            os._exit(17)
        if when == "after":
            original(*args, **kwargs)
        os._exit(17)

    setattr(target, step, crashing)
    store = store_module.VoiceStore(data_dir).open()
    if action == "add":
        audio = normalise_reference(open(clip, "rb").read())
        store.add(voice_fields(name=name, consent="Recorded by the tester."), audio)
    else:
        store.delete(name)
    os._exit(0)
    """
)


def crash_child(data_dir: Path, action: str, step: str, when: str, clip: Path, name: str = "crashy") -> None:
    """Save (or delete) voice ``name`` in a child process that dies at ``step`` (before or after it runs)."""
    args = [sys.executable, "-c", CRASHING_CHILD, str(data_dir), action, step, when, str(clip), name]
    result = subprocess.run(args, capture_output=True, timeout=120, check=False)
    assert result.returncode == 17, result.stderr.decode()


def restarted(piper_engine: PiperEngine, data_dir: Path) -> LiveServer:
    return start_server(Settings(data_dir=str(data_dir)), engine=piper_engine)


def names(server: LiveServer) -> list[str]:
    return [v["name"] for v in httpx.get(f"{server.url}/v1/audio/voices").json()["uploaded_voices"]]


def library_files(data_dir: Path) -> dict[str, list[str]]:
    root = data_dir / "voices"
    return {sub: sorted(p.name for p in (root / sub).iterdir()) for sub in ("items", "staging", "trash")}


def test_every_voice_and_its_metadata_survive_a_restart(piper_engine: PiperEngine, data_dir: Path) -> None:
    first = restarted(piper_engine, data_dir)
    upload(first, "Narrator", wav_clip(3.0), ref_text="Once upon a time.", language="English")
    upload(first, "whisper", wav_clip(1.5), speaker_description="soft")
    before = httpx.get(f"{first.url}/v1/audio/voices").json()["uploaded_voices"]
    first.stop()

    second = restarted(piper_engine, data_dir)
    try:
        after = httpx.get(f"{second.url}/v1/audio/voices").json()["uploaded_voices"]
        assert after == before and [v["name"] for v in after] == ["Narrator", "whisper"]
        assert httpx.get(f"{second.url}/v1/audio/voices/narrator").json()["voice"]["ref_text"] == "Once upon a time."
    finally:
        second.stop()


def test_a_failure_between_writing_the_files_and_committing_leaves_nothing(
    library_server: LiveServer, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_commit(self: VoiceStore, voice: object) -> None:
        raise OSError("disk went away")

    monkeypatch.setattr(VoiceStore, "_commit", failing_commit)
    response = upload(library_server, "half", wav_clip())
    assert response.status_code == 500
    monkeypatch.undo()
    assert names(library_server) == []
    assert library_files(data_dir) == {"items": [], "staging": [], "trash": []}
    assert upload(library_server, "half", wav_clip()).status_code == 200  # the name was never taken


@pytest.mark.parametrize(
    ("step", "when", "survives"),
    [
        ("_write_file", "during", False),  # torn audio file in staging
        ("_publish", "before", False),  # complete files in staging, not yet moved
        ("_commit", "before", False),  # files moved into items/, no row
        ("_commit", "after", True),  # row committed: the voice exists, whole
    ],
)
def test_a_crash_while_saving_leaves_a_whole_voice_or_none_and_a_restart_cleans_up(
    piper_engine: PiperEngine, data_dir: Path, tmp_path: Path, step: str, when: str, survives: bool
) -> None:
    clip = tmp_path / "ref.wav"
    clip.write_bytes(wav_clip(2.0))
    crash_child(data_dir, "add", step, when, clip)
    assert any(library_files(data_dir).values())  # the crash left something on disk

    server = restarted(piper_engine, data_dir)
    try:
        assert names(server) == (["crashy"] if survives else [])
        files = library_files(data_dir)
        assert files["staging"] == [] and files["trash"] == []
        assert len(files["items"]) == (1 if survives else 0)
        if survives:
            voice = httpx.get(f"{server.url}/v1/audio/voices/crashy").json()["voice"]
            assert voice["duration"] == pytest.approx(2.0)
        else:
            assert upload(server, "crashy", wav_clip()).status_code == 200
    finally:
        server.stop()


def test_a_crash_while_deleting_leaves_the_voice_gone_and_a_restart_removes_its_files(
    piper_engine: PiperEngine, data_dir: Path, tmp_path: Path
) -> None:
    clip = tmp_path / "ref.wav"
    clip.write_bytes(wav_clip(2.0))
    crash_child(data_dir, "add", "_commit", "after", clip)
    crash_child(data_dir, "delete", "_discard", "before", clip)  # row deleted, files still there
    assert len(library_files(data_dir)["items"]) == 1

    server = restarted(piper_engine, data_dir)
    try:
        assert names(server) == []
        assert library_files(data_dir) == {"items": [], "staging": [], "trash": []}
    finally:
        server.stop()


def test_a_voice_whose_files_vanished_is_dropped_at_restart(piper_engine: PiperEngine, data_dir: Path) -> None:
    first = restarted(piper_engine, data_dir)
    upload(first, "kept", wav_clip())
    upload(first, "lost", wav_clip())
    first.stop()
    with VoiceStore(data_dir) as store:
        lost = store.get("lost")
    (data_dir / "voices" / "items" / lost.id / "audio.flac").unlink()

    second = restarted(piper_engine, data_dir)
    try:
        assert names(second) == ["kept"]
        assert httpx.get(f"{second.url}/v1/audio/voices/lost").status_code == 404
    finally:
        second.stop()


def test_recovery_waits_while_another_process_has_the_library_open(
    piper_engine: PiperEngine, data_dir: Path, tmp_path: Path
) -> None:
    clip = tmp_path / "ref.wav"
    clip.write_bytes(wav_clip(2.0))
    with VoiceStore(data_dir) as other:  # e.g. `speakwire voices add` running, possibly mid-write
        other.add(voice_fields(name="kept", consent="Agreed."), normalise_reference(clip.read_bytes()))
        crash_child(data_dir, "add", "_commit", "before", clip)  # leaves an orphan directory in items/
        server = restarted(piper_engine, data_dir)
        try:
            assert names(server) == ["kept"]
            assert len(library_files(data_dir)["items"]) == 2  # the orphan may be another's write: left alone
        finally:
            server.stop()
    server = restarted(piper_engine, data_dir)
    try:
        assert names(server) == ["kept"]
        assert len(library_files(data_dir)["items"]) == 1  # alone now: cleaned up
    finally:
        server.stop()
