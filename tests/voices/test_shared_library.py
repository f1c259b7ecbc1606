"""Two server processes on one voice library in S3 behave as one library (issue 33).

The S3 is real — moto's standalone server on a loopback port (``support.s3_server``) —
and so are the servers: ``speakwire serve --voices-url s3://...`` processes, each with
its own data dir (its cache), as two instances of an endpoint have their own disks.

On Piper (which stores voices but cannot clone) a request naming a saved voice is
refused with "cannot clone", and an unknown name is a 404: the two answers tell
"this instance found the voice" from "it did not" (``tests/voices/test_voice_lookup``
does the same); ``tests/qwen3/test_shared_library_qwen.py`` speaks a saved voice for
real on another instance.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets.asyncio.client
import websockets.exceptions
from voice_testing import upload, wav_clip
from wyoming.client import AsyncTcpClient
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from speakwire.voices.s3 import QUIET_AFTER_FAILURE_S
from speakwire.voices.shared import FRESH_S
from support.live_server import free_port, start_server
from support.s3_server import LoopbackS3

BUCKET = "speakwire-voices-test"

KILLED_SERVER = textwrap.dedent(
    """
    import os, signal, sys
    from speakwire.cli.main import main
    from speakwire.voices import s3

    when = os.environ["KILL_WHEN"]  # "before-claim" or "after-claim"
    put = s3.S3Objects.put

    def put_then_die(self, key, data, **kwargs):
        claim = key.startswith("voices/")
        if claim and when == "before-claim":
            os.kill(os.getpid(), signal.SIGKILL)
        etag = put(self, key, data, **kwargs)
        if claim and when == "after-claim":
            os.kill(os.getpid(), signal.SIGKILL)
        return etag

    s3.S3Objects.put = put_then_die
    sys.exit(main(sys.argv[1:]))
    """
)


class Instance:
    """One ``speakwire serve`` process on the shared library, with its own data dir."""

    def __init__(
        self,
        data_dir: Path,
        voices_url: str | None,
        s3: LoopbackS3,
        *,
        script: str | None = None,
        sagemaker: bool = False,
        **env: str,
    ):
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = data_dir.parent / f"{data_dir.name}-{self.port}.log"
        args = ["serve", "--host", "127.0.0.1", "--port", str(self.port), "--data-dir", str(data_dir)]
        args += ["--max-streams", "8", *(["--voices-url", voices_url] if voices_url else [])]
        args += ["--sagemaker"] if sagemaker else []
        command = [sys.executable, "-c", script, *args] if script else [sys.executable, "-m", "speakwire", *args]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **s3.env(), **env}
            )
        deadline = time.monotonic() + 120
        while True:
            assert self.process.poll() is None, self.log.read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/{'ping' if sagemaker else 'ready'}", timeout=2).status_code == 200:
                    return
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def speak(self, voice: str) -> httpx.Response:
        body = {"input": "Hello.", "voice": voice, "response_format": "wav"}
        return httpx.post(f"{self.url}/v1/audio/speech", json=body, timeout=60)

    def found(self, voice: str) -> bool:
        """Whether this instance used a saved voice of that name (Piper: refused as one), or found none (404)."""
        response = self.speak(voice)
        if response.status_code == 400 and "cannot clone" in response.json()["error"]["message"]:
            return True
        assert response.status_code == 404 and "does not exist" in response.json()["error"]["message"], response.text
        return False

    def names(self) -> list[str]:
        response = httpx.get(f"{self.url}/v1/audio/voices", timeout=60)
        assert response.status_code == 200, response.text
        return [voice["name"] for voice in response.json()["uploaded_voices"]]

    def delete(self, name: str) -> httpx.Response:
        return httpx.delete(f"{self.url}/v1/audio/voices/{name}", timeout=60)


@pytest.fixture(scope="module")
def s3() -> Iterator[LoopbackS3]:
    server = LoopbackS3().start()
    server.create_bucket(BUCKET)
    yield server
    server.stop()


@pytest.fixture
def voices_url(request: pytest.FixtureRequest) -> str:
    """A library of its own per test, under its own prefix of the one bucket."""
    return f"s3://{BUCKET}/{re.sub(r'[^A-Za-z0-9_-]', '-', request.node.name)[:80]}"


@pytest.fixture
def pair(s3: LoopbackS3, voices_url: str, tmp_path: Path) -> Iterator[tuple[Instance, Instance]]:
    """Instances A and B of one endpoint: two processes, two disks, one library."""
    a = Instance(tmp_path / "a", voices_url, s3)
    try:
        b = Instance(tmp_path / "b", voices_url, s3)
    except BaseException:
        a.stop()
        raise
    yield a, b
    a.stop()
    b.stop()


def prefix_of(voices_url: str) -> str:
    return voices_url.removeprefix(f"s3://{BUCKET}/") + "/"


def test_a_voice_saved_on_one_instance_is_usable_on_the_other_at_once(pair: tuple[Instance, Instance]) -> None:
    a, b = pair
    assert upload_to(a, "Jane").status_code == 200
    assert b.found("jane")  # the first request after the save: B's cache missed, B read S3
    assert b.names() == ["Jane"]
    saved_a = httpx.get(f"{a.url}/v1/audio/voices/jane", timeout=30).json()["voice"]
    saved_b = httpx.get(f"{b.url}/v1/audio/voices/JANE", timeout=30).json()["voice"]
    assert saved_a == saved_b
    exported_a = httpx.get(f"{a.url}/v1/audio/voices/jane/export", timeout=30)
    exported_b = httpx.get(f"{b.url}/v1/audio/voices/jane/export", timeout=30)
    assert exported_a.status_code == exported_b.status_code == 200
    assert audio_of(exported_a.content) == audio_of(exported_b.content)  # the same reference, byte for byte
    assert b.speak("alloy").status_code == 200  # built-in voices speak as before


def test_a_delete_on_one_instance_is_seen_by_the_other(pair: tuple[Instance, Instance]) -> None:
    a, b = pair
    assert upload_to(a, "kate").status_code == 200
    assert b.found("kate")
    assert a.found("kate")
    assert b.delete("kate").status_code == 200
    assert a.names() == []  # a listing reads S3
    assert httpx.get(f"{a.url}/v1/audio/voices/kate", timeout=30).status_code == 404
    time.sleep(FRESH_S)  # A trusted S3's "kate is there" for at most this long
    assert not a.found("kate")
    assert a.delete("kate").status_code == 404
    assert upload_to(a, "kate", seed=9).status_code == 200  # the name is free everywhere again
    assert b.found("kate")


async def test_two_adds_of_one_name_from_two_instances_leave_one_voice_and_one_409(
    pair: tuple[Instance, Instance], s3: LoopbackS3, voices_url: str
) -> None:
    a, b = pair
    async with httpx.AsyncClient(timeout=60) as client:
        for round_ in range(4):
            name = f"racer{round_}"
            answers = await asyncio.gather(post(client, a, name, seed=1), post(client, b, name, seed=2))
            assert sorted(r.status_code for r in answers) == [200, 409], [r.text for r in answers]
            loser = next(r for r in answers if r.status_code == 409)
            assert "already exists" in loser.json()["error"]
    names = [f"racer{i}" for i in range(4)]
    assert a.names() == b.names() == names
    items = {key.split("/")[2] for key in s3.keys(BUCKET, prefix_of(voices_url) + "items/")}
    assert len(items) == 4  # each loser removed what it had uploaded


@pytest.mark.parametrize(("when", "whole"), [("before-claim", False), ("after-claim", True)])
def test_a_server_killed_mid_save_leaves_the_whole_voice_or_none_on_the_other(
    s3: LoopbackS3, voices_url: str, tmp_path: Path, when: str, whole: bool
) -> None:
    b = Instance(tmp_path / "b", voices_url, s3)
    a = Instance(tmp_path / "a", voices_url, s3, script=KILLED_SERVER, KILL_WHEN=when)
    try:
        with pytest.raises(httpx.HTTPError):  # A dies (SIGKILL) while answering: audio up, claim not / claim up
            upload_to(a, "crashy")
        assert a.process.wait(timeout=30) == -signal.SIGKILL
        assert b.names() == (["crashy"] if whole else [])
        assert b.found("crashy") is whole
        if whole:
            exported = httpx.get(f"{b.url}/v1/audio/voices/crashy/export", timeout=30)
            assert exported.status_code == 200 and audio_of(exported.content)
        else:
            assert upload_to(b, "crashy").status_code == 200  # the name was never taken
    finally:
        a.stop()
        b.stop()


def test_s3_down_answers_503_with_the_reason_for_library_calls_while_built_in_voices_speak(
    pair: tuple[Instance, Instance], s3: LoopbackS3
) -> None:
    a, _ = pair
    assert upload_to(a, "cached").status_code == 200
    s3.stop()
    try:
        refusals = [
            httpx.get(f"{a.url}/v1/audio/voices", timeout=60),
            upload_to(a, "newcomer"),
            a.delete("cached"),
            httpx.get(f"{a.url}/v1/audio/voices/cached", timeout=60),
            a.speak("nobody"),  # might be a saved voice: not a 404 while the library cannot tell
        ]
        for response in refusals:
            assert response.status_code == 503, response.text
            assert "cannot be reached" in response.text and "s3://" in response.text
        # The speech stream: a session.config naming a voice the library cannot look up closes "try later" (1013)
        # with the reason, not 1008 "invalid config" (which tells a client the mistake is its own).
        closed = asyncio.run(configure_stream(a.url.replace("http", "ws") + "/v1/audio/speech/stream", "nobody"))
        assert closed[0] == 1013 and "cannot be reached" in closed[1]
        assert a.speak("alloy").status_code == 200
        default = httpx.post(f"{a.url}/v1/audio/speech", json={"input": "Still here."}, timeout=60)
        assert default.status_code == 200 and len(default.content) > 1000
        time.sleep(FRESH_S)
        assert a.found("cached")  # in A's cache: a saved voice keeps speaking
    finally:
        s3.start()
    time.sleep(QUIET_AFTER_FAILURE_S)  # A asks again this long after S3 last failed to answer
    assert a.names() == ["cached"]


async def configure_stream(url: str, voice: str) -> tuple[int | None, str]:
    """Send a session.config naming ``voice``; the close code and the last event's message."""
    message = ""
    async with websockets.asyncio.client.connect(url) as ws:
        await ws.send(json.dumps({"type": "session.config", "voice": voice, "response_format": "pcm"}))
        with contextlib.suppress(websockets.exceptions.ConnectionClosed):
            async for event in ws:
                message = json.loads(event).get("message", message) if isinstance(event, str) else message
    return ws.close_code, message


