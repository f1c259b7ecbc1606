"""Qwen3-ForcedAligner through ``qwen_asr`` (issue 29): loading, the units mapped back to the text, and structure.

The model tests run the real ``qwen_asr`` path on a tiny random checkpoint built offline
(``support.forced_aligner``): random weights place units anywhere, so they assert structure — every word of the
text present at its own offsets (CJK per character), in order, monotone, inside the audio — not accuracy, which
needs the published weights (not downloadable here). ``timings`` is tested on its own with hand-made units.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from speakwire.aligners.base import AlignerOptions
from speakwire.aligners.qwen3 import timings, tokenizer_language
from speakwire.aligners.registry import canonical_name, load_aligner
from speakwire.cli.main import build_parser
from speakwire.cli.serve import build_settings
from speakwire.settings import Settings
from speakwire.text.alignment import WordTiming
from support.live_server import free_port

RATE = 24000
SENTENCES = {
    "english": "Hello there, Dr. Smith — it's 50% off!",
    "chinese": "你好，世界。今天天气很好！",
    "japanese": "今日はとても良い天気ですね。",
    "korean": "안녕하세요, 오늘 날씨가 좋네요.",
    "german": "Guten Tag, wie geht's? Schön, dass du da bist.",
    "french": "Bonjour, l'été est très beau aujourd'hui.",
    "spanish": "¡Hola! ¿Cómo estás? Mañana será un buen día.",
    "portuguese": "Olá, tudo bem? Amanhã vai ser um ótimo dia.",
    "italian": "Ciao, come stai? Domani sarà una bella giornata.",
    "russian": "Привет, как дела? Завтра будет хороший день.",
}
"""A sentence in each of Qwen3-TTS's ten languages, with the punctuation each writes."""


def assert_structure(text: str, words: list[WordTiming], duration_s: float) -> None:
    """Each word a piece of ``text`` at its own offsets, the pieces covering every word in order, times monotone and
    inside the audio."""
    assert words, "every word present (or the sentence reported unalignable, which these are not)"
    previous_end, previous_char = 0.0, 0
    for word in words:
        assert text[word.char_start : word.char_end] == word.text and word.text.strip() == word.text
        assert word.char_start >= previous_char
        assert previous_end <= word.start_s <= word.end_s <= duration_s
        previous_end, previous_char = word.end_s, word.char_end
    assert "".join(w.text for w in words) == "".join(text.split())  # together they are the whole text


# ----- the units mapped back to the text (no model) ------------------------------------------------------------


def test_units_map_back_to_the_words_they_came_from_and_a_word_without_one_takes_its_gap() -> None:
    text = "Hello, Dr. Smith — it's U.S. made!"
    units = [("Hello", 0.1, 0.4), ("Dr", 0.5, 0.7), ("Smith", 0.7, 1.0), ("it's", 1.3, 1.5), ("US", 1.5, 1.9),
             ("made", 2.0, 2.3)]  # fmt: skip
    words = timings(text, units, 2.5)
    assert [w.text for w in words] == text.split()
    dash = words[3]
    assert (dash.text, dash.start_s, dash.end_s) == ("—", 1.0, 1.3)  # the gap between its neighbours
    assert [(w.start_s, w.end_s) for w in words if w.text != "—"] == [(a, b) for _, a, b in units]


def test_text_without_spaces_is_timed_per_unit_with_punctuation_riding_on_the_unit_before() -> None:
    text = "你好，我用iPhone。"
    units = [("你", 0.0, 0.2), ("好", 0.2, 0.4), ("我", 0.6, 0.8), ("用", 0.8, 1.0), ("iPhone", 1.0, 1.6)]
    words = timings(text, units, 2.0)
    assert [w.text for w in words] == ["你", "好，", "我", "用", "iPhone。"]
    assert [(w.char_start, w.char_end) for w in words] == [(0, 1), (1, 3), (3, 4), (4, 5), (5, 12)]


def test_times_are_clamped_inside_the_audio_and_made_monotone() -> None:
    words = timings("one two three", [("one", 0.5, 0.9), ("two", 0.2, 0.4), ("three", 9.0, 400.0)], 1.5)
    assert [(w.start_s, w.end_s) for w in words] == [(0.5, 0.9), (0.9, 0.9), (1.5, 1.5)]


def test_a_unit_that_is_not_in_the_text_makes_the_sentence_unalignable() -> None:
    assert timings("Hello there.", [("Hello", 0.0, 0.3), ("where", 0.3, 0.6)], 1.0) == []
    assert timings("Hello there.", [], 1.0) == []


def test_the_tokenizer_language_follows_the_script() -> None:
    assert tokenizer_language(SENTENCES["japanese"]) == "Japanese"
    assert tokenizer_language(SENTENCES["korean"]) == "Korean"
    assert tokenizer_language(SENTENCES["chinese"]) == "English"  # the whitespace cut splits ideographs itself
    assert tokenizer_language(SENTENCES["russian"]) == "English"


