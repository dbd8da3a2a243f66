"""The time a question names: "on 7 July, 2023", "in May 2023", "in 2022", "before August 3,
2023", "after 1 May 2023". Recall ranks notes whose ``valid_from`` falls in that span higher
(a note's valid_from is when it was said or became true), since their words alone often do
not carry the date.
"""
from __future__ import annotations

import calendar
import datetime as _dt
import re
from dataclasses import dataclass
from functools import cache

_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
_MONTHS.pop("may", None)
_MONTHS["may"] = 5
_MONTH = r"(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DIR = r"(?:\b(before|after|since|until|by)\s+(?:the\s+\w+\s+of\s+)?)?"
# Every pattern needs a four-digit year; a question without one names no span and never
# compiles them (~15-35 ms of a CLI call's CPU).
_HAS_YEAR = re.compile(r"\d{4}")


@cache
def _patterns() -> tuple[re.Pattern, re.Pattern, re.Pattern, re.Pattern, re.Pattern]:
    return (re.compile(_DIR + r"\b(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?" + _MONTH + r",?\s+(\d{4})\b", re.I),
            re.compile(_DIR + r"\b" + _MONTH + r"\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})\b", re.I),
            re.compile(_DIR + r"\b(\d{4})-(\d{2})-(\d{2})\b", re.I),
            re.compile(_DIR + r"\b" + _MONTH + r",?\s+(\d{4})\b", re.I),
            re.compile(r"(?:\b(before|after|since|until|by|in|during|of)\s+)(\d{4})\b", re.I))


UTC = _dt.timezone.utc


@dataclass(frozen=True)
class Span:
    """[start, end) in epoch seconds; a question may name an open span (before/after)."""

    start: int
    end: int


# "Before/after D" asks about the time next to D, and is often said on D itself ("last
# weekend", asked as "the weekend before April 10"): the span runs this far from D and
# includes D's own day.
NEAR = _dt.timedelta(days=14)


def _span(direction: str | None, start: _dt.datetime, end: _dt.datetime) -> Span:
    direction = (direction or "").lower()
    if direction in ("before", "until", "by"):
        start = start - NEAR
    elif direction in ("after", "since"):
        end = end + NEAR
    return Span(int(start.timestamp()), int(end.timestamp()))


def _day(direction, day: int, month: int, year: int) -> Span | None:
    try:
        start = _dt.datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None
    return _span(direction, start, start + _dt.timedelta(days=1))


def _month(direction, month: int, year: int) -> Span:
    start = _dt.datetime(year, month, 1, tzinfo=UTC)
    end = _dt.datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return _span(direction, start, end)


def named_spans(question: str) -> list[Span]:
    """Every span of time the question names, most precise first; [] when it names none."""
    spans: list[Span] = []
    taken: list[tuple[int, int]] = []
    if not _HAS_YEAR.search(question):
        return spans
    _DAY_MONTH_YEAR, _MONTH_DAY_YEAR, _ISO, _MONTH_YEAR, _YEAR = _patterns()

    def free(m) -> bool:
        return not any(a < m.end() and m.start() < b for a, b in taken)

    for m in _DAY_MONTH_YEAR.finditer(question):
        s = _day(m.group(1), int(m.group(2)), _MONTHS[m.group(3).lower()], int(m.group(4)))
        taken.append(m.span())  # a day that does not exist names no span, not its month
        if s:
            spans.append(s)
    for m in _MONTH_DAY_YEAR.finditer(question):
        if free(m):
            s = _day(m.group(1), int(m.group(3)), _MONTHS[m.group(2).lower()], int(m.group(4)))
            taken.append(m.span())
            if s:
                spans.append(s)
    for m in _ISO.finditer(question):
        if free(m):
            s = _day(m.group(1), int(m.group(4)), int(m.group(3)), int(m.group(2)))
            taken.append(m.span())
            if s:
                spans.append(s)
    for m in _MONTH_YEAR.finditer(question):
        if free(m):
            spans.append(_month(m.group(1), _MONTHS[m.group(2).lower()], int(m.group(3))))
            taken.append(m.span())
    for m in _YEAR.finditer(question):
        year = int(m.group(2))
        if free(m) and 1900 <= year <= 2200:
            direction = m.group(1).lower()
            spans.append(_span(direction if direction in ("before", "after", "since", "until", "by") else None,
                               _dt.datetime(year, 1, 1, tzinfo=UTC), _dt.datetime(year + 1, 1, 1, tzinfo=UTC)))
            taken.append(m.span())
    return spans


# A question that asks when something happened ("When did Mel paint the sunrise?").
_ASKS_WHEN = re.compile(r"^\s*when\b", re.I)
# Words that place what a note says in time relative to when it was said ("yesterday",
# "last week", "two days ago", "on Friday"). A note's own date is its valid_from, so dates
# and month names (which a note's text may carry anyway) are not counted.
_RELATIVE_WORDS = frozenset(
    "yesterday today tonight tomorrow ago recently lately last next since weekend weekends week weeks month "
    "months year years".split()
    + [day + s for day in ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
       for s in ("", "s")])
_THIS = re.compile(r"\bthis (?:morning|summer|spring|fall|autumn|winter)\b", re.I)
_WORD = re.compile(r"[a-z]+")


def asks_when(question: str) -> bool:
    return bool(_ASKS_WHEN.search(question))


def tells_when(text: str) -> bool:
    """The text places something in time relative to when it was said: the answer to "when
    did X" is usually such a note ("I went to the support group yesterday"). In LoCoMo's dev
    half 82% of the evidence for "when" questions does, against 16% of all turns (REALTALK:
    68% against 22%)."""
    lowered = text.lower()
    return not _RELATIVE_WORDS.isdisjoint(_WORD.findall(lowered)) or bool(_THIS.search(lowered))
