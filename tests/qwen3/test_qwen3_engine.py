"""The Qwen3 engine on tiny random checkpoints: every task streams early and exactly, and stops when told."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from oracle.package import synthesize_full
from qwen3_testing import noise_clip, require_qwen_tts, steer_eos

from speakwire.engines.base import Engine, SynthesisRequest, SynthesisRun
from speakwire.errors import BadRequestError, EngineError, MissingExtraError, NotFoundError

pytestmark = pytest.mark.qwen

TEXT = "hello world, this is a tiny test."
FRAME = 1920


def request_for(task: str, **overrides: Any) -> SynthesisRequest:
    by_task: dict[str, dict[str, Any]] = {
        "CustomVoice": {"voice": "ryan", "language": "english"},
        "VoiceDesign": {"instructions": "a calm, deep voice"},
        "Base": {"ref_audio": noise_clip(2.0), "ref_text": "Hi there!"},
    }
    fields = by_task[task]
    return SynthesisRequest(**{"seed": 7, **fields, **overrides})


@pytest.fixture
def engines(custom_voice_engine: Any, voice_design_engine: Any, base_engine: Any) -> dict[str, Any]:
    return {"CustomVoice": custom_voice_engine, "VoiceDesign": voice_design_engine, "Base": base_engine}


def stream_frames(chunks: list[np.ndarray]) -> list[int]:
    return [len(chunk) // FRAME for chunk in chunks]


def generation_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("qwen3-")]


def test_the_engine_satisfies_the_engine_protocol(custom_voice_engine: Any) -> None:
    assert isinstance(custom_voice_engine, Engine)


def test_info_describes_a_custom_voice_checkpoint(custom_voice_engine: Any, tiny_checkpoints: dict[str, Path]) -> None:
    info = custom_voice_engine.info
    assert (info.name, info.model, info.sample_rate) == (
        "qwen3",
        str(tiny_checkpoints["custom_voice"]),
        24_000,
    )
    assert info.voices[0] == "Vivian" and set(info.voices) == {"Vivian", "Ryan", "Uncle_Fu", "Eric"}
    assert info.languages == (
        "Auto",
        "Chinese",
        "English",
        "Japanese",
        "Korean",
        "German",
        "French",
        "Russian",
        "Portuguese",
        "Spanish",
        "Italian",
    )
    assert info.task_types == ("CustomVoice",)
    assert not info.supports_cloning and not info.supports_instructions  # the 0.6B ignores instructions
    assert not info.needs_text_normalization


def test_info_of_the_other_variants(base_engine: Any, voice_design_engine: Any, custom_voice_1b7_engine: Any) -> None:
    assert (base_engine.info.task_types, base_engine.info.voices) == (("Base",), ())
    assert base_engine.info.supports_cloning and not base_engine.info.supports_instructions
    assert (voice_design_engine.info.task_types, voice_design_engine.info.voices) == (("VoiceDesign",), ())
    assert voice_design_engine.info.supports_instructions
    assert custom_voice_1b7_engine.info.supports_instructions


@pytest.mark.parametrize("task", ["CustomVoice", "VoiceDesign", "Base"])
def test_every_task_type_streams_24k_float32_audio(engines: dict[str, Any], task: str) -> None:
    engine = engines[task]
    with steer_eos(engine, after=12):
        chunks = list(engine.synthesize(TEXT, request_for(task)))
    assert all(chunk.sample_rate == 24_000 and chunk.samples.dtype == np.float32 for chunk in chunks)
    audio = np.concatenate([chunk.samples for chunk in chunks])
    assert len(audio) == 12 * FRAME and float(np.abs(audio).max()) > 0.01


@pytest.mark.parametrize("task", ["CustomVoice", "VoiceDesign", "Base"])
def test_streamed_audio_equals_the_packages_own_non_streamed_audio(engines: dict[str, Any], task: str) -> None:
    engine = engines[task]
    with steer_eos(engine, after=40):  # 40 frames: longer than the tiny decoder's 2 × 4-frame window + convs
        streamed = np.concatenate([c.samples for c in engine.synthesize(TEXT, request_for(task))])
        full = synthesize_full(engine, TEXT, request_for(task)).samples
    assert len(streamed) == len(full) == 40 * FRAME
    np.testing.assert_allclose(streamed, full, rtol=0, atol=1e-5)


def test_the_first_chunk_is_two_frames_and_chunks_follow_the_schedule(custom_voice_engine: Any) -> None:
    with steer_eos(custom_voice_engine, after=80):
        chunks = [c.samples for c in custom_voice_engine.synthesize(TEXT, request_for("CustomVoice"))]
    assert stream_frames(chunks) == [2, 4, 8, 16, 25, 25]


def test_a_request_sets_the_first_chunks_frames_and_the_schedule_follows(custom_voice_engine: Any) -> None:
    # vLLM-Omni's initial_codec_chunk_frames: the utterance's first code2wav chunk ends after that many frames.
    with steer_eos(custom_voice_engine, after=80):
        request = request_for("CustomVoice", initial_codec_chunk_frames=5)
        chunks = [c.samples for c in custom_voice_engine.synthesize(TEXT, request)]
    assert stream_frames(chunks) == [5, 4, 8, 16, 25, 22]


def test_the_first_chunk_arrives_long_before_the_utterance_is_done(custom_voice_engine: Any) -> None:
    with steer_eos(custom_voice_engine, after=60):
        started = time.perf_counter()
        stream = custom_voice_engine.synthesize(TEXT, request_for("CustomVoice"))
        next(stream)
        first = time.perf_counter() - started
        list(stream)
        total = time.perf_counter() - started
    assert first < total / 4


def test_the_same_seed_gives_the_same_audio_and_another_seed_does_not(custom_voice_engine: Any) -> None:
    def run(seed: int) -> np.ndarray:
        with steer_eos(custom_voice_engine, after=10):
            chunks = custom_voice_engine.synthesize(TEXT, request_for("CustomVoice", seed=seed))
            return np.concatenate([c.samples for c in chunks])

    assert np.array_equal(run(1), run(1))
    assert not np.array_equal(run(1), run(2))


def test_a_request_without_a_seed_keeps_one_seed_for_all_its_segments(voice_design_engine: Any) -> None:
    request = voice_design_engine.validate(request_for("VoiceDesign", seed=None))  # validate fixes the seed
    with steer_eos(voice_design_engine, after=6):
        first = np.concatenate([c.samples for c in voice_design_engine.synthesize(TEXT, request)])
        again = np.concatenate([c.samples for c in voice_design_engine.synthesize(TEXT, request)])
    assert request.seed is not None
    assert np.array_equal(first, again)  # same text, same request: same voice, same audio


def test_generation_stops_at_eos_without_being_reported_capped(custom_voice_engine: Any) -> None:
    run = SynthesisRun()
    with steer_eos(custom_voice_engine, after=7):
        chunks = [c.samples for c in custom_voice_engine.synthesize(TEXT, request_for("CustomVoice"), run)]
    assert sum(stream_frames(chunks)) == 7
    assert not run.result.capped


def test_a_runaway_utterance_is_cut_at_its_budget_and_reported(
    custom_voice_engine: Any, caplog: pytest.LogCaptureFixture
) -> None:
    request = request_for("CustomVoice", max_new_tokens=12)
    streamed, full = SynthesisRun(), SynthesisRun()
    with steer_eos(custom_voice_engine, after=None), caplog.at_level(logging.WARNING):
        chunks = [c.samples for c in custom_voice_engine.synthesize(TEXT, request, streamed)]
        whole = synthesize_full(custom_voice_engine, TEXT, request, full)
    assert sum(stream_frames(chunks)) == 12 and len(whole.samples) == 12 * FRAME
    assert streamed.result.capped is True and full.result.capped is True
    assert caplog.text.count("hit its frame budget (12 frames = 1.0 s) without EOS and was cut: 'hello world") == 2


def test_the_budget_follows_the_text_length_when_the_request_sets_none(custom_voice_engine: Any) -> None:
    from speakwire.engines.qwen3.frame_budget import frame_budget

    run = SynthesisRun()
    with steer_eos(custom_voice_engine, after=None):
        frames = sum(
            stream_frames([c.samples for c in custom_voice_engine.synthesize("Hi.", request_for("CustomVoice"), run)])
        )
    assert frames == frame_budget("Hi.") and run.result.capped is True


def test_cancelling_mid_utterance_stops_generation_within_a_frame_step(custom_voice_engine: Any) -> None:
    request, run = request_for("CustomVoice", max_new_tokens=400), SynthesisRun()
    with steer_eos(custom_voice_engine, after=None) as steps:
        stream = custom_voice_engine.synthesize(TEXT, request, run)
        next(stream)
        run.cancelled.set()
        calls_at_cancel = steps.calls
        rest = list(stream)
        time.sleep(0.2)
    assert steps.calls - calls_at_cancel <= 2  # the step in flight, and at most one before the loop saw it
    assert sum(stream_frames([c.samples for c in rest])) < 400
    assert custom_voice_engine.loop.free_slots == custom_voice_engine.loop.slots


def test_closing_the_stream_frees_its_slot_and_stops_its_generation(custom_voice_engine: Any) -> None:
    loop = custom_voice_engine.loop
    with steer_eos(custom_voice_engine, after=None) as steps:
        stream = custom_voice_engine.synthesize(TEXT, request_for("CustomVoice", max_new_tokens=400))
        next(stream)
        assert loop.free_slots == loop.slots - 1
        stream.close()  # what the pipeline does when the client goes away
        time.sleep(0.1)  # the loop drops the row before its next step
        calls_at_close = steps.calls
        time.sleep(0.2)
    assert steps.calls == calls_at_close  # nothing generates for a gone client
    assert loop.free_slots == loop.slots and loop.active_rows == 0


def test_a_request_cancelled_before_it_starts_yields_nothing(custom_voice_engine: Any) -> None:
    run = SynthesisRun()
    run.cancelled.set()
    assert list(custom_voice_engine.synthesize(TEXT, request_for("CustomVoice"), run)) == []


def test_a_failure_inside_generation_surfaces_as_an_engine_error_and_the_loop_goes_on(
    custom_voice_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = custom_voice_engine.tts_model.model.talker.codec_head

    def broken(hidden: Any) -> None:
        raise RuntimeError("CUDA error: device-side assert triggered")

    monkeypatch.setattr(head, "forward", broken)
    with pytest.raises(EngineError, match="Qwen3-TTS generation failed: CUDA error"):
        list(custom_voice_engine.synthesize(TEXT, request_for("CustomVoice")))
    monkeypatch.undo()
    assert custom_voice_engine.loop.free_slots == custom_voice_engine.loop.slots
    with steer_eos(custom_voice_engine, after=5):
        assert (
            sum(stream_frames([c.samples for c in custom_voice_engine.synthesize(TEXT, request_for("CustomVoice"))]))
            == 5
        )


def test_instructions_reach_the_17b_custom_voice_prompt_and_not_the_06b(
    custom_voice_1b7_engine: Any, custom_voice_engine: Any
) -> None:
    import torch

    from speakwire.engines.qwen3.talker_prompt import VoiceSpec

    def prompt_length(engine: Any, instructions: str | None) -> int:
        spec = VoiceSpec("CustomVoice", language="english", speaker="ryan", instructions=instructions)
        with torch.no_grad():
            return int(engine.loop.prompts.voice(spec).prefix.shape[1])

    instruct_tokens = len(
        custom_voice_1b7_engine.tts_model.processor(text="<|im_start|>user\nspeak happily<|im_end|>\n")["input_ids"][0]
    )
    assert (
        prompt_length(custom_voice_1b7_engine, "speak happily")
        == prompt_length(custom_voice_1b7_engine, None) + instruct_tokens
    )
    assert prompt_length(custom_voice_engine, "speak happily") == prompt_length(custom_voice_engine, None)


def test_bad_requests_are_refused_before_any_generation(engines: dict[str, Any]) -> None:
    cases: list[tuple[str, SynthesisRequest, type[Exception], str]] = [
        ("CustomVoice", SynthesisRequest(voice="nobody"), NotFoundError, "available voices: Vivian"),
        ("CustomVoice", SynthesisRequest(language="Elvish"), BadRequestError, "use one of: Auto, Chinese"),
        (
            "CustomVoice",
            SynthesisRequest(ref_audio=noise_clip(2), ref_text="hi"),
            BadRequestError,
            "voice cloning",
        ),
        ("CustomVoice", SynthesisRequest(instructions="happy"), BadRequestError, "ignores instructions"),
        ("VoiceDesign", SynthesisRequest(), BadRequestError, "needs 'instructions'"),
        (
            "Base",
            SynthesisRequest(voice="vivian", ref_audio=noise_clip(2)),
            BadRequestError,
            "no built-in voices",
        ),
        ("Base", SynthesisRequest(ref_audio=noise_clip(2)), BadRequestError, "needs 'ref_text'"),
        (
            "Base",
            SynthesisRequest(ref_audio=noise_clip(0.5), ref_text="hi"),
            BadRequestError,
            "between 1 and 30 s",
        ),
        (
            "Base",
            SynthesisRequest(ref_audio=noise_clip(31), ref_text="hi"),
            BadRequestError,
            "between 1 and 30 s",
        ),
        ("Base", SynthesisRequest(task_type="VoiceDesign"), BadRequestError, "serves task_type 'Base' only"),
    ]
    baseline = len(generation_threads())
    for task, request, error, message in cases:
        with pytest.raises(error, match=message):
            next(iter(engines[task].synthesize(TEXT, request)))
    assert len(generation_threads()) == baseline


def test_loading_logs_variant_size_device_dtype_memory_and_time(
    tiny_checkpoints: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    from speakwire.engines.qwen3 import load_qwen3_engine

    with caplog.at_level(logging.INFO, logger="speakwire.engines.qwen3"):
        load_qwen3_engine(str(tiny_checkpoints["base"]), gpu_memory_utilization=0.5).close()
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("qwen3: loaded"))
    for part in (
        "variant base",
        "size 0.6B",
        "M params",
        "device cpu",
        "dtype float32",
        "talker ",
        "speaker encoder ",
        "code2wav (speech tokenizer) ",
        "MiB",
        "load ",
    ):
        assert part in line


def test_loading_a_local_directory_makes_no_network_calls(
    tiny_checkpoints: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from speakwire.engines.qwen3 import load_qwen3_engine

    attempts: list[object] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append(args)
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    load_qwen3_engine(str(tiny_checkpoints["custom_voice"])).close()
    assert attempts == []


def test_a_closed_engine_releases_its_model(tiny_checkpoints: dict[str, Path]) -> None:
    from speakwire.engines.qwen3 import load_qwen3_engine

    engine = load_qwen3_engine(str(tiny_checkpoints["voice_design"]))
    engine.close()
    engine.close()  # idempotent
    assert engine.tts_model is None


def test_importing_speakwire_and_the_qwen3_engine_does_not_import_torch() -> None:
    code = (
        "import sys, speakwire, speakwire.engines.qwen3, speakwire.audio.decode; "
        "heavy = [m for m in ('torch', 'qwen_tts', 'transformers') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize(("module", "named"), [("torch", "torch"), ("qwen_tts", "qwen-tts")])
def test_a_missing_extra_raises_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch, module: str, named: str
) -> None:
    from speakwire.engines.qwen3 import load_qwen3_engine

    if module == "qwen_tts":
        require_qwen_tts()  # torch must be there for the check to reach qwen-tts
    monkeypatch.setitem(sys.modules, module, None)  # import of it now fails, as if not installed
    with pytest.raises(MissingExtraError, match=rf"{named} is not installed.*speakwire\[qwen\]") as info:
        load_qwen3_engine("Qwen/Qwen3-TTS-12Hz-0.6B-Base")
    assert "pip install --no-deps qwen-tts==0.1.1" in "".join(info.value.__notes__)


def test_cpu_threads_count_the_cores_of_the_affinity_and_the_cgroup_quota(tmp_path: Path) -> None:
    import os

    from speakwire.engines.qwen3.cpu_threads import cgroup_cpu_quota, usable_cores

    cpu_max = tmp_path / "cpu.max"
    affinity = len(os.sched_getaffinity(0))
    assert usable_cores(str(tmp_path / "absent")) == affinity  # no cgroup v2 file: the affinity alone
    cpu_max.write_text("max 100000\n")
    assert cgroup_cpu_quota(str(cpu_max)) is None and usable_cores(str(cpu_max)) == affinity
    cpu_max.write_text("150000 100000\n")
    assert cgroup_cpu_quota(str(cpu_max)) == 1.5 and usable_cores(str(cpu_max)) == min(affinity, 2)
    cpu_max.write_text("50000 100000\n")
    assert usable_cores(str(cpu_max)) == 1  # under one core's quota still runs one thread
    cpu_max.write_text("garbage\n")
    assert cgroup_cpu_quota(str(cpu_max)) is None