def test_qwen3_names_keep_their_models_case_and_need_a_model() -> None:
    assert canonical_name(" QWEN3:Qwen/Qwen3-ForcedAligner-0.6B ") == "qwen3:Qwen/Qwen3-ForcedAligner-0.6B"
    assert canonical_name("PocketSphinx") == "pocketsphinx"
    with pytest.raises(ValueError, match="names no model"):
        canonical_name("qwen3:")
    with pytest.raises(ValueError, match=r"qwen3:<model>"):
        canonical_name("whisper")


def test_the_aligner_flags_and_variables_reach_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    def settings(*flags: str) -> Settings:
        return build_settings(build_parser().parse_args(["serve", *flags]))

    given = settings("--aligner", "QWEN3:Qwen/Qwen3-ForcedAligner-0.6B", "--aligner-timeout", "3", "--aligner-download")
    assert (given.aligner, given.aligner_timeout_s, given.aligner_download) == (
        "qwen3:Qwen/Qwen3-ForcedAligner-0.6B", 3.0, True)  # fmt: skip
    default = settings()
    assert (default.aligner_timeout_s, default.aligner_download) == (None, False)
    monkeypatch.setenv("SPEAKWIRE_ALIGNER_TIMEOUT", "4.5")
    monkeypatch.setenv("SPEAKWIRE_ALIGNER_DOWNLOAD", "1")
    from_env = settings()
    assert (from_env.aligner_timeout_s, from_env.aligner_download) == (4.5, True)
    with pytest.raises(SystemExit):
        settings("--aligner-timeout", "0")  # a bound of nothing would drop every sentence's words


def test_a_missing_directory_or_an_uncached_hub_id_is_refused_without_downloading() -> None:
    with pytest.raises(FileNotFoundError, match="no aligner model directory"):
        load_aligner("qwen3:/no/such/aligner")
    with pytest.raises(FileNotFoundError, match="--aligner-download"):
        load_aligner("qwen3:speakwire-tests/not-a-cached-aligner", AlignerOptions(download=False))


def test_serve_stops_at_once_when_the_qwen3_aligner_cannot_load() -> None:
    command = [sys.executable, "-m", "speakwire", "serve", "--port", str(free_port()), "--aligner",
               "qwen3:speakwire-tests/not-a-cached-aligner"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, timeout=120, check=False, env=os.environ.copy())
    last = result.stderr.decode().strip().splitlines()[-1]
    assert result.returncode == 1
    assert last.startswith("speakwire: the aligner 'qwen3:speakwire-tests/not-a-cached-aligner' failed to load:")
    assert "--aligner-download" in last


# ----- the real qwen_asr path on a tiny random checkpoint -------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_aligner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, object]]:
    pytest.importorskip("qwen_asr", reason='pip install "speakwire[qwen,align-qwen]" && pip install --no-deps qwen-asr')
    import torch

    from support.forced_aligner import build_tiny_forced_aligner

    torch.set_num_threads(1)  # a tiny model gains nothing from intra-op threads on a busy 2-core machine
    directory = build_tiny_forced_aligner(tmp_path_factory.mktemp("forced-aligner"))
    aligner = load_aligner(f"qwen3:{directory}", AlignerOptions(device="cpu"))
    assert aligner is not None
    yield directory, aligner
    aligner.close()


def babble(seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (0.2 * rng.standard_normal(int(seconds * RATE))).astype(np.float32)


def test_the_tiny_checkpoint_loads_from_its_directory_with_its_languages(tiny_aligner: tuple[Path, object]) -> None:
    directory, aligner = tiny_aligner
    assert aligner.name == f"qwen3:{directory}"  # type: ignore[attr-defined]
    languages = aligner.languages  # type: ignore[attr-defined]
    assert {"english", "chinese", "japanese", "korean", "german", "french", "spanish", "portuguese", "italian"} <= (
        languages
    )
    assert "russian" not in languages  # not among the ForcedAligner's eleven: Russian utterances go untimed


@pytest.mark.parametrize("language", sorted(SENTENCES))
def test_every_word_is_timed_in_order_inside_the_audio(tiny_aligner: tuple[Path, object], language: str) -> None:
    _, aligner = tiny_aligner
    text = SENTENCES[language]
    words = aligner.align(babble(2.5), RATE, text)  # type: ignore[attr-defined]
    assert_structure(text, words, 2.5)
    if language == "chinese":
        assert len(words) == sum(ch.isalpha() for ch in text)  # one per character, punctuation riding along
    elif language != "japanese":
        assert [w.text for w in words] == text.split()


def test_silence_gets_no_words(tiny_aligner: tuple[Path, object]) -> None:
    _, aligner = tiny_aligner
    assert aligner.align(np.zeros(RATE, np.float32), RATE, SENTENCES["english"]) == []  # type: ignore[attr-defined]
