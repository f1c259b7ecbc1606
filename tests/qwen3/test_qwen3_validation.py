"""Request validation against a Qwen3 checkpoint: vLLM-Omni semantics, canonical names, helpful errors.

Pure Python: runs without torch or qwen-tts.
"""

from __future__ import annotations

import numpy as np
import pytest

from speakwire.audio.chunk import AudioChunk
from speakwire.engines.base import SynthesisRequest
from speakwire.engines.qwen3.validation import Qwen3ModelFacts, validate_request
from speakwire.errors import BadRequestError, NotFoundError

LANGUAGES = (
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
CUSTOM_06B = Qwen3ModelFacts(
    model="Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice",
    task_type="CustomVoice",
    speakers=("Vivian", "Ryan", "Uncle_Fu"),
    languages=LANGUAGES,
)
CUSTOM_17B = Qwen3ModelFacts(
    model="Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice",
    task_type="CustomVoice",
    speakers=("Vivian", "Ryan"),
    languages=LANGUAGES,
    honours_instructions=True,
)
DESIGN = Qwen3ModelFacts(
    model="Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign",
    task_type="VoiceDesign",
    languages=LANGUAGES,
    honours_instructions=True,
)
BASE = Qwen3ModelFacts(model="Qwen/Qwen3-TTS-12Hz-0.6B-Base", task_type="Base", languages=LANGUAGES)


def clip(seconds: float) -> AudioChunk:
    return AudioChunk(np.zeros(int(seconds * 24_000), dtype=np.float32), 24_000)


def test_an_omitted_task_type_becomes_the_models_task_type() -> None:
    assert validate_request(SynthesisRequest(), CUSTOM_06B).task_type == "CustomVoice"
    assert validate_request(SynthesisRequest(instructions="calm"), DESIGN).task_type == "VoiceDesign"
    request = SynthesisRequest(ref_audio=clip(2), ref_text="hi")
    assert validate_request(request, BASE).task_type == "Base"


def test_names_come_back_canonical_whatever_their_case() -> None:
    request = validate_request(
        SynthesisRequest(task_type="customvoice", voice="uncle_fu", language="ENGLISH"), CUSTOM_06B
    )
    assert (request.task_type, request.voice, request.language) == ("CustomVoice", "Uncle_Fu", "English")


def test_custom_voice_defaults_to_the_first_speaker_and_auto_language() -> None:
    request = validate_request(SynthesisRequest(), CUSTOM_06B)
    assert (request.voice, request.language) == ("Vivian", "Auto")


def test_an_unknown_speaker_is_not_found_and_lists_the_voices() -> None:
    with pytest.raises(NotFoundError, match=r"Unknown voice 'alloy' .*available voices: Vivian, Ryan, Uncle_Fu"):
        validate_request(SynthesisRequest(voice="alloy"), CUSTOM_06B)


def test_an_unknown_language_lists_the_supported_ones() -> None:
    with pytest.raises(BadRequestError, match=r"Unsupported language 'Klingon'; use one of: Auto, Chinese, English"):
        validate_request(SynthesisRequest(language="Klingon"), CUSTOM_06B)


def test_an_unknown_task_type_lists_the_valid_ones() -> None:
    with pytest.raises(
        BadRequestError, match=r"Unknown task_type 'Clone'; valid values: Base, CustomVoice, VoiceDesign"
    ):
        validate_request(SynthesisRequest(task_type="Clone"), BASE)


def test_a_task_type_the_model_does_not_serve_says_which_checkpoint_would() -> None:
    with pytest.raises(BadRequestError) as info:
        validate_request(SynthesisRequest(task_type="Base", ref_audio=clip(2), ref_text="hi"), CUSTOM_06B)
    message = info.value.message
    assert "serves task_type 'CustomVoice' only, not 'Base'" in message
    assert "Qwen3-TTS-12Hz-*-Base" in message and "omit task_type" in message


@pytest.mark.parametrize("facts", [CUSTOM_06B, DESIGN], ids=["custom_voice", "voice_design"])
def test_cloning_fields_on_a_model_that_does_not_clone_are_refused(facts: Qwen3ModelFacts) -> None:
    request = SynthesisRequest(ref_text="hello", x_vector_only_mode=True, instructions="calm")
    with pytest.raises(BadRequestError, match=r"ref_text, x_vector_only_mode are for voice cloning") as info:
        validate_request(request, facts)
    assert "remove them" in info.value.message and info.value.param == "ref_text"


def test_a_speaker_on_a_base_model_is_refused_pointing_at_ref_audio() -> None:
    request = SynthesisRequest(voice="vivian", ref_audio=clip(2), ref_text="hi")
    with pytest.raises(BadRequestError, match=r"no built-in voices .* clones the voice in 'ref_audio'"):
        validate_request(request, BASE)


def test_a_speaker_on_a_voice_design_model_is_refused_pointing_at_instructions() -> None:
    with pytest.raises(BadRequestError, match=r"describe the voice in 'instructions'"):
        validate_request(SynthesisRequest(voice="vivian", instructions="calm"), DESIGN)


def test_voice_design_requires_instructions() -> None:
    with pytest.raises(BadRequestError, match=r"VoiceDesign needs 'instructions' describing the voice, e.g."):
        validate_request(SynthesisRequest(instructions="   "), DESIGN)


def test_instructions_are_refused_by_the_06b_custom_voice_which_ignores_them() -> None:
    with pytest.raises(BadRequestError, match=r"ignores instructions .*12Hz-1\.7B-CustomVoice"):
        validate_request(SynthesisRequest(instructions="happy"), CUSTOM_06B)


def test_instructions_are_kept_by_the_17b_custom_voice() -> None:
    assert validate_request(SynthesisRequest(instructions="happy"), CUSTOM_17B).instructions == "happy"


def test_instructions_on_a_base_model_are_refused() -> None:
    request = SynthesisRequest(ref_audio=clip(2), ref_text="hi", instructions="happy")
    with pytest.raises(BadRequestError, match=r"Base ignores instructions"):
        validate_request(request, BASE)


def test_base_requires_ref_audio_and_says_how_to_send_it() -> None:
    with pytest.raises(BadRequestError, match=r"needs 'ref_audio'.*data:audio/wav;base64"):
        validate_request(SynthesisRequest(ref_text="hi"), BASE)


def test_base_requires_ref_text_unless_x_vector_only_mode() -> None:
    with pytest.raises(BadRequestError, match=r"needs 'ref_text'.*or set x_vector_only_mode=true"):
        validate_request(SynthesisRequest(ref_audio=clip(2), ref_text="  "), BASE)
    request = validate_request(SynthesisRequest(ref_audio=clip(2), x_vector_only_mode=True), BASE)
    assert request.ref_text is None


@pytest.mark.parametrize("seconds", [0.5, 31.0])
def test_reference_audio_outside_one_to_thirty_seconds_is_refused(seconds: float) -> None:
    with pytest.raises(BadRequestError, match=r"must be between 1 and 30 s"):
        validate_request(SynthesisRequest(ref_audio=clip(seconds), ref_text="hi"), BASE)


def test_reference_audio_that_was_not_decoded_is_refused() -> None:
    with pytest.raises(BadRequestError, match=r"must be decoded audio .* got bytes"):
        validate_request(SynthesisRequest(ref_audio=b"RIFF....", ref_text="hi"), BASE)


@pytest.mark.parametrize("value", [0, 4097])
def test_max_new_tokens_outside_vllm_omni_bounds_is_refused(value: int) -> None:
    with pytest.raises(BadRequestError, match=r"max_new_tokens must be between 1 and 4096"):
        validate_request(SynthesisRequest(max_new_tokens=value), CUSTOM_06B)
