"""The segmenter cuts where a reader would pause, never inside numbers or after titles, and the same way
whether text arrives whole or one character at a time."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speakwire.text.segmenter import ChunkSchedule, Granularity, Segment, Segmenter, split_text

# Every piece its own segment, no early clause cut: isolates the boundary rules from the size schedule.
PIECES = ChunkSchedule(first_clause_min_chars=0, min_chars=(0,))


def spoken(segments: list[Segment]) -> list[str]:
    return [segment.spoken for segment in segments]


def fed_in_pieces(text: str, cuts: list[int], granularity: Granularity, schedule: ChunkSchedule) -> list[Segment]:
    segmenter = Segmenter(granularity, schedule)
    segments: list[Segment] = []
    start = 0
    for cut in [*sorted(cuts), len(text)]:
        segments += segmenter.feed(text[start:cut])
        start = max(start, cut)
    return segments + segmenter.flush()


def fed_one_char_at_a_time(text: str, granularity: Granularity, schedule: ChunkSchedule) -> list[Segment]:
    return fed_in_pieces(text, list(range(len(text))), granularity, schedule)


SENTENCE_CASES = [
    ("Hello world. How are you? I am fine!", ["Hello world.", "How are you?", "I am fine!"]),
    ("Really?! Yes.", ["Really?!", "Yes."]),
    ('She said "Stop!" Then she left.', ['She said "Stop!"', "Then she left."]),
    ("(See below.) Next one.", ["(See below.)", "Next one."]),
    ("Pi is 3.14 today. Yes.", ["Pi is 3.14 today.", "Yes."]),
    ("It costs $3.50 now. Fine.", ["It costs $3.50 now.", "Fine."]),
    ("It costs $29. Next item.", ["It costs $29.", "Next item."]),
    ("Dr. Smith met Mr. Jones. They talked.", ["Dr. Smith met Mr. Jones.", "They talked."]),
    ("Ask Prof. Lee and Mrs. Ng. Go.", ["Ask Prof. Lee and Mrs. Ng.", "Go."]),
    ("He lives on Main St. The shop is near.", ["He lives on Main St. The shop is near."]),
    ("Red vs. Blue is on. Watch.", ["Red vs. Blue is on.", "Watch."]),
    ("Apples, pears, etc. and more. Fine.", ["Apples, pears, etc. and more.", "Fine."]),
    ("Apples, pears, etc. Then more.", ["Apples, pears, etc.", "Then more."]),
    (
        "We met at 5 p.m. today. Then at 6 p.m. Tom left.",
        ["We met at 5 p.m. today.", "Then at 6 p.m.", "Tom left."],
    ),
    ("Fruit, e.g. Apples, is good. Yes.", ["Fruit, e.g. Apples, is good.", "Yes."]),
    ("One thing, i.e. Bob, stays. Ok.", ["One thing, i.e. Bob, stays.", "Ok."]),
    ("The U.S. Army is big. Yes.", ["The U.S. Army is big.", "Yes."]),
    ("Acme Inc. announced it. Ok.", ["Acme Inc. announced it.", "Ok."]),
    ("See Fig. 3 below. Ok.", ["See Fig. 3 below.", "Ok."]),
    ("No. I won't. See No. 5 now.", ["No.", "I won't.", "See No. 5 now."]),
    ("J. R. R. Tolkien wrote. He died.", ["J. R. R. Tolkien wrote.", "He died."]),
    (
        "Go to https://example.com/a.b?c=d now. Or www.x.org. Then stop.",
        ["Go to https://example.com/a.b?c=d now.", "Or www.x.org.", "Then stop."],
    ),
    ("Mail a.b@x.com today. Thanks.", ["Mail a.b@x.com today.", "Thanks."]),
    ("Python 3.11.7 is out. Also v1.2.3. Good.", ["Python 3.11.7 is out.", "Also v1.2.3.", "Good."]),
    ("Steps:\n1. Mix it.\n2. Bake it.", ["Steps:\n1. Mix it.", "2. Bake it."]),
    ("1. First item here", ["1. First item here"]),
    ("I counted to 3. Then I stopped.", ["I counted to 3.", "Then I stopped."]),
    ("Cost approx. five dollars. Ok.", ["Cost approx. five dollars.", "Ok."]),
    ("Is it? yes it is. Ok.", ["Is it? yes it is.", "Ok."]),
    ("Wait... what happened? Ok.", ["Wait... what happened?", "Ok."]),
    ("Well… I think so. Hmm... Maybe.", ["Well…", "I think so.", "Hmm...", "Maybe."]),
    ("Wait... 5 more. Ok.", ["Wait... 5 more.", "Ok."]),
    ("Title\n\nBody text here.", ["Title", "Body text here."]),
    ("Dear Dr.\n\nThanks a lot.", ["Dear Dr.", "Thanks a lot."]),
    ("Line one\nline two.", ["Line one\nline two."]),
    ("你好。世界！再见？", ["你好。", "世界！", "再见？"]),
    ("他说：「你好。」然后走了。", ["他说：「你好。」", "然后走了。"]),
    ("Hi. X! Done.", ["Hi.", "X! Done."]),
    ("Hi. ... Then more.", ["Hi.", "... Then more."]),
]


@pytest.mark.parametrize(("text", "expected"), SENTENCE_CASES)
def test_sentence_mode_cuts_only_at_real_sentence_ends(text: str, expected: list[str]) -> None:
    assert spoken(split_text(text, "sentence", PIECES)) == expected


CLAUSE_CASES = [
    ("One, two; three: four — five, six.", ["One,", "two;", "three:", "four —", "five,", "six."]),
    ("It was 22,1 or 1,000 units, roughly.", ["It was 22,1 or 1,000 units,", "roughly."]),
    ("At 3:30 we met, then left.", ["At 3:30 we met,", "then left."]),
    ("Well—maybe, yes.", ["Well—maybe,", "yes."]),
    ('"Hello," she said.', ['"Hello,"', "she said."]),
    ("好的，谢谢、再见；走吧。", ["好的，", "谢谢、", "再见；", "走吧。"]),
    ("Dr. Smith, hi. Ok.", ["Dr. Smith,", "hi.", "Ok."]),
]


@pytest.mark.parametrize(("text", "expected"), CLAUSE_CASES)
def test_clause_mode_also_cuts_at_clause_marks(text: str, expected: list[str]) -> None:
    assert spoken(split_text(text, "clause", PIECES)) == expected


@pytest.mark.parametrize(("text", "expected"), [*SENTENCE_CASES, *CLAUSE_CASES])
def test_feeding_one_character_at_a_time_gives_the_same_segments(text: str, expected: list[str]) -> None:
    for granularity in ("sentence", "clause"):
        whole = split_text(text, granularity, PIECES)
        assert fed_one_char_at_a_time(text, granularity, PIECES) == whole


@pytest.mark.parametrize(("text", "expected"), [*SENTENCE_CASES, *CLAUSE_CASES])
def test_segment_texts_join_back_to_the_input(text: str, expected: list[str]) -> None:
    assert "".join(segment.text for segment in split_text(text, "clause")) == text


def test_none_mode_emits_one_segment_at_flush() -> None:
    segmenter = Segmenter("none")
    assert segmenter.feed("Hello there. How are you? ") == []
    assert segmenter.feed("Fine, thanks.") == []
    assert segmenter.pending == "Hello there. How are you? Fine, thanks."
    assert segmenter.flush() == [Segment("Hello there. How are you? Fine, thanks.", 0)]


def test_none_mode_does_not_cut_long_text() -> None:
    text = "word " * 200
    assert [segment.text for segment in split_text(text, "none")] == [text]


# ----- lookahead ---------------------------------------------------------------------------------------


def test_money_at_the_end_waits_for_the_next_word() -> None:
    segmenter = Segmenter("sentence", PIECES)
    assert segmenter.feed("$29.") == []
    assert segmenter.pending == "$29."
    assert segmenter.feed(" ") == []
    assert segmenter.feed("Next") == [Segment("$29. ", 0)]
    assert segmenter.flush() == [Segment("Next", 1)]


def test_a_period_then_digits_is_a_decimal_not_a_sentence_end() -> None:
    segmenter = Segmenter("sentence", PIECES)
    assert segmenter.feed("Pi is 3.") == []
    assert segmenter.feed("14 exactly. And") == [Segment("Pi is 3.14 exactly. ", 0)]


def test_etc_waits_for_the_case_of_the_next_word() -> None:
    segmenter = Segmenter("sentence", PIECES)
    assert segmenter.feed("Cats, dogs, etc. ") == []
    assert spoken(segmenter.feed("And")) == ["Cats, dogs, etc."]


def test_flush_emits_what_lookahead_held_back() -> None:
    segmenter = Segmenter("sentence", PIECES)
    assert segmenter.feed("It costs $29.") == []
    assert segmenter.flush() == [Segment("It costs $29.", 0)]


def test_a_segment_keeps_its_trailing_whitespace_and_the_next_starts_at_a_word() -> None:
    assert [segment.text for segment in split_text("  Hello.  \n World. ", schedule=PIECES)] == [
        "  Hello.  \n ",
        "World. ",
    ]


def test_whitespace_only_input_yields_no_segment() -> None:
    assert split_text("   \n\t ") == []
    assert split_text("") == []


def test_flush_resets_the_segmenter_for_a_new_text() -> None:
    segmenter = Segmenter("sentence", PIECES)
    first = segmenter.feed("One. Two.") + segmenter.flush()
    second = segmenter.feed("Three. Four.") + segmenter.flush()
    assert [(s.spoken, s.index) for s in first] == [("One.", 0), ("Two.", 1)]
    assert [(s.spoken, s.index) for s in second] == [("Three.", 0), ("Four.", 1)]
    assert segmenter.pending == ""


# ----- the size schedule ---------------------------------------------------------------------------------


def test_first_segment_ends_at_a_clause_once_it_is_long_enough() -> None:
    segments = split_text("Hello there, how are you today? I am fine.")
    assert spoken(segments)[0] == "Hello there,"


def test_first_segment_skips_clause_marks_before_the_minimum() -> None:
    segments = split_text("Hi, Bob, how are you? Fine.")
    assert spoken(segments)[0] == "Hi, Bob, how are you?"


def test_first_clause_rule_can_be_switched_off() -> None:
    segments = split_text("Hello there, how are you? Fine.", schedule=ChunkSchedule(first_clause_min_chars=0))
    assert spoken(segments)[0] == "Hello there, how are you?"


def test_only_the_first_segment_ends_at_a_clause_in_sentence_mode() -> None:
    schedule = ChunkSchedule(min_chars=(0,))
    segments = split_text("Hello there, how are you? I am fine, thanks, really.", schedule=schedule)
    assert spoken(segments) == ["Hello there,", "how are you?", "I am fine, thanks, really."]


def test_later_segments_merge_sentences_up_to_a_growing_minimum() -> None:
    text = " ".join(f"This is sentence {n}." for n in range(1, 30))
    segments = split_text(text)
    lengths = [len(segment.spoken) for segment in segments]
    assert segments[0].spoken == "This is sentence 1."
    assert lengths[1] >= 40
    assert lengths[2] >= 80
    assert all(length >= 120 for length in lengths[3:-1])
    assert "".join(segment.text for segment in segments) == text


def test_merging_never_grows_a_segment_past_max_chars() -> None:
    text = " ".join(f"Sentence number {n} is here." for n in range(1, 20))
    segments = split_text(text, schedule=ChunkSchedule(min_chars=(0, 1000), max_chars=60))
    assert all(len(segment.spoken) <= 60 for segment in segments)
    assert len(segments) > 5


def test_a_long_sentence_is_cut_at_its_last_clause_mark_within_max_chars() -> None:
    text = "This sentence is rather long, and it keeps going; on and on without any end in sight."
    schedule = ChunkSchedule(first_clause_min_chars=0, max_chars=60, min_chars=(0,))
    assert spoken(split_text(text, schedule=schedule)) == [
        "This sentence is rather long, and it keeps going;",
        "on and on without any end in sight.",
    ]


def test_a_long_sentence_without_clause_marks_is_cut_at_a_space() -> None:
    text = "word " * 30 + "end."
    segments = split_text(text, schedule=ChunkSchedule(max_chars=42, min_chars=(0,)))
    assert all(len(segment.spoken) <= 42 for segment in segments)
    assert all(segment.text.endswith(" ") for segment in segments[:-1])
    assert "".join(segment.text for segment in segments) == text


def test_a_space_cut_never_separates_a_title_from_its_name() -> None:
    text = "x " * 19 + "Dr. Smith went home and slept"
    segments = split_text(text, schedule=ChunkSchedule(max_chars=43, min_chars=(0,)))
    assert not any(segment.spoken.endswith("Dr.") for segment in segments)
    assert any(segment.spoken.startswith("Dr. Smith") for segment in segments)


def test_text_without_any_space_is_cut_hard_at_max_chars() -> None:
    segments = split_text("x" * 100, schedule=ChunkSchedule(max_chars=40, min_chars=(0,)))
    assert [len(segment.text) for segment in segments] == [40, 40, 20]


def test_first_words_cuts_the_first_segment_without_punctuation() -> None:
    segments = split_text("one two three four five. six", schedule=ChunkSchedule(first_words=3))
    assert spoken(segments)[0] == "one two three"


def test_first_words_is_off_by_default() -> None:
    assert spoken(split_text("one two three four five six seven eight nine ten"))[0].endswith("ten")


def test_segment_indexes_count_from_zero() -> None:
    segments = split_text("One. Two. Three.", schedule=PIECES)
    assert [segment.index for segment in segments] == [0, 1, 2]


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="granularity"):
        Segmenter("word")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_chars"):
        ChunkSchedule(max_chars=0)
    with pytest.raises(ValueError, match="negative"):
        ChunkSchedule(min_chars=(0, -1))


def test_feeding_ten_thousand_characters_one_at_a_time_is_fast() -> None:
    text = ("Hello there, how are you? I paid $3.50 for Dr. Smith's book, etc. It was fine. " * 200)[:10_000]
    segmenter = Segmenter()
    started = time.perf_counter()
    for char in text:
        segmenter.feed(char)
    segmenter.flush()
    assert time.perf_counter() - started < 1.0


# ----- properties ------------------------------------------------------------------------------------------

FRAGMENTS = [
    *("Hello", "world", "the", "cat", "I", "A.", "x", "Tolkien.", "Dr.", "Mr.", "St.", "etc."),
    *("e.g.", "a.m."),
    *("U.S.", "No.", "J.", "3.14", "$29.", "$3.50", "1,000", "22,1", "v1.2.3", "www.x.org", "a@b.com", "1."),
    *(".", "...", "…", "?", "!", "?!", ",", ";", ":", "—", '"', "(", ")", "你好。", "，", "、", "！"),
    *(" ", " ", " ", "  ", "\n", "\n\n", "\t"),
]
texts = st.one_of(
    st.lists(st.sampled_from(FRAGMENTS), max_size=80).map("".join),
    st.text(max_size=300),
)
schedules = st.builds(
    ChunkSchedule,
    first_clause_min_chars=st.integers(0, 20),
    min_chars=st.lists(st.integers(0, 80), min_size=1, max_size=4).map(tuple),
    max_chars=st.integers(1, 120),
    first_words=st.integers(0, 4),
)
granularities = st.sampled_from(["none", "sentence", "clause"])


@settings(max_examples=400, deadline=None)
@given(text=texts, cuts=st.lists(st.integers(0, 300)), granularity=granularities, schedule=schedules)
def test_feeding_in_any_pieces_equals_feeding_whole(
    text: str, cuts: list[int], granularity: Granularity, schedule: ChunkSchedule
) -> None:
    cuts = [cut for cut in cuts if cut <= len(text)]
    assert fed_in_pieces(text, cuts, granularity, schedule) == split_text(text, granularity, schedule)


@settings(max_examples=400, deadline=None)
@given(text=texts, granularity=granularities, schedule=schedules)
def test_segments_cover_the_input_in_order_and_none_is_empty(
    text: str, granularity: Granularity, schedule: ChunkSchedule
) -> None:
    segments = split_text(text, granularity, schedule)
    joined = "".join(segment.text for segment in segments)
    assert joined == (text if text.strip() else "")  # only whitespace-only input is dropped
    assert all(segment.spoken for segment in segments)
    assert [segment.index for segment in segments] == list(range(len(segments)))
