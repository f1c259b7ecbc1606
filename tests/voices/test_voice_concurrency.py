"""Uploads racing each other: one name has exactly one winner; different names all get in; the cap holds."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from voice_testing import wav_clip

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.live_server import LiveServer, start_server


async def post_voice(client: httpx.AsyncClient, url: str, name: str, seed: int) -> httpx.Response:
    form = {"name": name, "consent": "Recorded by the tester, who agreed."}
    files = {"audio_sample": ("ref.wav", wav_clip(2.0, seed=seed), "audio/wav")}
    return await client.post(f"{url}/v1/audio/voices", data=form, files=files)


async def test_five_concurrent_uploads_of_one_name_give_one_voice_and_four_clear_409s(
    library_server: LiveServer, data_dir: Path
) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        responses = await asyncio.gather(*(post_voice(client, library_server.url, "same", i) for i in range(5)))
        catalogue = (await client.get(f"{library_server.url}/v1/audio/voices")).json()
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200, 409, 409, 409, 409], [r.text for r in responses]
    for loser in (r for r in responses if r.status_code == 409):
        assert "already exists" in loser.json()["error"]
    assert [v["name"] for v in catalogue["uploaded_voices"]] == ["same"]
    assert len(list((data_dir / "voices" / "items").iterdir())) == 1  # the losers left no files behind
    assert list((data_dir / "voices" / "staging").iterdir()) == []


async def test_concurrent_uploads_of_different_names_are_all_saved(library_server: LiveServer) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        responses = await asyncio.gather(*(post_voice(client, library_server.url, f"v{i}", i) for i in range(5)))
        catalogue = (await client.get(f"{library_server.url}/v1/audio/voices")).json()
    assert [r.status_code for r in responses] == [200] * 5
    assert {v["name"] for v in catalogue["uploaded_voices"]} == {f"v{i}" for i in range(5)}


async def test_the_voice_count_cap_is_a_clear_409_even_under_a_race(
    piper_engine: PiperEngine, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPEAKWIRE_MAX_VOICES", "3")
    live = start_server(Settings(data_dir=str(data_dir)), engine=piper_engine)
    try:
        async with httpx.AsyncClient(timeout=60) as client:
            responses = await asyncio.gather(*(post_voice(client, live.url, f"v{i}", i) for i in range(6)))
            catalogue = (await client.get(f"{live.url}/v1/audio/voices")).json()
        assert sorted(r.status_code for r in responses) == [200, 200, 200, 409, 409, 409]
        full = next(r for r in responses if r.status_code == 409).json()["error"]
        assert "library is full" in full and "SPEAKWIRE_MAX_VOICES" in full
        assert len(catalogue["uploaded_voices"]) == 3
    finally:
        live.stop()


def test_the_cap_can_be_set_by_flag(piper_engine: PiperEngine, data_dir: Path) -> None:
    from speakwire.cli.main import build_parser
    from speakwire.cli.serve import build_settings

    settings = build_settings(build_parser().parse_args(["serve", "--max-voices", "1", "--data-dir", str(data_dir)]))
    live = start_server(settings, engine=piper_engine)
    try:
        form = {"consent": "Recorded by the tester, who agreed."}
        files = {"audio_sample": ("ref.wav", wav_clip(2.0), "audio/wav")}
        first = httpx.post(f"{live.url}/v1/audio/voices", data={**form, "name": "one"}, files=files, timeout=60)
        second = httpx.post(f"{live.url}/v1/audio/voices", data={**form, "name": "two"}, files=files, timeout=60)
        assert first.status_code == 200, first.text
        assert second.status_code == 409 and "--max-voices" in second.json()["error"]
    finally:
        live.stop()
