"""English normalization reads numbers, money, dates, times, units and abbreviations as a person would, and
leaves everything else alone."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speakwire.text import normalize
from speakwire.text.normalize import normalize_english

CARDINALS = [
    ("0", "zero"),
    ("7", "seven"),
    ("13", "thirteen"),
    ("42", "forty-two"),
    ("100", "one hundred"),
    ("101", "one hundred one"),
    ("999", "nine hundred ninety-nine"),
    ("1,234", "one thousand two hundred thirty-four"),
    ("1,000,000", "one million"),
    ("3,000,000,017", "three billion seventeen"),
    ("1000000000000", "one trillion"),
    ("I have 12 apples.", "I have twelve apples."),
    ("-5 is cold", "minus five is cold"),
    ("It fell to -12.", "It fell to minus twelve."),
    ("+3 points", "plus three points"),
    ("007", "zero zero seven"),
    (
        "12345678901234567890",
        "one two three four five six seven eight nine zero one two three four five six seven eight nine zero",
    ),
    ("COVID-19", "COVID-nineteen"),
    ("22,1", "twenty-two,one"),
]
ORDINALS = [
    ("1st", "first"),
    ("2nd", "second"),
    ("3rd", "third"),
    ("4th", "fourth"),
    ("12th", "twelfth"),
    ("20th", "twentieth"),
    ("22nd", "twenty-second"),
    ("103rd", "one hundred third"),
    ("She came 1st, he came 99th.", "She came first, he came ninety-ninth."),
]
DECIMALS = [
    ("3.14", "three point one four"),
    ("0.5", "zero point five"),
    (".5", "point five"),
    ("1,234.56", "one thousand two hundred thirty-four point five six"),
    ("-2.5", "minus two point five"),
    ("v1.2", "version one point two"),
    ("v1.2.3", "version one point two point three"),
    ("Python 3.11.7 is out", "Python three point eleven point seven is out"),
]
MONEY = [
    ("$3.50", "three dollars and fifty cents"),
    ("$1", "one dollar"),
    ("$29", "twenty-nine dollars"),
    ("$1,000", "one thousand dollars"),
    ("$0.99", "ninety-nine cents"),
    ("$1.01", "one dollar and one cent"),
    ("$5.00", "five dollars"),
    ("$3.5", "three dollars and fifty cents"),
    ("£5", "five pounds"),
    ("£1.50", "one pound and fifty pence"),
    ("€10", "ten euros"),
    ("10€", "ten euros"),
    ("¥500", "five hundred yen"),
    ("$2.5 million", "two point five million dollars"),
    ("$3M", "three million dollars"),
    ("$4bn", "four billion dollars"),
    ("-$5", "minus five dollars"),
    ("It costs $29. Next", "It costs twenty-nine dollars. Next"),
]
PERCENTAGES = [
    ("45%", "forty-five percent"),
    ("3.5%", "three point five percent"),
    ("100 %", "one hundred percent"),
    ("-2%", "minus two percent"),
    ("10-20%", "ten to twenty percent"),
    ("10%-20%", "ten to twenty percent"),
]
DATES = [
    ("2024-03-15", "March fifteenth, twenty twenty-four"),
    ("03/15/2024", "March fifteenth, twenty twenty-four"),
    ("15/03/2024", "March fifteenth, twenty twenty-four"),
    ("March 15, 2024", "March fifteenth, twenty twenty-four"),
    ("March 15th 2024", "March fifteenth, twenty twenty-four"),
    ("on May 1", "on May first"),
    ("Jan. 5", "January fifth"),
    ("Sept 30, 1999", "September thirtieth, nineteen ninety-nine"),
    ("on 15 March 2024", "on the fifteenth of March, twenty twenty-four"),
    ("1 January", "the first of January"),
]
TIMES = [
    ("3:30 pm", "three thirty p.m"),
    ("3:30pm", "three thirty p.m"),
    ("3:30 PM", "three thirty p.m"),
    ("10:15 a.m. sharp", "ten fifteen a.m sharp"),
    ("We meet at 3:30 p.m.", "We meet at three thirty p.m."),
    ("at 3 p.m. Then", "at three p.m. Then"),
    ("at 7am", "at seven a.m"),
    ("15:45", "fifteen forty-five"),
    ("9:05", "nine oh five"),
    ("10:00", "ten o'clock"),
    ("10:00 am", "ten a.m"),
    ("15:00", "fifteen hundred"),
    ("00:00", "midnight"),
    ("10:30:15", "ten thirty and fifteen seconds"),
]
YEARS = [
    ("in 1999", "in nineteen ninety-nine"),
    ("In 1999, we", "In nineteen ninety-nine, we"),
    ("since 2005", "since two thousand five"),
    ("by 2030", "by twenty thirty"),
    ("in 1900", "in nineteen hundred"),
    ("in 1905", "in nineteen oh five"),
    ("in 1066", "in one thousand sixty-six"),
    ("in 2000", "in two thousand"),
    ("2024", "twenty twenty-four"),
    ("2005", "two thousand five"),
    ("1999.", "nineteen ninety-nine."),
    ("March 2024", "March twenty twenty-four"),
    ("the summer of 1969", "the summer of nineteen sixty-nine"),
    ("the 2024 election", "the twenty twenty-four election"),
    ("Smith (1999) said", "Smith (nineteen ninety-nine) said"),
    ("from 1990 to 2000", "from nineteen ninety to two thousand"),
    ("between 1990 and 2024", "between nineteen ninety and twenty twenty-four"),
    ("1990-2000", "nineteen ninety to two thousand"),
    ("the 2024-25 season", "the twenty twenty-four to twenty-five season"),
    ("the 1990s", "the nineteen nineties"),
    ("the 1900s", "the nineteen hundreds"),
    ("the '80s", "the eighties"),
    ("the 80s", "the eighties"),
    ("2024 people", "two thousand twenty-four people"),
    ("a total of 1234", "a total of one thousand two hundred thirty-four"),
    ("in Q3 2024", "in Q3 twenty twenty-four"),
]
PHONE_NUMBERS = [
    ("555-123-4567", "five five five, one two three, four five six seven"),
    ("555.123.4567", "five five five, one two three, four five six seven"),
    ("(555) 123-4567", "five five five, one two three, four five six seven"),
    ("+1 800 555 0199", "plus one, eight zero zero, five five five, zero one nine nine"),
    ("+44 20 7946 0958", "plus four four, two zero, seven nine four six, zero nine five eight"),
    ("Call 555-123-4567.", "Call five five five, one two three, four five six seven."),
    ("1-800-555-0199", "one, eight zero zero, five five five, zero one nine nine"),
]
ABBREVIATIONS = [
    ("Dr. Smith", "Doctor Smith"),
    ("Ask Dr. Jones.", "Ask Doctor Jones."),
    ("He lives on Elm Dr.", "He lives on Elm Drive."),
    ("St. Louis", "Saint Louis"),
    ("In St. Louis", "In Saint Louis"),
    ("We live on Main St. in town.", "We live on Main Street in town."),
    ("Mr. and Mrs. Smith", "Mister and Missus Smith"),
    ("Mr Smith", "Mister Smith"),
    ("Ms. Lee", "Miz Lee"),
    ("Prof. Xu", "Professor Xu"),
    ("Col. Sanders", "Colonel Sanders"),
    ("Red vs. Blue", "Red versus Blue"),
    ("Red vs Blue", "Red versus Blue"),
    ("apples, pears, etc.", "apples, pears, et cetera."),
    ("apples, etc. and more", "apples, et cetera and more"),
    ("fruit, e.g., apples", "fruit, for example, apples"),
    ("one, i.e. this", "one, that is this"),
    ("approx. 5 km", "approximately five kilometers"),
    ("No. 5", "number five"),
    ("see p. 12", "see page twelve"),
    ("John Smith Jr. went", "John Smith Junior went"),
    ("Acme Inc. The end", "Acme Incorporated. The end"),
    ("Acme, Inc. is big", "Acme, Incorporated is big"),
]
UNITS = [
    ("5 km", "five kilometers"),
    ("1 km", "one kilometer"),
    ("1 kg", "one kilogram"),
    ("2.5 kg", "two point five kilograms"),
    ("100 mph", "one hundred miles per hour"),
    ("20°C", "twenty degrees Celsius"),
    ("-1°C", "minus one degree Celsius"),
    ("68 °F", "sixty-eight degrees Fahrenheit"),
    ("90°", "ninety degrees"),
    ("3 GB", "three gigabytes"),
    ("10 ms", "ten milliseconds"),
    ("5 kHz", "five kilohertz"),
    ("60 km/h", "sixty kilometers per hour"),
    ("6 ft", "six feet"),
    ("1 ft", "one foot"),
    ("5x faster", "five times faster"),
    ("a 10s timeout", "a ten seconds timeout"),
    ("5-10 km", "five to ten kilometers"),
    ("1 to 2 kg", "one to two kilograms"),
]
SYMBOLS = [
    ("R&D", "R and D"),
    ("salt & pepper", "salt and pepper"),
    ("2 + 2 = 4", "two plus two equals four"),
    ("#1 fan", "number one fan"),
    ("~5 minutes", "about five minutes"),
    ("5-10 minutes", "five to ten minutes"),
    ("mail jane.doe@example.com now", "mail jane dot doe at example dot com now"),
    ("me @ home", "me at home"),
    ("see https://example.com/docs.", "see example dot com slash docs."),
    ("www.x.org", "w w w dot x dot org".replace("w w w", "www")),
]
FRACTIONS = [
    ("1/2 cup", "one half cup"),
    ("3/4", "three quarters"),
    ("2/3 of them", "two thirds of them"),
    ("5/8 inch", "five eighths inch"),
    ("1 1/2 cups", "one and one half cups"),
]
UNCHANGED = [
    "Hello, world!",
    "Is it? Yes. Really…",
    "A4 paper, mp3 files, 4G and H2O.",
    "The U.S. Army",
    "",
    "   ",
    "你好。世界！",
    "Whatever :-)",
]


@pytest.mark.parametrize(("text", "expected"), CARDINALS)
def test_cardinals_are_read_in_words(text: str, expected: str) -> None:
    assert normalize_english(text) == expected


@pytest.mark.parametrize(("text", "expected"), ORDINALS)
def test_ordinals_are_read_in_words(text: str, expected: str) -> None:
    assert normalize_english(text) == expected


@pytest.mark.parametrize(("text", "expected"), DECIMALS)
def test_decimals_and_versions_are_read_point_by_point(text: str, expected: str) -> None:
    assert normalize_english(text) == expected


@pytest.mark.parametrize(("text", "expected"), MONEY)
def test_money_is_read_with_its_currency(text: str, expected: str) -> None:
    assert normalize_english(text) == expected


@pytest.mark.parametrize(("text", "expected"), PERCENTAGES)
def test_percentages_are_read_as_percent(text: str, expected: str) -> None:
    assert normalize_english(text) == expected


@pytest.mark.parametrize(("text", "expected"), DATES)
def test_dates_are_read_month_day_year(text: str, expected: str) -> None:
    assert normalize_english(text) == expected


def test_an_impossible_date_is_not_read_as_a_date() -> None:
    assert "teenth" not in normalize_english("2024-13-45")
    assert "February" not in normalize_english("02/31/2024".replace("31", "32"))


@pytest.mark.parametrize(("text", "expected"), TIMES)
def test_times_are_read_as_on_a_clock(text: str, expected: str) -> None:
    assert normalize_english(text) == expected


@pytest.mark.parametrize(("text", "expected"), YEARS)
def test_years_are_read_as_years_only_in_year_context(text: str, expected: str) -> None:
    assert normalize_english(text) == expected


@pytest.mark.parametrize(("text", "expected"), PHONE_NUMBERS)
def test_phone_numbers_are_read_digit_by_digit_in_groups(text: str, expected: str) -> None:
    assert normalize_english(text) == expected


@pytest.mark.parametrize(("text", "expected"), FRACTIONS)
def test_simple_fractions_are_read_as_fractions(text: str, expected: str) -> None:
    assert normalize_english(text) == expected


@pytest.mark.parametrize("text", ["12/25", "95/100", "3/2"])
def test_slashes_that_are_not_simple_fractions_are_not_read_as_fractions(text: str) -> None:
    assert "/" in normalize_english(text)


@pytest.mark.parametrize(("text", "expected"), ABBREVIATIONS)
def test_abbreviations_are_expanded_by_context(text: str, expected: str) -> None:
    assert normalize_english(text) == expected


@pytest.mark.parametrize(("text", "expected"), UNITS)
def test_units_are_read_singular_or_plural(text: str, expected: str) -> None:
    assert normalize_english(text) == expected


@pytest.mark.parametrize(("text", "expected"), SYMBOLS)
def test_symbols_addresses_and_ranges_are_read_aloud(text: str, expected: str) -> None:
    assert normalize_english(text) == expected


@pytest.mark.parametrize("text", UNCHANGED)
def test_text_without_anything_to_read_is_left_unchanged(text: str) -> None:
    assert normalize_english(text) == text


def test_a_mixed_sentence_keeps_its_punctuation() -> None:
    text = "On 2024-03-15 at 3:30 pm, Dr. Smith paid $3.50 (45% off) for 2 kg of apples!"
    assert normalize_english(text) == (
        "On March fifteenth, twenty twenty-four at three thirty p.m, Doctor Smith paid three dollars"
        " and fifty cents (forty-five percent off) for two kilograms of apples!"
    )


ALL_CASES = [*CARDINALS, *ORDINALS, *DECIMALS, *MONEY, *PERCENTAGES, *DATES, *TIMES, *YEARS]
ALL_CASES += [*PHONE_NUMBERS, *FRACTIONS, *ABBREVIATIONS, *UNITS, *SYMBOLS]


@pytest.mark.parametrize(("text", "expected"), ALL_CASES)
def test_normalizing_twice_changes_nothing_more(text: str, expected: str) -> None:
    once = normalize_english(text)
    assert normalize_english(once) == once


def test_a_failing_rule_is_skipped_instead_of_raising(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(text: str) -> str:
        raise RuntimeError("a reading bug")

    monkeypatch.setattr(normalize, "_RULES", (broken, *normalize._RULES))
    assert normalize_english("It costs $5.") == "It costs five dollars."


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=200))
def test_any_text_is_normalized_without_raising(text: str) -> None:
    assert isinstance(normalize_english(text), str)


TRICKY = st.sampled_from(
    [*"0123456789", *".,:;-+/$%€£°@&#~ ", "Dr.", "St.", "pm", "a.m.", "km", "Jan", "March", "in", "\n"]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(TRICKY, max_size=40).map("".join))
def test_number_heavy_text_is_normalized_without_raising(text: str) -> None:
    assert isinstance(normalize_english(text), str)


@settings(max_examples=500, deadline=None)
@given(number=st.integers(min_value=-(10**12) + 1, max_value=10**12 - 1), comma=st.booleans())
def test_plain_integers_come_out_as_words_alone_or_in_a_sentence(number: int, comma: bool) -> None:
    written = f"{number:,}" if comma else str(number)
    for text in (written, f"I counted {written} sheep.", f"{written}!"):
        assert not re.search(r"\d", normalize_english(text)), text
