"""Saved voices survive a server killed at any instant (SIGKILL) while voices are added, imported and deleted.

Each round starts a real ``speakwire serve`` process on one data dir, lets a few clients add
voices (multipart uploads), import them (``.swv`` files) and delete them at the same time, and
SIGKILLs the server at a random instant. The next server on that data dir must start, and then:

* every voice whose save was answered 200 is listed, and none whose delete was;
* every listed voice is whole: ``GET`` finds it, it exports, its audio is byte for byte what was
  uploaded (normalised) and its metadata what was sent; on the engine that clones, it speaks;
* nothing is half-written: no staging or trash left, one directory per listed voice holding only
  its own files, no temporary file; a name whose save or delete was cut off can be saved again.

The first server and the last run the tiny random Qwen3-TTS Base checkpoint
(``tests/qwen3/tiny_checkpoint.py``), which clones on CPU: the first round's uploads store a clone
prompt with the audio, the voice every import copies carries one, and the last server speaks with
every listed voice. The rounds between run the embedded Piper voice, which stores voices but cannot
clone, because it restarts in seconds where Qwen3 takes several times as long (the voices are
exported there). Without the ``[qwen]`` extra every server is Piper's.

Kill instants and the mix of operations come from one seed, printed first (``SPEAKWIRE_CRASH_SEED=<n>``
replays them; the server's own timing still varies).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import soundfile as sf
from voice_testing import wav_clip

from speakwire.voices.audio import normalise_reference
from support.live_server import free_port

pytestmark = pytest.mark.timeout(900)  # five server starts (two of them Qwen3) on a slow CI machine

ROUNDS = 4
CLIENTS = 3
KILL_WITHIN_S = 1.5
"""Each round's kill comes at a random instant this long at most after the clients start."""
SEED_ENV = "SPEAKWIRE_CRASH_SEED"
SPEAK = {"input": "Hello.", "response_format": "pcm", "max_new_tokens": 4, "seed": 3}
"""Random weights rarely stop on their own: a few frames are enough to prove the voice loads and speaks."""
LIBRARY_FILES = {".lock", "library.sqlite3", "items", "staging", "trash"}
PROMPT_FILE = re.compile(r"prompt-[0-9a-f]{32}\.pt")


@dataclass(frozen=True)
class Sent:
    """What a client asked to save under a name: what the listed voice must hold."""

    audio_sha256: str
    """Of the normalised FLAC the library keeps."""
    consent: str
    ref_text: str | None


@dataclass(frozen=True)
class Outcome:
    op: str
    """``add``, ``import`` or ``delete``."""
    name: str
    status: int | None
    """None: no answer, the server died first."""


@dataclass
class Library:
    """What the clients know: what was sent under each name, and which names are listed as far as they know."""

    sent: dict[str, Sent] = field(default_factory=dict)
    listed: set[str] = field(default_factory=set)
    archive: bytes = b""
    """An exported voice that imports copy, under new names."""
    archive_sent: Sent | None = None


class ServerProcess:
    """``speakwire serve`` on ``data_dir`` and a free loopback port, logging to a file."""

    def __init__(self, data_dir: Path, log: Path, engine_args: list[str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        args = ["serve", "--host", "127.0.0.1", "--port", str(self.port), "--data-dir", str(data_dir)]
        args += ["--max-streams", "8", *engine_args]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the tiny model gains nothing from more on 2 cores
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "speakwire", *args], stdout=out, stderr=subprocess.STDOUT, env=env
            )
        try:
            self._wait_ready(deadline=time.monotonic() + 180)
        except BaseException:
            self.stop()  # a server that failed to start is not left running
            raise

    def _wait_ready(self, *, deadline: float) -> None:
        while True:
            assert self.process.poll() is None, f"the server exited at start:\n{self.log.read_text()}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/ready", timeout=2).status_code == 200:
                    return
            assert time.monotonic() < deadline, f"the server did not become ready:\n{self.log.read_text()}"
            time.sleep(0.1)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.kill()


