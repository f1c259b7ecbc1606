"""English text normalization for espeak-based voices (Piper): numbers, money, dates ... read aloud.

Why: espeak-ng reads "$3.50" as "dollar three point five zero", "2024" as "two thousand twenty four",
"10:00" as "ten zero zero", "AM" as the word "am", and ends a sentence after "Dr.". Piper voices speak
espeak's phonemes, so such text is rewritten into words before synthesis. The segmenter runs first and
this runs per segment, so sentence punctuation is kept.

Design: the tables come first (units, currencies, abbreviations, months, year words); then one small
function per category; ``normalize_english`` applies them in the order of ``_RULES``, most specific first,
because an e-mail address, a phone number or a date holds digits that a later, more general rule would
misread. Each rule turns the digits it understands into words, so later rules never see them again, and
text no rule understands is left as it is. A rule that fails on input nobody foresaw is skipped rather
than allowed to raise: a reading mistake costs a word, an exception would cost the utterance.

Reading choices (checked against espeak-ng en-us phonemes):

* cardinals in American style without "and": 1,234 → "one thousand two hundred thirty-four"; "-5" →
  "minus five"; integers of more than 15 digits, or with a leading zero, are read digit by digit.
* decimals digit by digit after "point"; versions (v1.2, 3.11.7) part by part: "three point eleven point
  seven".
* money: "$3.50" → "three dollars and fifty cents", "$2.5 million" → "two point five million dollars".
* times: "9:05" → "nine oh five", "10:00" → "ten o'clock", "15:00" → "fifteen hundred", "3:30 pm" →
  "three thirty p.m". "p.m" and "a.m" are written without a final period: espeak says them as letters,
  while it says "AM" as the word "am" and ends a sentence at "p.m.".
* dates: "2024-03-15", "03/15/2024" (month first unless the first number cannot be a month) and "March 15,
  2024" → "March fifteenth, twenty twenty-four"; "15 March 2024" → "the fifteenth of March, twenty
  twenty-four".
* years: a four-digit number from 1100 to 2099 without a comma is read as a year ("nineteen ninety-nine",
  "two thousand five", "twenty twenty-four") when a year word comes right before it (``_YEAR_WORDS``: in,
  since, by, from, until, during, a month name, "the year", "summer of", ...; "the" only for 1900-2099), in
  a range with another year ("1990-2000", "from 1990 to 2000"), as a decade ("1990s"), in parentheses
  ("(1999)"), or when it is the whole text. Anywhere else it is a quantity: "2024 people" → "two thousand
  twenty-four people".
* phone numbers (555-123-4567, (555) 123-4567, +1 800 555 0199): digit by digit, a comma between groups.
* fractions with a small denominator: "3/4" → "three quarters"; ranges: "5-10" → "five to ten"; units
  after a number: "5 km" → "five kilometers"; "&" → "and", "@" → "at", e-mail and web addresses with
  "dot" and "slash".
* abbreviations: titles only before a capitalized name ("Dr. Smith" → "Doctor Smith"); "St." and "Dr."
  after a capitalized word in mid-sentence are "Street" and "Drive"; an abbreviation's period is kept where
  it also ended the sentence.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# ----- tables ----------------------------------------------------------------------------------------------

_ONES = (
    *("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"),
    *("eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"),
)
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_SCALES = ("", "thousand", "million", "billion", "trillion")
_MAX_CARDINAL_DIGITS = 15  # beyond this (card numbers, ids) digits are read one by one
_IRREGULAR_ORDINALS = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}

_MONTHS = (
    *("January", "February", "March", "April", "May", "June", "July", "August", "September", "October"),
    *("November", "December"),
)
_MONTH_ABBREVIATIONS = {
    **{month[:3]: month for month in _MONTHS},
    "Sept": "September",
}

# symbol → (one, many, one hundredth, many hundredths); no hundredth: amounts are read as decimals
_CURRENCIES: dict[str, tuple[str, str, str, str]] = {
    "US$": ("dollar", "dollars", "cent", "cents"),
    "$": ("dollar", "dollars", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "€": ("euro", "euros", "cent", "cents"),
    "¥": ("yen", "yen", "", ""),
    "₹": ("rupee", "rupees", "paisa", "paise"),
    "₩": ("won", "won", "", ""),
}
_MONEY_SCALES = {
    **{word: word for word in ("thousand", "million", "billion", "trillion")},
    **{"k": "thousand", "K": "thousand", "m": "million", "M": "million", "mn": "million"},
    **{"b": "billion", "B": "billion", "bn": "billion", "tn": "trillion"},
}

# unit after a number → (one, many); case matters ("m" is meters, "M" is not a unit here)
_UNITS: dict[str, tuple[str, str]] = {
    "km": ("kilometer", "kilometers"),
    "m": ("meter", "meters"),
    "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"),
    "mi": ("mile", "miles"),
    "ft": ("foot", "feet"),
    "yd": ("yard", "yards"),
    "kg": ("kilogram", "kilograms"),
    "g": ("gram", "grams"),
    "mg": ("milligram", "milligrams"),
    "lb": ("pound", "pounds"),
    "lbs": ("pound", "pounds"),
    "oz": ("ounce", "ounces"),
    "l": ("liter", "liters"),
    "L": ("liter", "liters"),
    "ml": ("milliliter", "milliliters"),
    "mL": ("milliliter", "milliliters"),
    "mph": ("mile per hour", "miles per hour"),
    "km/h": ("kilometer per hour", "kilometers per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"),
    "m/s": ("meter per second", "meters per second"),
    "°C": ("degree Celsius", "degrees Celsius"),
    "°F": ("degree Fahrenheit", "degrees Fahrenheit"),
    "°": ("degree", "degrees"),
    "KB": ("kilobyte", "kilobytes"),
    "kB": ("kilobyte", "kilobytes"),
    "MB": ("megabyte", "megabytes"),
    "GB": ("gigabyte", "gigabytes"),
    "TB": ("terabyte", "terabytes"),
    "Mb": ("megabit", "megabits"),
    "Gb": ("gigabit", "gigabits"),
    "MB/s": ("megabyte per second", "megabytes per second"),
    "GB/s": ("gigabyte per second", "gigabytes per second"),
    "kbps": ("kilobit per second", "kilobits per second"),
    "Mbps": ("megabit per second", "megabits per second"),
    "Gbps": ("gigabit per second", "gigabits per second"),
    "ns": ("nanosecond", "nanoseconds"),
    "µs": ("microsecond", "microseconds"),
    "μs": ("microsecond", "microseconds"),
    "ms": ("millisecond", "milliseconds"),
    "s": ("second", "seconds"),
    "sec": ("second", "seconds"),
    "min": ("minute", "minutes"),
    "h": ("hour", "hours"),
    "hr": ("hour", "hours"),
    "hrs": ("hour", "hours"),
    "Hz": ("hertz", "hertz"),
    "kHz": ("kilohertz", "kilohertz"),
    "MHz": ("megahertz", "megahertz"),
    "GHz": ("gigahertz", "gigahertz"),
    "W": ("watt", "watts"),
    "kW": ("kilowatt", "kilowatts"),
    "kWh": ("kilowatt hour", "kilowatt hours"),
    "V": ("volt", "volts"),
    "mAh": ("milliamp hour", "milliamp hours"),
    "dB": ("decibel", "decibels"),
    "px": ("pixel", "pixels"),
    "fps": ("frame per second", "frames per second"),
    "rpm": ("revolution per minute", "revolutions per minute"),
    "x": ("times", "times"),
}

# Titles that mean nothing else: expanded wherever they stand ("Mr. and Mrs. Smith").
_TITLES = {
    **{"Mr": "Mister", "Mrs": "Missus", "Ms": "Miz", "Mx": "Mix", "Prof": "Professor"},
    **{"Capt": "Captain", "Lt": "Lieutenant", "Sgt": "Sergeant"},
}
# Titles that are also other words' abbreviations (Col. column, Rev. revision, Fr. French): only before a
# capitalized name. "Mr Smith" without the period is expanded too.
_TITLES_BEFORE_NAME = {
    **{"Rev": "Reverend", "Gen": "General", "Col": "Colonel", "Gov": "Governor", "Sen": "Senator"},
    **{"Rep": "Representative", "Pres": "President", "Hon": "Honorable", "Mt": "Mount", "Ft": "Fort"},
    **{"Fr": "Father"},
}
_TITLES_WITHOUT_PERIOD = {"Mr": "Mister", "Mrs": "Missus", "Ms": "Miz", "Dr": "Doctor"}
# "St." and "Dr.": (before a name, after a place name, neither)
_TITLE_OR_PLACE = {"St": ("Saint", "Street", "Street"), "Dr": ("Doctor", "Drive", "Doctor")}
# Abbreviations read the same wherever they stand; matched without regard to case.
_ABBREVIATIONS = {
    **{"e.g.": "for example", "i.e.": "that is", "etc.": "et cetera", "etc": "et cetera"},
    **{"vs.": "versus", "vs": "versus", "approx.": "approximately", "cf.": "compare", "viz.": "namely"},
    **{"a.k.a.": "also known as", "w/o": "without"},
}
# Abbreviations that follow a name; their period often ends the sentence too.
_SUFFIXES = {
    **{"Jr": "Junior", "Sr": "Senior", "Inc": "Incorporated", "Ltd": "Limited", "Corp": "Corporation"},
    **{"Bros": "Brothers", "Ave": "Avenue", "Blvd": "Boulevard", "Dept": "Department"},
}
# Denominators read as fractions when the numerator is smaller: "3/4" → "three quarters", "5/8" → "five
# eighths". Others, like "12/25" (a date) or "95/100" (a score), stay as they are.
_DENOMINATORS = frozenset({2, 3, 4, 5, 6, 7, 8, 9, 10, 16})
_FRACTION_NAMES = {2: ("half", "halves"), 4: ("quarter", "quarters")}  # the rest are ordinals: "third(s)"

# Abbreviations that only come before a number: "No. 5" → "number five".
_BEFORE_NUMBER = {
    **{"no": "number", "nos": "numbers", "fig": "figure", "figs": "figures", "vol": "volume"},
    **{"ch": "chapter", "sec": "section", "p": "page", "pp": "pages"},
}

# Words after which a number from 1100 to 2099 is a year. Not "of", "to" or "around" alone: "a total of 1234".
_YEAR_WORDS = (
    *("in", "since", "by", "from", "until", "till", "through", "during", "before", "after", "between"),
    *("circa", "ca.", "year", "early", "late", "mid", "born", "founded", "established", *_MONTHS),
    *(f"{season} of" for season in ("spring", "summer", "autumn", "fall", "winter", "class", "year")),
    *(f"{part} of" for part in ("start", "beginning", "middle", "end")),
    *("Q1", "Q2", "Q3", "Q4", "H1", "H2", "FY"),
)

_SYMBOLS = {"&": "and", "@": "at"}
_OPERATOR_WORDS = {"+": "plus", "=": "equals", "×": "times", "÷": "divided by", "±": "plus or minus"}
_NUMBER_SIGN_WORDS = {"#": "number", "~": "about", "≈": "approximately"}
# How the punctuation inside web and e-mail addresses is read.
_URL_SYMBOLS = {".": " dot ", "/": " slash ", "-": " dash ", "_": " underscore ", "?": " question mark "}
_URL_SYMBOLS |= {"=": " equals ", "&": " and ", "#": " hash ", ":": " colon ", "@": " at "}

# ----- number words ----------------------------------------------------------------------------------------


def _cardinal(number: int) -> str:
    """Words for 0 <= number < 10**15, American style: "one thousand two hundred thirty-four"."""
    if number < 20:
        return _ONES[number]
    if number < 100:
        tens, ones = divmod(number, 10)
        return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")
    if number < 1000:
        hundreds, rest = divmod(number, 100)
        return f"{_ONES[hundreds]} hundred" + (f" {_cardinal(rest)}" if rest else "")
    groups: list[str] = []
    for scale in _SCALES:
        number, group = divmod(number, 1000)
        if group:
            groups.append(f"{_cardinal(group)} {scale}".rstrip())
        if not number:
            break
    return " ".join(reversed(groups))


def _ordinal(number: int) -> str:
    """ "103" → "one hundred third", "22" → "twenty-second": only the last word changes."""
    words = _cardinal(number)
    cut = max(words.rfind(" "), words.rfind("-")) + 1
    head, last = words[:cut], words[cut:]
    if last in _IRREGULAR_ORDINALS:
        return head + _IRREGULAR_ORDINALS[last]
    return head + (last[:-1] + "ieth" if last.endswith("y") else last + "th")


def _year(number: int) -> str:
    """Words for a year: 1999 → "nineteen ninety-nine", 2005 → "two thousand five", 1066 → "ten sixty-six"."""
    if not 1000 <= number <= 2099 or 2000 <= number <= 2009:
        return _cardinal(number)
    century, rest = divmod(number, 100)
    if rest == 0:
        return f"{_cardinal(century)} hundred"
    if rest < 10:
        return f"{_cardinal(century)} oh {_ONES[rest]}"
    return f"{_cardinal(century)} {_cardinal(rest)}"


def _digits(text: str) -> str:
    """Digits one by one: "0199" → "zero one nine nine"."""
    return " ".join(_ONES[int(char)] for char in text if char.isdecimal())


def _integer(text: str) -> str:
    """Words for an integer written with optional thousands commas."""
    digits = text.replace(",", "")
    if len(digits) > _MAX_CARDINAL_DIGITS or (len(digits) > 1 and digits.startswith("0")):
        return _digits(digits)
    return _cardinal(int(digits))


def _number(text: str, sign: str | None = None) -> str:
    """Words for "1,234.56", ".5" or "7", after an optional sign."""
    integer, _, fraction = text.partition(".")
    words = _integer(integer) if integer else ""
    if fraction:
        words = f"{words} point {_digits(fraction)}".strip()
    if sign in ("-", "−"):
        return f"minus {words}"
    if sign == "+":
        return f"plus {words}"
    return words


def _plural(words: str) -> str:
    """ "nineteen ninety" → "nineteen nineties"."""
    return words[:-1] + "ies" if words.endswith("y") else words + "s"


def _is_one(text: str) -> bool:
    return text == "1"


# ----- shared patterns -------------------------------------------------------------------------------------

_NUMBER = r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"
_SIGN = r"(?:(?<![\w)])(?P<sign>[-−+]))?"
_NUMBER_START = r"(?<![\w.])"
_NUMBER_END = r"(?!\w|\.\d)"
_YEAR = r"(?:1[1-9]\d\d|20\d\d)"
_CLOSERS = "\"'”’)]}»"


def _ends_sentence(text: str, end: int, *, before_capital: bool) -> bool:
    """Whether the period before ``end`` ends the sentence: at the end, or (if asked) before a capital."""
    rest = text[end:].lstrip(_CLOSERS).lstrip()
    return not rest or (before_capital and rest[0].isupper())


def _keep_period(match: re.Match[str], *, before_capital: bool) -> str:
    if not match.group(0).endswith("."):
        return ""
    return "." if _ends_sentence(match.string, match.end(), before_capital=before_capital) else ""


# ----- rules, in the order they run ------------------------------------------------------------------------

_URL = re.compile(r"\b(?:https?://|www\.)[^\s<>\"'`]+")


def _urls(text: str) -> str:
    """ "https://example.com/docs" → "example dot com slash docs"."""

    def read(match: re.Match[str]) -> str:
        url = match.group(0)
        trailing = len(url) - len(url.rstrip(".,;:!?)]}'\""))
        url, tail = url[: len(url) - trailing], url[len(url) - trailing :]
        url = re.sub(r"^https?://", "", url).rstrip("/")
        spoken = "".join(_URL_SYMBOLS.get(char, char) for char in url)
        return re.sub(r" {2,}", " ", spoken).strip() + tail

    return _URL.sub(read, text)


_EMAIL = re.compile(r"(?<![\w.+-])(?P<user>[\w+-]+(?:\.[\w+-]+)*)@(?P<domain>[\w-]+(?:\.[\w-]+)+)")


def _emails(text: str) -> str:
    """ "jane.doe@example.com" → "jane dot doe at example dot com"."""

    def read(match: re.Match[str]) -> str:
        address = f"{match['user']}@{match['domain']}"
        return re.sub(r" {2,}", " ", "".join(_URL_SYMBOLS.get(char, char) for char in address))

    return _EMAIL.sub(read, text)


_SYMBOL = re.compile(r"\s*(?P<symbol>[&@])\s*")


def _symbols(text: str) -> str:
    """ "R&D" → "R and D", "me @ home" → "me at home"."""
    return _SYMBOL.sub(lambda match: f" {_SYMBOLS[match['symbol']]} ", text)


_PHONE = re.compile(
    r"(?<![\w+.,-])(?:"
    r"\+\d{1,3}(?:[\s.-]\(?\d{1,4}\)?){2,5}"  # +1 800 555 0199, +44 20 7946 0958
    r"|\(\d{3}\)\s?\d{3}[\s.-]\d{4}"  # (555) 123-4567
    r"|(?:1[.-])?\d{3}(?P<separator>[.-])\d{3}(?P=separator)\d{4}"  # 555-123-4567, 1-800-555-0199
    r")(?!\w|[.,-]\d)"
)


def _phone_numbers(text: str) -> str:
    """ "555-123-4567" → "five five five, one two three, four five six seven"."""

    def read(match: re.Match[str]) -> str:
        groups = ", ".join(_digits(group) for group in re.findall(r"\d+", match.group(0)))
        return f"plus {groups}" if match.group(0).startswith("+") else groups

    return _PHONE.sub(read, text)


_MONTH_NAME = "|".join([*_MONTHS, *sorted(_MONTH_ABBREVIATIONS, key=len, reverse=True)])
_ISO_DATE = re.compile(r"(?<![\w.-])(?P<year>\d{4})-(?P<month>\d{2})-(?P<day>\d{2})(?![\w-]|\.\d)")
_SLASH_DATE = re.compile(r"(?<![\w/.-])(?P<first>\d{1,2})/(?P<second>\d{1,2})/(?P<year>\d{4})(?![\w/]|\.\d)")
_MONTH_DAY = re.compile(
    rf"\b(?P<month>{_MONTH_NAME})\.?\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?(?![\w:]|[.,]\d)"
    rf"(?:(?P<comma>,)?\s+(?P<year>\d{{4}}){_NUMBER_END})?"
)
_DAY_MONTH = re.compile(
    rf"(?<![\w.,])(?P<day>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<month>{'|'.join(_MONTHS)})\b"
    rf"(?:,?\s+(?P<year>\d{{4}}){_NUMBER_END})?"
)


def _say_date(month: int, day: int, year: str | None) -> str | None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    spoken = f"{_MONTHS[month - 1]} {_ordinal(day)}"
    return f"{spoken}, {_year(int(year))}" if year else spoken


def _dates(text: str) -> str:
    """ "2024-03-15", "03/15/2024", "March 15, 2024" → "March fifteenth, twenty twenty-four"."""

    def iso(match: re.Match[str]) -> str:
        spoken = _say_date(int(match["month"]), int(match["day"]), match["year"])
        return spoken or match.group(0)

    def slashed(match: re.Match[str]) -> str:
        first, second = int(match["first"]), int(match["second"])
        month, day = (second, first) if first > 12 else (first, second)  # US order unless it cannot be
        return _say_date(month, day, match["year"]) or match.group(0)

    def month_day(match: re.Match[str]) -> str:
        month = _MONTHS.index(_MONTH_ABBREVIATIONS.get(match["month"], match["month"])) + 1
        return _say_date(month, int(match["day"]), match["year"]) or match.group(0)

    def day_month(match: re.Match[str]) -> str:
        day = int(match["day"])
        if not 1 <= day <= 31:
            return match.group(0)
        spoken = f"the {_ordinal(day)} of {match['month']}"
        return f"{spoken}, {_year(int(match['year']))}" if match["year"] else spoken

    text = _ISO_DATE.sub(iso, text)
    text = _SLASH_DATE.sub(slashed, text)
    text = _MONTH_DAY.sub(month_day, text)
    return _DAY_MONTH.sub(day_month, text)


_AM_PM = r"(?P<meridiem>[AaPp])\.?\s?[Mm](?!\w)\.?"
_CLOCK = re.compile(
    rf"(?<![\w:.,])(?P<hour>\d{{1,2}}):(?P<minute>[0-5]\d)(?::(?P<second>[0-5]\d))?"
    rf"(?:\s?{_AM_PM}|(?![\w:]|[.,]\d))"
)
_HOUR_AM_PM = re.compile(rf"(?<![\w:.,])(?P<hour>\d{{1,2}})\s?{_AM_PM}")


def _say_meridiem(match: re.Match[str]) -> str:
    spoken = "a.m" if match["meridiem"] in "Aa" else "p.m"
    return spoken + _keep_period(match, before_capital=True)


def _times(text: str) -> str:
    """ "9:05" → "nine oh five", "10:00" → "ten o'clock", "3:30 pm" → "three thirty p.m"."""

    def clock(match: re.Match[str]) -> str:
        hour, minute = int(match["hour"]), int(match["minute"])
        if hour > 24:
            return match.group(0)
        if match["meridiem"]:
            spoken = _cardinal(hour) + (f" {_minutes(minute)}" if minute else "")
        elif minute == 0:
            spoken = _on_the_hour(hour)
        else:
            spoken = f"{_cardinal(hour)} {_minutes(minute)}"
        if match["second"] and int(match["second"]):
            seconds = int(match["second"])
            spoken += f" and {_cardinal(seconds)} second{'' if seconds == 1 else 's'}"
        return f"{spoken} {_say_meridiem(match)}" if match["meridiem"] else spoken

    def hour_only(match: re.Match[str]) -> str:
        hour = int(match["hour"])
        return f"{_cardinal(hour)} {_say_meridiem(match)}" if 1 <= hour <= 12 else match.group(0)

    return _HOUR_AM_PM.sub(hour_only, _CLOCK.sub(clock, text))


def _minutes(minute: int) -> str:
    return f"oh {_ONES[minute]}" if minute < 10 else _cardinal(minute)


def _on_the_hour(hour: int) -> str:
    if hour in (0, 24):
        return "midnight"
    return f"{_cardinal(hour)} o'clock" if hour <= 12 else f"{_cardinal(hour)} hundred"


_TITLE = re.compile(rf"\b(?P<title>{'|'.join(_TITLES)})\.")
_TITLE_BEFORE_NAME = re.compile(
    rf"\b(?:(?P<title>{'|'.join(_TITLES_BEFORE_NAME)})\.|(?P<bare>{'|'.join(_TITLES_WITHOUT_PERIOD)})\b)"
    r"(?=\s+[A-Z])"
)
_TITLE_OR_PLACE_PATTERN = re.compile(rf"\b(?P<abbreviation>{'|'.join(_TITLE_OR_PLACE)})\.")
_ABBREVIATION = re.compile(
    "|".join(
        rf"(?<![\w.]){re.escape(key)}" + (r"(?!\w)" if key.endswith(".") else r"\b(?!\.\w)")
        for key in sorted(_ABBREVIATIONS, key=len, reverse=True)
    ),
    re.IGNORECASE,
)
_SUFFIX = re.compile(rf"(?<=\w)(?P<comma>,?) (?P<suffix>{'|'.join(_SUFFIXES)})\.")
_BEFORE_NUMBER_PATTERN = re.compile(rf"\b(?P<abbreviation>{'|'.join(_BEFORE_NUMBER)})\.\s?(?=\d)", re.IGNORECASE)


def _abbreviations(text: str) -> str:
    """ "Dr. Smith" → "Doctor Smith", "Main St." → "Main Street", "No. 5" → "number 5"."""

    def title_before_name(match: re.Match[str]) -> str:
        if match["title"]:
            return _TITLES_BEFORE_NAME[match["title"]]
        return _TITLES_WITHOUT_PERIOD[match["bare"]]

    def title_or_place(match: re.Match[str]) -> str:
        before_name, place, neither = _TITLE_OR_PLACE[match["abbreviation"]]
        previous = match.string[: match.start()].rstrip()
        previous_word = previous.rsplit(maxsplit=1)[-1] if previous else ""
        earlier = previous[: len(previous) - len(previous_word)].rstrip()
        after_place_name = bool(previous_word[:1].isupper() or previous_word[:1].isdigit())
        mid_sentence = bool(earlier) and not earlier.endswith((".", "!", "?", ":"))
        followed_by_name = re.match(r"\s+[A-Z]", match.string[match.end() :]) is not None
        if after_place_name and (mid_sentence or not followed_by_name):
            return place + _keep_period(match, before_capital=True)
        if followed_by_name:
            return before_name
        return neither + (_keep_period(match, before_capital=True) if neither == place else "")

    def common(match: re.Match[str]) -> str:
        spoken = _ABBREVIATIONS[match.group(0).lower()]
        return spoken + _keep_period(match, before_capital=False)

    def suffix(match: re.Match[str]) -> str:
        return f"{match['comma']} {_SUFFIXES[match['suffix']]}{_keep_period(match, before_capital=True)}"

    def before_number(match: re.Match[str]) -> str:
        return f"{_BEFORE_NUMBER[match['abbreviation'].lower()]} "

    text = _TITLE.sub(lambda match: _TITLES[match["title"]], text)
    text = _TITLE_BEFORE_NAME.sub(title_before_name, text)
    text = _TITLE_OR_PLACE_PATTERN.sub(title_or_place, text)
    text = _ABBREVIATION.sub(common, text)
    text = _SUFFIX.sub(suffix, text)
    return _BEFORE_NUMBER_PATTERN.sub(before_number, text)


_CURRENCY = "|".join(re.escape(symbol) for symbol in _CURRENCIES)
_SCALE = "|".join(sorted(_MONEY_SCALES, key=len, reverse=True))
_MONEY_AMOUNT = (
    rf"(?P<amount>{_NUMBER})"
    rf"(?:\s(?P<scale_word>thousand|million|billion|trillion)\b|(?P<scale>{_SCALE})(?!\w))?"
)
_MONEY_BEFORE = re.compile(rf"{_SIGN}(?P<currency>{_CURRENCY})\s?{_MONEY_AMOUNT}")
_MONEY_AFTER = re.compile(rf"{_SIGN}{_NUMBER_START}{_MONEY_AMOUNT}\s?(?P<currency>{_CURRENCY})")


def _money(text: str) -> str:
    """ "$3.50" → "three dollars and fifty cents", "$2.5 million" → "two point five million dollars"."""

    def read(match: re.Match[str]) -> str:
        one, many, hundredth, hundredths = _CURRENCIES[match["currency"]]
        amount, sign = match["amount"], match["sign"]
        scale = match["scale_word"] or (_MONEY_SCALES[match["scale"]] if match["scale"] else None)
        if scale:
            return f"{_number(amount, sign)} {scale} {many}"
        whole, _, fraction = amount.partition(".")
        if not fraction or not hundredth or len(fraction) > 2:
            unit = one if _is_one(amount) else many
            return f"{_number(amount, sign)} {unit}"
        cents = int(fraction.ljust(2, "0"))
        prefix = "minus " if sign in ("-", "−") else ""
        cents_words = f"{_cardinal(cents)} {hundredth if cents == 1 else hundredths}"
        if int(whole.replace(",", "") or "0") == 0:
            return prefix + cents_words
        whole_words = f"{_integer(whole)} {one if _is_one(whole) else many}"
        return prefix + (f"{whole_words} and {cents_words}" if cents else whole_words)

    return _MONEY_AFTER.sub(read, _MONEY_BEFORE.sub(read, text))


_PERCENT = re.compile(rf"{_SIGN}{_NUMBER_START}(?:(?P<low>{_NUMBER})%?(?:-|–|\sto\s))?(?P<number>{_NUMBER}|\.\d+)\s?%")


def _percentages(text: str) -> str:
    """ "45%" → "forty-five percent", "10-20%" → "ten to twenty percent"."""

    def read(match: re.Match[str]) -> str:
        if match["low"]:
            return f"{_number(match['low'], match['sign'])} to {_number(match['number'])} percent"
        return f"{_number(match['number'], match['sign'])} percent"

    return _PERCENT.sub(read, text)


_DECADE = re.compile(rf"{_NUMBER_START}(?P<year>1[1-9]\d0|20\d0)'?s(?!\w)")
_SHORT_DECADE = re.compile(r"(?:(?<=\bthe )|(?<=\bThe )|['‘’])(?P<decade>[1-9]0)'?s(?!\w)")


def _decades(text: str) -> str:
    """ "the 1990s" → "the nineteen nineties", "the '80s" → "the eighties"."""
    text = _DECADE.sub(lambda match: _plural(_year(int(match["year"]))), text)
    return _SHORT_DECADE.sub(lambda match: _plural(_cardinal(int(match["decade"]))), text)


_VERSION = re.compile(
    rf"{_NUMBER_START}(?:(?P<v>[vV])(?P<short>\d+(?:\.\d+)+)|(?P<long>\d+(?:\.\d+){{2,}})){_NUMBER_END}"
)


def _versions(text: str) -> str:
    """ "v1.2" → "version one point two", "3.11.7" → "three point eleven point seven"."""

    def read(match: re.Match[str]) -> str:
        spoken = " point ".join(_integer(part) for part in (match["short"] or match["long"]).split("."))
        return f"version {spoken}" if match["v"] else spoken

    return _VERSION.sub(read, text)


_ORDINAL = re.compile(rf"{_NUMBER_START}(?P<number>\d{{1,3}}(?:,\d{{3}})+|\d+)(?:st|nd|rd|th)(?!\w)")


def _ordinals(text: str) -> str:
    """ "1st" → "first", "22nd" → "twenty-second", "103rd" → "one hundred third"."""

    def read(match: re.Match[str]) -> str:
        digits = match["number"].replace(",", "")
        return _ordinal(int(digits)) if len(digits) <= _MAX_CARDINAL_DIGITS else match.group(0)

    return _ORDINAL.sub(read, text)


_UNIT = re.compile(
    rf"{_SIGN}{_NUMBER_START}(?:(?P<low>{_NUMBER})(?:-|–|\sto\s))?(?P<number>{_NUMBER})\s?"
    rf"(?P<unit>{'|'.join(re.escape(unit) for unit in sorted(_UNITS, key=len, reverse=True))})(?![\w/°])"
)


def _units(text: str) -> str:
    """ "5 km" → "five kilometers", "1 kg" → "one kilogram", "5-10 ms" → "five to ten milliseconds"."""

    def read(match: re.Match[str]) -> str:
        one, many = _UNITS[match["unit"]]
        unit = one if _is_one(match["number"]) and not match["low"] else many
        if match["low"]:
            return f"{_number(match['low'], match['sign'])} to {_number(match['number'])} {unit}"
        return f"{_number(match['number'], match['sign'])} {unit}"

    return _UNIT.sub(read, text)


_YEAR_CONTEXT = re.compile(
    rf"(?P<context>\b(?:{'|'.join(re.escape(word) for word in _YEAR_WORDS)}))(?P<space>\s+|-)"
    rf"(?P<year>{_YEAR}){_NUMBER_END}"
    rf"(?:(?P<joint>\s*(?:-|–|\bto\b|\band\b|\bor\b|\bthrough\b|\buntil\b)\s*)(?P<second>{_YEAR}){_NUMBER_END})?",
    re.IGNORECASE,
)
_THE_YEAR = re.compile(rf"\b(?P<the>[Tt]he\s+)(?P<year>19\d\d|20\d\d){_NUMBER_END}")
_BRACKETED_YEAR = re.compile(rf"(?<=\()(?P<year>{_YEAR})(?=\))")
_LONE_YEAR = re.compile(rf"^(?P<lead>\W*)(?P<year>{_YEAR})(?P<trail>\W*)$")


def _years(text: str) -> str:
    """ "in 1999" → "in nineteen ninety-nine", "(2024)" → "(twenty twenty-four)"; see the module docstring."""

    def in_context(match: re.Match[str]) -> str:
        spoken = f"{match['context']}{match['space']}{_year(int(match['year']))}"
        if match["second"]:
            joint = " to " if match["joint"].strip() in ("-", "–") else match["joint"]
            spoken += f"{joint}{_year(int(match['second']))}"
        return spoken

    text = _YEAR_CONTEXT.sub(in_context, text)
    text = _THE_YEAR.sub(lambda match: match["the"] + _year(int(match["year"])), text)
    text = _BRACKETED_YEAR.sub(lambda match: _year(int(match["year"])), text)
    return _LONE_YEAR.sub(lambda match: match["lead"] + _year(int(match["year"])) + match["trail"], text)


_RANGE = re.compile(
    rf"(?<![\w.,\-−]){_NUMBER_START}(?P<first>{_NUMBER})(?:-|\s?–\s?)(?P<second>{_NUMBER}){_NUMBER_END}"
)


def _ranges(text: str) -> str:
    """ "5-10" → "five to ten", "1990–2000" → "nineteen ninety to two thousand"."""

    def read(match: re.Match[str]) -> str:
        first, second = match["first"], match["second"]
        if re.fullmatch(_YEAR, first) and re.fullmatch(rf"{_YEAR}|\d\d", second):
            second_words = _year(int(second)) if len(second) == 4 else _number(second)
            return f"{_year(int(first))} to {second_words}"
        return f"{_number(first)} to {_number(second)}"

    return _RANGE.sub(read, text)


_FRACTION = re.compile(
    rf"{_NUMBER_START}(?:(?P<whole>\d+)\s)?(?P<numerator>\d{{1,2}})/(?P<denominator>\d{{1,2}})(?![\w/]|\.\d)"
)


def _fractions(text: str) -> str:
    """ "1/2" → "one half", "3/4" → "three quarters", "2 1/3" → "two and one third"."""

    def read(match: re.Match[str]) -> str:
        numerator, denominator = int(match["numerator"]), int(match["denominator"])
        if denominator not in _DENOMINATORS or not 0 < numerator < denominator:
            return match.group(0)
        one, many = _FRACTION_NAMES.get(denominator, (_ordinal(denominator), _ordinal(denominator) + "s"))
        name = one if numerator == 1 else many
        spoken = f"{_cardinal(numerator)} {name}"
        return f"{_integer(match['whole'])} and {spoken}" if match["whole"] else spoken

    return _FRACTION.sub(read, text)


_OPERATOR = re.compile(r"(?<=\d)\s*(?P<operator>[+=×÷±])\s*(?=[-−]?\d)")
_NUMBER_SIGN = re.compile(r"(?<!\w)(?P<symbol>[#~≈])\s?(?=\d)")


def _operators(text: str) -> str:
    """ "2 + 2 = 4" → "2 plus 2 equals 4", "#1" → "number 1", "~5" → "about 5"."""
    text = _OPERATOR.sub(lambda match: f" {_OPERATOR_WORDS[match['operator']]} ", text)
    return _NUMBER_SIGN.sub(lambda match: _NUMBER_SIGN_WORDS[match["symbol"]] + " ", text)


_PLAIN_NUMBER = re.compile(rf"{_SIGN}{_NUMBER_START}(?P<number>{_NUMBER}|\.\d+){_NUMBER_END}")


def _numbers(text: str) -> str:
    """ "1,234" → "one thousand two hundred thirty-four", "3.14" → "three point one four"."""
    return _PLAIN_NUMBER.sub(lambda match: _number(match["number"], match["sign"]), text)


_RULES: tuple[Callable[[str], str], ...] = (
    _urls,
    _emails,
    _symbols,
    _phone_numbers,
    _dates,
    _times,
    _abbreviations,
    _money,
    _percentages,
    _decades,
    _versions,
    _ordinals,
    _units,
    _ranges,
    _years,
    _fractions,
    _operators,
    _numbers,
)


def normalize_english(text: str) -> str:
    """Rewrite numbers, money, dates, times, units and abbreviations in English text as words.

    Args:
        text: One segment of English text, as the segmenter emitted it.

    Returns:
        The text as a person would read it aloud; parts no rule understands are unchanged, and sentence
        punctuation is kept. Never raises.
    """
    for rule in _RULES:
        try:
            text = rule(text)
        except Exception:  # a reading mistake costs a word; an exception would cost the utterance
            continue
    return text
