"""The calendar date a question names ("on 9 November, 2022", "in May 2023", "2023年5月8日").

A memory question that names a date mostly asks about what was said that day (LoCoMo dev:
the evidence of 115 of the 159 dated questions was said on the named day or in the named
month). :func:`date_span` reads the first absolute date of a question, English or Chinese,
with its year, to the day or to the month, and returns the span of time it covers in every
time zone: a turn is stored in UTC, and whoever asks names a day of their own calendar.
Relative dates ("yesterday", "上周三") and dates without a year are not read: they need a
reference time or a guess of the year.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

__all__ = ["MONTHS", "MONTH_NUMBERS", "date_span"]

#: English month names, January first.
MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
#: A month's number by its English name or abbreviation (march, mar: 3; sept: 9).
MONTH_NUMBERS = {
    key: number for number, name in enumerate(MONTHS, start=1) for key in (name, name[:3])
} | {"sept": 9}
_SHORT = [key for key in MONTH_NUMBERS if key not in MONTHS]
_MONTH = rf"({'|'.join(MONTHS)}|{'|'.join(sorted(_SHORT, key=len, reverse=True))})\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(\d{4})"
_PATTERNS = (
    # 9 November, 2022 / 9th of Nov 2022
    ("day", re.compile(rf"\b{_DAY} (?:of )?{_MONTH},? {_YEAR}\b", re.IGNORECASE), (3, 2, 1)),
    # November 9, 2022
    ("day", re.compile(rf"\b{_MONTH} {_DAY},? {_YEAR}\b", re.IGNORECASE), (3, 1, 2)),
    # 2022-11-09, 2022/11/09
    ("day", re.compile(r"\b(\d{4})[-/](\d{1,2})[-/](\d{1,2})\b"), (1, 2, 3)),
    # 2022年11月9日 / 9号
    ("day", re.compile(r"(\d{4})\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]"), (1, 2, 3)),
    # November 2022
    ("month", re.compile(rf"\b{_MONTH},? {_YEAR}\b", re.IGNORECASE), (2, 1, None)),
    # 2022年11月
    ("month", re.compile(r"(\d{4})\s*年\s*(\d{1,2})\s*月"), (1, 2, None)),
)
# the time zones of the world run from UTC-12 to UTC+14
_EARLIEST = timedelta(hours=14)
_LATEST = timedelta(hours=12)


def _month(text: str) -> int:
    if text.isdigit():
        return int(text)
    name = text.lower().rstrip(".")
    return MONTH_NUMBERS[name]


def date_span(question: str) -> tuple[float, float] | None:
    """The first absolute date ``question`` names, as ``(start, end)`` POSIX seconds: from
    the start of the day (or month) where it begins first (UTC+14) to its end where it ends
    last (UTC-12). None when it names no date with a year; an impossible day (31 June
    2023) is read as its month."""
    found: list[tuple[int, str, date]] = []
    for precision, pattern, (year, month, day) in _PATTERNS:
        match = next(
            (m for m in pattern.finditer(question) if m.group(month) != "may"), None
        )  # "may" in lower case is the verb ("I may 2023..." is rare, "you may" is not)
        if match is None:
            continue
        try:
            named = date(
                int(match.group(year)),
                _month(match.group(month)),
                int(match.group(day)) if day is not None else 1,
            )
        except ValueError:
            continue
        found.append((match.start(), precision, named))
    if not found:
        return None
    # the earliest in the question; a day before a month at the same place
    _, precision, named = min(found, key=lambda item: (item[0], item[1] != "day"))
    start = datetime(named.year, named.month, named.day, tzinfo=UTC)
    if precision == "day":
        end = start + timedelta(days=1)
    else:
        end = datetime(named.year + named.month // 12, named.month % 12 + 1, 1, tzinfo=UTC)
    return (start - _EARLIEST).timestamp(), (end + _LATEST).timestamp()
