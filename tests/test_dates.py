"""The calendar date a question names, for the ranker's ``dated`` feature."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from convmem.text.dates import date_span


def _utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    "question",
    [
        "What dish did Nate make on 9 November, 2022?",
        "What dish did Nate make on November 9, 2022?",
        "the 9th of Nov 2022",
        "What happened on 2022-11-09?",
        "2022年11月9日我做了什么菜",
        "2022 年 11 月 9 号我做了什么菜",
    ],
)
def test_a_named_day_covers_that_day_in_every_time_zone(question: str) -> None:
    # from its start at UTC+14 to its end at UTC-12
    assert date_span(question) == (_utc("2022-11-08T10:00"), _utc("2022-11-10T12:00"))


@pytest.mark.parametrize(
    "question", ["What did John do in May 2023?", "2023年5月我去了哪里", "2023年05月的事"]
)
def test_a_named_month_covers_the_month(question: str) -> None:
    assert date_span(question) == (_utc("2023-04-30T10:00"), _utc("2023-06-01T12:00"))


def test_december_ends_in_the_next_year_and_the_first_date_counts() -> None:
    assert date_span("in Dec. 2022") == (_utc("2022-11-30T10:00"), _utc("2023-01-01T12:00"))
    # the first date the question names; a day before a month at the same place
    first = date_span("Did I go on 8 May, 2023 or in June 2023?")
    assert first == (_utc("2023-05-07T10:00"), _utc("2023-05-09T12:00"))


@pytest.mark.parametrize(
    "question",
    [
        "What did I say yesterday?",
        "What did I say on May 8?",  # no year: no guess
        "上周三我说了什么",
        "you may 2023 not remember",  # "may" in lower case is the verb
        "How many 2023 tickets?",
    ],
)
def test_no_absolute_date_with_a_year_is_no_span(question: str) -> None:
    assert date_span(question) is None


def test_an_impossible_day_is_read_as_its_month() -> None:
    assert date_span("on 31 June 2023") == (_utc("2023-05-31T10:00"), _utc("2023-07-01T12:00"))