@pytest.fixture(scope="module")
def cloning_args(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """``serve`` flags for the tiny Qwen3 Base model where the ``[qwen]`` extra is installed; else none."""
    from speakwire.engines.qwen3.compat import import_qwen_tts
    from speakwire.errors import MissingExtraError

    try:
        import_qwen_tts()
    except MissingExtraError:
        return []
    import torch

    torch.set_num_threads(1)
    from qwen3.tiny_checkpoint import build_tiny_checkpoints  # tests/qwen3, as a namespace package

    base = build_tiny_checkpoints(tmp_path_factory.mktemp("qwen3-tiny"))["base"]
    return ["--engine", "qwen3", "--model", str(base), "--device", "cpu"]


def test_voices_are_whole_or_absent_after_every_kill_and_the_server_starts_cleanly(
    tmp_path: Path, cloning_args: list[str]
) -> None:
    seed = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(2**32))
    print(f"crash test seed: {SEED_ENV}={seed}")
    rng = random.Random(seed)
    data_dir = tmp_path / "data"
    library = Library()

    def engine_of(server_no: int) -> list[str]:
        return cloning_args if server_no in (0, ROUNDS) else []  # Qwen3 first and last, Piper between

    server = ServerProcess(data_dir, tmp_path / "server-0.log", engine_of(0))
    try:
        origin = post_voice(server.url, library, "origin", random.Random(seed))
        assert origin.status_code == 200, origin.text
        library.listed.add("origin")
        library.archive = httpx.get(f"{server.url}/v1/audio/voices/origin/export", timeout=60).content
        library.archive_sent = library.sent["origin"]
        for round_no in range(1, ROUNDS + 1):
            outcomes = asyncio.run(churn_until_killed(server, library, rng, round_no))
            engine = engine_of(round_no)
            server = ServerProcess(data_dir, tmp_path / f"server-{round_no}.log", engine)  # the same data dir
            listing = check_library(server.url, data_dir, library, outcomes, clones=bool(engine))
            resave_cut_off(server.url, library, outcomes, listing, rng)
            log = server.log.read_text()
            assert "Traceback" not in log, log
            print(round_summary(round_no, outcomes, listing, log))
    finally:
        server.stop()


def round_summary(round_no: int, outcomes: list[Outcome], listing: list[dict[str, Any]], log: str) -> str:
    """What a round did, for the test's output: answers, cut-off requests, what recovery removed."""
    answered = sum(o.status is not None for o in outcomes)
    recovered = re.findall(r"recovered from an interrupted write in \S+: removed (.*)", log)
    return (
        f"round {round_no}: {answered} answered, {len(outcomes) - answered} cut off by the kill, {len(listing)} "
        f"voices listed after the restart; recovery removed: {'; '.join(recovered) or 'nothing'}"
    )


async def churn_until_killed(
    server: ServerProcess, library: Library, rng: random.Random, round_no: int
) -> list[Outcome]:
    """Clients add, import and delete voices until the server is SIGKILLed at a random instant."""
    outcomes: list[Outcome] = []
    kill_at = rng.uniform(0.05, KILL_WITHIN_S)
    client_rngs = [random.Random(rng.random()) for _ in range(CLIENTS)]
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
        clients = [
            asyncio.create_task(churn(client, library, client_rngs[i], f"r{round_no}c{i}", outcomes))
            for i in range(CLIENTS)
        ]
        await asyncio.sleep(kill_at)
        server.process.send_signal(signal.SIGKILL)
        await asyncio.gather(*clients)
    return outcomes


async def churn(
    client: httpx.AsyncClient, library: Library, rng: random.Random, prefix: str, outcomes: list[Outcome]
) -> None:
    for n in range(10_000):
        op = rng.choices(("add", "import", "delete"), weights=(3, 2, 2))[0]
        if op == "delete" and not library.listed:
            op = "add"
        name = f"{prefix}n{n}"
        if op == "add":
            clip, sent = clip_for(rng, name)
            library.sent[name] = sent
            files = {"audio_sample": ("ref.wav", clip, "audio/wav")}
            request = client.post("/v1/audio/voices", data=voice_form(name, sent), files=files)
        elif op == "import":
            name += "-copy"
            assert library.archive_sent is not None
            library.sent[name] = library.archive_sent
            files = {"file": ("voice.swv", library.archive, "application/zip")}
            request = client.post("/v1/audio/voices/import", data={"name": name}, files=files)
        else:
            name = rng.choice(sorted(library.listed))
            library.listed.discard(name)
            request = client.delete(f"/v1/audio/voices/{name}")
        try:
            response = await request
        except httpx.TransportError:
            outcomes.append(Outcome(op, name, None))
            return
        outcomes.append(Outcome(op, name, response.status_code))
        assert response.status_code == 200, (op, name, response.text)
        if op != "delete":
            library.listed.add(name)


def clip_for(rng: random.Random, name: str) -> tuple[bytes, Sent]:
    """A reference clip of its own for ``name`` (so its stored audio tells it from every other voice)."""
    clip = wav_clip(rng.uniform(1.0, 2.0), seed=rng.randrange(2**31))
    ref_text = rng.choice((None, f"The words {name} said."))
    sent = Sent(normalise_reference(clip).sha256, f"{name} recorded this and agreed to its cloning.", ref_text)
    return clip, sent