def test_the_cache_survives_a_restart_without_s3_and_refreshes_when_s3_returns(
    s3: LoopbackS3, voices_url: str, tmp_path: Path
) -> None:
    a = Instance(tmp_path / "a", voices_url, s3)
    try:
        assert upload_to(a, "kept").status_code == 200
        assert upload_to(a, "doomed").status_code == 200
    finally:
        a.stop()
    s3.stop()
    try:
        a = Instance(tmp_path / "a", voices_url, s3)  # starts with S3 down: its cache serves
        assert a.found("kept") and a.found("doomed")
        assert httpx.get(f"{a.url}/v1/audio/voices", timeout=60).status_code == 503
    finally:
        s3.start()
    b = Instance(tmp_path / "b", voices_url, s3)
    try:
        assert b.delete("doomed").status_code == 200
        assert upload_to(b, "newer").status_code == 200
        assert a.names() == ["kept", "newer"]
        time.sleep(FRESH_S)
        assert a.found("kept") and a.found("newer")
        assert not a.found("doomed")
    finally:
        a.stop()
        b.stop()


def test_a_name_no_one_saved_is_read_from_s3_about_once_a_second_and_a_voice_saved_elsewhere_at_once(
    s3: LoopbackS3, voices_url: str, tmp_path: Path, piper_engine: PiperEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    live = start_server(Settings(data_dir=str(tmp_path / "in-process"), voices_url=voices_url), engine=piper_engine)
    other = Instance(tmp_path / "other", voices_url, s3)
    try:
        calls = live.state.voices.store.objects.calls
        before, started = calls["get_object"], time.monotonic()
        for _ in range(20):
            response = httpx.post(f"{live.url}/v1/audio/speech", json={"input": "Hi.", "voice": "nobody"}, timeout=30)
            assert response.status_code == 404
        reads = calls["get_object"] - before
        assert 1 <= reads <= 1 + (time.monotonic() - started) / FRESH_S
        # A name that could never be saved (too long, a path, spaces) is unknown without asking S3 at all.
        before = sum(calls.values())
        for name in ("x" * 2000, "../etc/passwd", "two words"):
            response = httpx.post(f"{live.url}/v1/audio/speech", json={"input": "Hi.", "voice": name}, timeout=30)
            assert response.status_code in (400, 404), response.text
        assert sum(calls.values()) == before
        assert upload_to(other, "fresh").status_code == 200
        speak = {"input": "Hi.", "voice": "fresh", "response_format": "wav"}
        response = httpx.post(f"{live.url}/v1/audio/speech", json=speak, timeout=30)
        assert response.status_code == 400 and "cannot clone" in response.text  # found on its first request
    finally:
        other.stop()
        live.stop()


def test_two_sagemaker_containers_given_the_library_as_deploy_passes_it_act_as_one_through_invocations(
    s3: LoopbackS3, voices_url: str, tmp_path: Path
) -> None:
    # What ``speakwire sagemaker deploy`` puts in the container's environment (deploy.sagemaker.voice_library);
    # moto's account owns every bucket.
    env = {"SPEAKWIRE_VOICES_URL": voices_url, "SPEAKWIRE_VOICES_BUCKET_OWNER": "123456789012"}
    a = Instance(tmp_path / "a", None, s3, sagemaker=True, **env)
    b = Instance(tmp_path / "b", None, s3, sagemaker=True, **env)

    def invoke(instance: Instance, route: str, body: object) -> httpx.Response:
        headers = {"X-Amzn-SageMaker-Custom-Attributes": f"route={route}"}
        return httpx.post(f"{instance.url}/invocations", json=body, headers=headers, timeout=60)

    try:
        clip = "data:audio/wav;base64," + base64.b64encode(wav_clip()).decode()
        saved = invoke(a, "/v1/audio/voices", {"name": "sm-voice", "consent": "Agreed.", "audio_sample": clip})
        assert saved.status_code == 200, saved.text
        spoken = invoke(b, "/v1/audio/speech", {"input": "Hi.", "voice": "sm-voice", "response_format": "wav"})
        assert spoken.status_code == 400 and "cannot clone" in spoken.text  # B found A's voice
        assert [v["name"] for v in invoke(b, "/v1/audio/voices", {}).json()["uploaded_voices"]] == ["sm-voice"]
        assert invoke(b, "/v1/audio/voices/sm-voice/delete", {}).json()["success"] is True
        assert invoke(a, "/v1/audio/voices", {}).json()["uploaded_voices"] == []
    finally:
        a.stop()
        b.stop()


def test_the_cli_manages_the_shared_library_and_a_running_instance_sees_its_voices(
    pair: tuple[Instance, Instance], s3: LoopbackS3, voices_url: str, tmp_path: Path
) -> None:
    a, _ = pair
    clip = tmp_path / "ref.wav"
    clip.write_bytes(wav_clip())
    env = {**os.environ, **s3.env(), "SPEAKWIRE_VOICES_URL": voices_url, "SPEAKWIRE_DATA_DIR": str(tmp_path / "cli")}

    def cli(*args: str) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "speakwire", "voices", *args], env=env, capture_output=True, timeout=120
        )
        assert result.returncode == 0, result.stderr.decode()
        return result.stdout.decode()

    assert voices_url in cli("add", "laptop", "--audio", str(clip), "--consent", "Recorded by me; I agree.")
    assert a.found("laptop")  # seeded from a laptop, speaking on the endpoint
    assert "laptop" in cli("list")
    cli("export", "laptop", "-o", str(tmp_path / "laptop.swv"))
    cli("import", str(tmp_path / "laptop.swv"), "--name", "laptop-copy")
    assert a.names() == ["laptop", "laptop-copy"]
    cli("rm", "laptop")
    assert a.names() == ["laptop-copy"]


