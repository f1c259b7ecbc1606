"""Looking up a saved voice by name: a name the library lacks is answered without a worker thread, and every
write — through the API, or by another process on the same data dir — is seen by the next request.

On Piper a found saved voice is refused with "cannot clone" (Piper stores voices but cannot speak with
them), and a name that is neither saved nor built in is a 404: the two answers tell found from not found.
The library's ``offloaded`` counter counts the calls it hands to worker threads.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
from voice_testing import upload, wav_clip

from speakwire.voices.changes import NO_DATABASE, change_marker
from support.live_server import LiveServer

OTHER_PROCESS = textwrap.dedent(
    """
    import sys
    from speakwire.voices.audio import normalise_reference
    from speakwire.voices.fields import voice_fields
    from speakwire.voices.store import VoiceStore

    data_dir, action, name, clip = sys.argv[1:5]
    with VoiceStore(data_dir) as store:
        if action == "add":
            store.add(voice_fields(name=name, consent="Agreed."), normalise_reference(open(clip, "rb").read()))
        else:
            store.delete(name)
    """
)


def speak(server: LiveServer, voice: str) -> httpx.Response:
    body = {"input": "Hello.", "voice": voice, "response_format": "wav"}
    return httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)


def found(response: httpx.Response) -> bool:
    """Whether the request used a saved voice (on Piper: refused as one), or found no such voice (a 404)."""
    if response.status_code == 400 and "cannot clone" in response.json()["error"]["message"]:
        return True
    assert response.status_code == 404 and "does not exist" in response.json()["error"]["message"], response.text
    return False


def offloaded(server: LiveServer) -> int:
    return int(server.state.voices.offloaded)


def in_other_process(data_dir: Path, action: str, name: str, clip: Path) -> None:
    args = [sys.executable, "-c", OTHER_PROCESS, str(data_dir), action, name, str(clip)]
    result = subprocess.run(args, capture_output=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr.decode()


def test_a_name_the_library_lacks_costs_no_thread_whether_it_is_empty_or_not(library_server: LiveServer) -> None:
    before = offloaded(library_server)
    assert not found(speak(library_server, "nobody"))
    assert speak(library_server, "alloy").status_code == 200  # OpenAI's voice: Piper's default, as before
    assert offloaded(library_server) == before

    assert upload(library_server, "jane", wav_clip()).status_code == 200
    after_save = offloaded(library_server)
    for _ in range(3):
        assert not found(speak(library_server, "nobody"))
        assert speak(library_server, "alloy").status_code == 200
    assert offloaded(library_server) == after_save


def test_a_voice_saved_through_the_api_is_found_by_the_next_request_and_a_deleted_one_is_not(
    library_server: LiveServer,
) -> None:
    assert not found(speak(library_server, "Jane"))
    assert upload(library_server, "jane", wav_clip()).status_code == 200
    before = offloaded(library_server)
    assert found(speak(library_server, "Jane")) and found(speak(library_server, " JANE "))  # any case, as before
    assert offloaded(library_server) > before  # a saved name still loads off the loop

    assert httpx.delete(f"{library_server.url}/v1/audio/voices/jane").status_code == 200
    assert not found(speak(library_server, "jane"))


def test_an_imported_voice_is_found_by_the_next_request(library_server: LiveServer) -> None:
    assert upload(library_server, "source", wav_clip()).status_code == 200
    data = httpx.get(f"{library_server.url}/v1/audio/voices/source/export").content
    files = {"file": ("voice.swv", data, "application/zip")}
    imported = httpx.post(f"{library_server.url}/v1/audio/voices/import", data={"name": "copy"}, files=files)
    assert imported.status_code == 200, imported.text
    assert found(speak(library_server, "copy"))


def test_writes_by_another_process_on_the_data_dir_are_seen_by_the_next_request(
    library_server: LiveServer, data_dir: Path, tmp_path: Path
) -> None:
    clip = tmp_path / "ref.wav"
    clip.write_bytes(wav_clip())
    in_other_process(data_dir, "add", "elsewhere", clip)  # the library did not exist when the server started
    assert found(speak(library_server, "elsewhere"))
    in_other_process(data_dir, "add", "second", clip)
    assert found(speak(library_server, "second"))

    in_other_process(data_dir, "delete", "elsewhere", clip)
    before = offloaded(library_server)
    assert not found(speak(library_server, "elsewhere"))
    assert offloaded(library_server) == before + 1  # the names, read again once after the change
    assert not found(speak(library_server, "nobody"))
    assert offloaded(library_server) == before + 1


def test_a_library_in_wal_mode_is_still_looked_up_right_through_sqlite(
    library_server: LiveServer, data_dir: Path
) -> None:
    assert upload(library_server, "jane", wav_clip()).status_code == 200
    db = sqlite3.connect(data_dir / "voices" / "library.sqlite3")  # WAL commits leave the counter alone
    try:
        assert db.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
    finally:
        db.close()
    assert change_marker(data_dir / "voices" / "library.sqlite3") is None
    assert found(speak(library_server, "jane")) and not found(speak(library_server, "nobody"))
    assert httpx.delete(f"{library_server.url}/v1/audio/voices/jane").status_code == 200
    assert not found(speak(library_server, "jane"))


def test_the_change_marker_moves_with_every_commit_from_any_connection_and_reads_nothing_into_being(
    tmp_path: Path,
) -> None:
    database = tmp_path / "voices" / "library.sqlite3"
    assert change_marker(database) == NO_DATABASE and not (tmp_path / "voices").exists()
    tmp_path.joinpath("voices").mkdir()
    seen = []
    db = sqlite3.connect(database, isolation_level=None)
    try:
        db.execute("CREATE TABLE t (x)")
        seen.append(change_marker(database))
        for value in range(3):
            db.execute("INSERT INTO t VALUES (?)", (value,))
            seen.append(change_marker(database))
        db.execute("SELECT * FROM t").fetchall()  # a read commits nothing
        seen.append(change_marker(database))
    finally:
        db.close()
    assert None not in seen and len(set(seen[:4])) == 4 and seen[4] == seen[3]
