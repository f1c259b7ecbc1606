"""Word alignment without a model: text words against spoken words, and marks back onto the original text."""

from __future__ import annotations

import itertools

import pytest

from speakwire.engines.piper_alignment import PiperWordMarks, phoneme_samples, phoneme_words
from speakwire.text.alignment import (
    SegmentWords,
    WordMark,
    WordTiming,
    _boundary_maps,
    match_words,
    pauses_after,
    spoken_size,
    word_spans,
)
from speakwire.text.normalize import normalize_english

RATE = 1000  # one sample per millisecond keeps the arithmetic readable

AWKWARD = [
    "It costs $5, or $3.50 on Jan 5, 2024 at 3:30 pm.",
    "Dr. Smith lives on Elm St. near the U.S. border, e.g. in Maine.",
    "Call 555-123-4567 or email bob@example.com, see https://example.com/a.",
    "The 1990s, 50%, 5 km, 3/4, #1, 2 + 2 = 4, v1.2.3",
    "Hello — world... what?! (really) \"quoted\" 'single'",
    "this is an unpunctuated run on sentence that just keeps going and going without any stop at all because "
    "the writer never learned where to put a period and so it goes on",
    "naïve café résumé Zürich São Paulo Ελληνικά 日本語",
    "I love it 😀 🎉 so much ❤️ — really!!",
    "$2.5 million for 1,234 people in 1999; 15 March 2024 (about 10:00).",
    "A&B, x & y, 5-10 items, 3 - 4 days",
]


def engine_marks(normalized: str, *, silent: str = "") -> list[WordMark]:
    """What an ideal engine reports: every word of its text, 100 ms each, 20 ms apart (a word in ``silent``
    is given the pause it sits in: no time of its own)."""
    marks, at = [], 0
    for start, end in word_spans(normalized):
        if normalized[start:end] in silent.split():
            marks.append(WordMark(start, end, at, at))
            continue
        marks.append(WordMark(start, end, at, at + 100))
        at += 120
    return marks