def upload_to(instance: Instance, name: str, *, seed: int = 3) -> httpx.Response:
    return upload(instance, name, wav_clip(seed=seed))  # type: ignore[arg-type]


async def post(client: httpx.AsyncClient, instance: Instance, name: str, *, seed: int) -> httpx.Response:
    form = {"name": name, "consent": "Recorded by the tester, who agreed."}
    files = {"audio_sample": ("ref.wav", wav_clip(2.0, seed=seed), "audio/wav")}
    return await client.post(f"{instance.url}/v1/audio/voices", data=form, files=files)


def audio_of(swv: bytes) -> bytes:
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(swv)) as archive:
        return archive.read("audio.flac")


def test_a_bad_voices_url_or_an_s3_that_does_not_answer_is_said_plainly_by_the_commands(tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = {**os.environ, **LoopbackS3().env(), "AWS_ENDPOINT_URL_S3": nobody, "SPEAKWIRE_DATA_DIR": str(tmp_path)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "speakwire", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

    served = run("serve", "--port", str(free_port()), "--voices-url", "https://example.com/voices")
    assert served.returncode == 2 and "must be s3://bucket/prefix" in served.stderr
    listed = run("voices", "list", "--voices-url", f"s3://{BUCKET}/cli")
    assert listed.returncode == 1 and "cannot be reached" in listed.stderr and f"s3://{BUCKET}/cli/" in listed.stderr


async def test_with_s3_down_wyoming_still_describes_the_built_in_voices_and_keeps_the_client(
    s3: LoopbackS3, voices_url: str, tmp_path: Path
) -> None:
    """Home Assistant discovers voices with Describe: an S3 outage must not drop it (issue 33: built-in voices
    are untouched), so the answer lists the engine's voices, and the same connection still speaks."""
    wyoming_port = free_port()
    instance = Instance(tmp_path / "w", voices_url, s3, SPEAKWIRE_WYOMING_PORT=str(wyoming_port))
    s3.stop()
    try:
        async with AsyncTcpClient("127.0.0.1", wyoming_port) as client:
            kinds = []
            for event in (Describe().event(), Describe().event(), Synthesize(text="Still here.").event()):
                await client.write_event(event)
                while (answer := await asyncio.wait_for(client.read_event(), 60)) is not None:
                    kinds.append(answer.type)
                    if answer.type in ("info", "audio-stop", "error"):
                        break
                if answer is not None and answer.type == "info":
                    assert Info.from_event(answer).tts[0].voices, "no built-in voice described"
        assert kinds[:2] == ["info", "info"] and kinds[2] == "audio-start" and kinds[-1] == "audio-stop"
        assert "describing built-in voices only" in instance.log.read_text()
    finally:
        s3.start()
        instance.stop()


def test_a_claim_whose_write_landed_but_whose_answer_was_lost_is_a_saved_voice(
    s3: LoopbackS3, voices_url: str, tmp_path: Path, piper_engine: PiperEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim (the write that makes a voice exist) reaches S3 but its answer is lost (a read timeout; boto3's
    retry would then find the key taken): the voice is read back and saved whole, not left listed with its audio
    deleted and its name blocked."""
    from botocore.exceptions import ReadTimeoutError

    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    live = start_server(Settings(data_dir=str(tmp_path / "lost"), voices_url=voices_url), engine=piper_engine)
    lost: list[str] = []

    def lose_the_claims_answer(http_response: Any, **_: Any) -> None:
        if "/voices/" in http_response.url and not lost:  # after S3 wrote it
            lost.append(http_response.url)
            raise ReadTimeoutError(endpoint_url=http_response.url)

    try:
        client = live.state.voices.store.objects._client
        client.meta.events.register("after-call.s3.PutObject", lose_the_claims_answer)
        saved = upload(live, "kept", wav_clip(seed=5))  # type: ignore[arg-type]
        assert lost and saved.status_code == 200, saved.text
        prefix = voices_url.removeprefix(f"s3://{BUCKET}/") + "/"
        keys = s3.keys(BUCKET, prefix)
        claim = json.loads(s3.client().get_object(Bucket=BUCKET, Key=f"{prefix}voices/kept.json")["Body"].read())
        assert f"{prefix}items/{claim['voice']['id']}/audio.flac" in keys  # the audio the claim points at
        assert httpx.get(f"{live.url}/v1/audio/voices/kept", timeout=30).status_code == 200
    finally:
        live.stop()