def voice_form(name: str, sent: Sent) -> dict[str, str]:
    return {"name": name, "consent": sent.consent, **({"ref_text": sent.ref_text} if sent.ref_text else {})}


def post_voice(url: str, library: Library, name: str, rng: random.Random) -> httpx.Response:
    """Save a voice called ``name`` from a clip of its own, as a client would (multipart)."""
    clip, sent = clip_for(rng, name)
    library.sent[name] = sent
    files = {"audio_sample": ("ref.wav", clip, "audio/wav")}
    return httpx.post(f"{url}/v1/audio/voices", data=voice_form(name, sent), files=files, timeout=120)


def check_library(
    url: str, data_dir: Path, library: Library, outcomes: list[Outcome], *, clones: bool
) -> list[dict[str, Any]]:
    """Everything the module docstring promises after a restart; the listing."""
    listing: list[dict[str, Any]] = httpx.get(f"{url}/v1/audio/voices", timeout=60).json()["uploaded_voices"]
    names = {voice["name"] for voice in listing}
    saved = {o.name for o in outcomes if o.op != "delete" and o.status == 200}
    deleted = {o.name for o in outcomes if o.op == "delete" and o.status == 200}
    deleting = {o.name for o in outcomes if o.op == "delete"}  # answered or cut off: may be gone
    assert saved - deleting <= names, f"saved (200) but gone after the kill: {sorted(saved - deleting - names)}"
    assert not deleted & names, f"deleted (200) but listed after the kill: {sorted(deleted & names)}"
    assert names <= set(library.sent), f"voices no client saved: {sorted(names - set(library.sent))}"
    check_files(data_dir, len(listing))
    for voice in listing:
        check_whole(url, voice, library.sent[voice["name"]], clones=clones)
    library.listed = set(names)
    return listing


def check_files(data_dir: Path, voices: int) -> None:
    """No staging, trash or temporary file; one directory per listed voice with its audio and prompts only."""
    root = data_dir / "voices"
    assert {p.name for p in root.iterdir()} == LIBRARY_FILES
    assert [p.name for p in (root / "staging").iterdir()] == []
    assert [p.name for p in (root / "trash").iterdir()] == []
    items = list((root / "items").iterdir())
    assert len(items) == voices, sorted(p.name for p in items)
    for item in items:
        files = {p.name for p in item.iterdir()}
        assert "audio.flac" in files and all(PROMPT_FILE.fullmatch(f) for f in files - {"audio.flac"}), files


def check_whole(url: str, voice: dict[str, Any], sent: Sent, *, clones: bool) -> None:
    name = voice["name"]
    found = httpx.get(f"{url}/v1/audio/voices/{name}", timeout=60)
    assert found.status_code == 200 and found.json()["voice"] == voice, found.text
    assert (voice["consent"], voice["ref_text"]) == (sent.consent, sent.ref_text)
    exported = httpx.get(f"{url}/v1/audio/voices/{name}/export", timeout=60)
    assert exported.status_code == 200, exported.text
    archive = zipfile.ZipFile(io.BytesIO(exported.content))
    metadata = json.loads(archive.read("metadata.json"))
    audio = archive.read("audio.flac")
    assert hashlib.sha256(audio).hexdigest() == sent.audio_sha256 == metadata["audio"]["sha256"], name
    assert sf.info(io.BytesIO(audio)).duration == pytest.approx(voice["duration"], abs=0.002)
    assert (metadata["voice"]["name"], metadata["voice"]["consent"]) == (name, sent.consent)
    stored_prompts = {(p["engine"], p["model"]) for p in voice["compatibility"]["prompts"]}
    assert {(p["engine"], p["model"]) for p in metadata["prompts"]} == stored_prompts
    if clones:
        spoken = httpx.post(f"{url}/v1/audio/speech", json={**SPEAK, "voice": name}, timeout=120)
        assert spoken.status_code == 200 and len(spoken.content) > 0, (name, spoken.text)


def resave_cut_off(
    url: str, library: Library, outcomes: list[Outcome], listing: list[dict[str, Any]], rng: random.Random
) -> None:
    """A name whose save or delete the kill cut off, and that is not listed, is not blocked: it saves again."""
    names = {voice["name"] for voice in listing}
    for outcome in outcomes:
        if outcome.status is None and outcome.name not in names:
            response = post_voice(url, library, outcome.name, rng)
            assert response.status_code == 200, (outcome, response.text)
            library.listed.add(outcome.name)