def timings(original: str, *, offset: int = 0, start_s: float = 0.0, batches: int = 1) -> list[WordTiming]:
    normalized = normalize_english(original)
    words = SegmentWords(original, normalized, offset=offset, rate=RATE, start_s=start_s)
    marks = engine_marks(normalized)
    out: list[WordTiming] = []
    size = max(1, -(-len(marks) // batches))
    for at in range(0, len(marks), size):
        out += words.add(marks[at : at + size])
    return out + words.finish()


def assert_well_formed(text: str, words: list[WordTiming], *, offset: int = 0) -> None:
    assert [w.text for w in words] == text.split()
    previous_end = 0.0
    for word in words:
        assert text[word.char_start - offset : word.char_end - offset] == word.text
        assert previous_end <= word.start_s <= word.end_s
        if any(char.isalnum() for char in word.text):
            assert word.end_s > word.start_s, word
        previous_end = word.end_s


@pytest.mark.parametrize("text", AWKWARD)
def test_every_original_word_gets_a_timing_in_order_without_overlap(text: str) -> None:
    assert_well_formed(text, timings(text))


@pytest.mark.parametrize("text", AWKWARD)
def test_marks_in_pieces_give_the_same_words_as_marks_at_once(text: str) -> None:
    assert timings(text, batches=5) == timings(text)


def test_money_spans_all_the_words_it_is_read_as() -> None:
    words = {w.text: w for w in timings("It costs $5, today.")}
    # "It costs five dollars, today." : marks are 100 ms each, 20 ms apart
    assert (words["$5,"].start_s, words["$5,"].end_s) == (0.24, 0.46)
    assert (words["today."].start_s, words["today."].end_s) == (0.48, 0.58)


def test_a_date_maps_word_for_word_onto_its_reading() -> None:
    words = timings("on Jan 5, 2024 at")
    # "on January fifth, twenty twenty-four at"
    assert [(w.text, round(w.start_s, 2), round(w.end_s, 2)) for w in words] == [
        ("on", 0.0, 0.1), ("Jan", 0.12, 0.22), ("5,", 0.24, 0.34), ("2024", 0.36, 0.58), ("at", 0.6, 0.7),
    ]  # fmt: skip


def test_an_abbreviation_spans_its_expansion() -> None:
    words = timings("Dr. Smith, e.g. him")
    assert [w.text for w in words] == ["Dr.", "Smith,", "e.g.", "him"]
    by_text = {w.text: w for w in words}
    assert (by_text["Dr."].start_s, by_text["Dr."].end_s) == (0.0, 0.1)  # "Doctor"
    assert (by_text["e.g."].start_s, by_text["e.g."].end_s) == (0.24, 0.46)  # "for example"


def test_offsets_and_times_are_on_the_utterance() -> None:
    text = "Second sentence here."
    words = timings(text, offset=40, start_s=2.5)
    assert words[0].char_start == 40 and words[0].start_s == 2.5
    assert_well_formed(text, words, offset=40)


def test_a_word_without_a_mark_gets_the_pause_it_sits_in() -> None:
    text = "Hello — world"
    words = SegmentWords(text, text, offset=0, rate=RATE, start_s=0.0)
    out = words.add([WordMark(0, 5, 0, 100), WordMark(8, 13, 120, 220)])
    dash = out[1]
    assert dash.text == "—" and 0.1 < dash.start_s < dash.end_s < 0.12


def test_words_wait_for_marks_past_their_end_and_finish_settles_the_rest() -> None:
    text = "one two three"
    words = SegmentWords(text, text, offset=0, rate=RATE, start_s=0.0)
    assert words.add([WordMark(0, 3, 0, 100)]) == [WordTiming("one", 0, 3, 0.0, 0.1)]
    assert words.add([]) == []
    assert [w.text for w in words.finish()] == ["two", "three"]  # at the last mark, zero-length
    assert words.done


def test_no_marks_means_no_words() -> None:
    assert SegmentWords("some text", "some text", offset=0, rate=RATE, start_s=0.0).finish() == []


def test_disordered_or_overlapping_marks_do_not_break_monotonicity() -> None:
    text = "alpha beta gamma"
    words = SegmentWords(text, text, offset=0, rate=RATE, start_s=0.0)
    out = words.add([WordMark(11, 16, 50, 90), WordMark(0, 5, 0, 100), WordMark(6, 10, 80, 60)])
    out += words.finish()
    assert [w.text for w in out] == text.split()
    assert all(a.end_s <= b.start_s and b.start_s <= b.end_s for a, b in itertools.pairwise(out))


def test_boundary_maps_of_identical_text_are_the_identity() -> None:
    first, last = _boundary_maps("same text", "same text")
    assert first == last == list(range(10))


def test_boundary_maps_put_inserted_text_on_both_sides_of_its_boundary() -> None:
    first, last = _boundary_maps("Jan 5", "January fifth")
    assert last[3] == 7  # the word "Jan" ends after "uary"
    assert first[4] == 8  # "5" starts at "fifth"


@pytest.mark.parametrize("text", ["", "   ", "x" * 5000, "🎉" * 300, "1 " * 2000])
def test_alignment_never_raises_on_degenerate_text(text: str) -> None:
    assert_well_formed(text, timings(text))


# ----- matching text words with spoken words --------------------------------------------------------------


def match(text: list[str], spoken: list[str], **kwargs: object) -> list[tuple[int, int, int, int]]:
    return match_words(
        [spoken_size(word) for word in text], [pauses_after(word) for word in text],
        [float(len(word.rstrip(",.;:!?"))) for word in spoken], [word[-1] in ",.;:!?" for word in spoken],
        **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


def test_equal_words_pair_one_to_one() -> None:
    assert match(["thanks", "for", "calling."], ["θæŋks", "fɔɹ", "kɔlɪŋ."]) == [
        (0, 1, 0, 1), (1, 2, 1, 2), (2, 3, 2, 3),
    ]  # fmt: skip


def test_espeak_merging_of_the_gives_both_text_words_one_spoken_word() -> None:
    groups = match(["one", "of", "the", "best"], ["wʌn", "ʌvðə", "bɛst"])
    assert (1, 3, 1, 2) in groups


def test_an_emoji_said_as_its_name_takes_both_spoken_words() -> None:
    groups = match(["I", "love", "😀", "so"], ["aɪ", "lʌv", "ɡɹɪnɪŋ", "feɪs", "soʊ"], max_splits=[3, 3, 6, 3])
    assert (2, 3, 2, 4) in groups


def test_a_dash_said_as_nothing_takes_no_spoken_word() -> None:
    groups = match(["Hello", "—", "world"], ["həloʊ", "wɜːld"])
    assert (1, 2, 1, 1) in groups or (0, 2, 0, 1) in groups


def test_an_open_end_stops_after_a_sentence_mark() -> None:
    text = ["Hi", "there.", "How", "are", "you?"]
    groups = match(text, ["haɪ", "ðɛɹ."], text_stops=[w.endswith((".", "?")) for w in text])
    assert groups[-1][1] == 2


@pytest.mark.parametrize(
    ("text", "spoken"), [([], []), (["a"], []), ([], ["ə"]), (["—", "—"], ["ə"]), (["word"] * 40, ["x"])]
)
def test_matching_covers_both_sides_whatever_the_counts(text: list[str], spoken: list[str]) -> None:
    groups = match(text, spoken)
    assert [g[1] for g in groups][-1:] == ([len(text)] if groups else [])
    covered = [j for g in groups for j in range(g[2], g[3])]
    assert covered == list(range(len(spoken)))
    assert all(a[1] == b[0] and a[3] == b[2] for a, b in itertools.pairwise(groups))


# ----- Piper: phoneme ids timed, espeak words on the text ---------------------------------------------------

ID_MAP = {"^": [1], "_": [0], "$": [2], " ": [3], ".": [10], ",": [8]} | {
    char: [20 + i] for i, char in enumerate("həlˈoʊwɜːdɪsθæŋkfɔɹðzt")
}


def ids_of(phonemes: list[str]) -> list[int]:
    ids = [1, 0]
    for phoneme in phonemes:
        ids += [*ID_MAP[phoneme], 0]
    return [*ids, 2]


def test_phoneme_samples_give_each_phoneme_its_ids_and_the_pad_after_it() -> None:
    phonemes = list("hə wɜ")
    id_samples = [256] * len(ids_of(phonemes))
    spans = phoneme_samples(phonemes, ID_MAP, id_samples)
    assert spans is not None and spans[0] == (512, 1024) and spans[-1] == (10 * 256, 12 * 256)
    assert phoneme_samples(phonemes, ID_MAP, id_samples[:-1]) is None  # not Piper's layout: no guessing


def test_phoneme_words_split_at_the_space_phoneme() -> None:
    assert [w.phonemes for w in phoneme_words(list(" həlˈoʊ, wɜːld. "))] == ["həlˈoʊ,", "wɜːld."]


def test_piper_marks_time_each_text_word_from_its_phonemes() -> None:
    text = "Hello, world."
    sentence = list("həlˈoʊ, wɜːld.")
    marks = PiperWordMarks(text, [sentence])
    id_samples = [256] * len(ids_of(sentence))
    out = marks.sentence(0, sentence, ID_MAP, id_samples, offset=1000, length=sum(id_samples))
    assert [(m.char_start, m.char_end) for m in out] == [(0, 6), (7, 13)]
    hello, world = out
    assert hello.start == 1000 + 2 * 256  # after "^" and its pad
    assert hello.end == 1000 + 2 * 256 + 6 * 512  # six sounding phonemes, the comma's pause left out
    assert world.start == hello.end + 2 * 512  # the comma and the space lie between
    assert world.end <= 1000 + sum(id_samples)


def test_piper_marks_share_sentences_and_skip_none() -> None:
    text = "Hello. This is it. Thanks"
    sentences = [list("həlˈoʊ."), list("ðɪs ɪz ɪt."), list("θæŋks")]
    marks = PiperWordMarks(text, sentences)
    out = []
    for index, sentence in enumerate(sentences):
        id_samples = [100] * len(ids_of(sentence))
        out += marks.sentence(index, sentence, ID_MAP, id_samples, 0, 9999)
    assert [text[m.char_start : m.char_end] for m in out] == text.split()


def test_piper_marks_without_durations_claim_their_words_unmarked() -> None:
    text = "Hello. World"
    sentences = [list("həlˈoʊ."), list("wɜːld")]
    marks = PiperWordMarks(text, sentences)
    assert marks.sentence(0, sentences[0], ID_MAP, None, 0, 0) == ()
    later = marks.sentence(1, sentences[1], ID_MAP, [100] * len(ids_of(sentences[1])), 5000, 1000)
    assert [text[m.char_start : m.char_end] for m in later] == ["World"]
