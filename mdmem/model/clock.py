"""Time parsing and formatting. All stored times are UTC ISO-8601 with a trailing Z."""
from __future__ import annotations

import datetime as _dt

from ..errors import BadInput

UTC = _dt.timezone.utc
# What the API takes for a time (parse_time) and for a span (parse_duration); None: not given.
TimeLike = _dt.datetime | _dt.date | str | None
SpanLike = _dt.timedelta | int | float | str | None


def utcnow() -> _dt.datetime:
    return _dt.datetime.now(UTC).replace(microsecond=0)


def parse_time(value, *, field: str = "time") -> _dt.datetime:
    """Accept a datetime, date or ISO-8601 string; naive values are taken as UTC."""
    if isinstance(value, _dt.datetime):
        dt = value
    elif isinstance(value, _dt.date):
        dt = _dt.datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith("Z") or text.endswith("z"):
            text = text[:-1] + "+00:00"
        try:
            dt = _dt.datetime.fromisoformat(text)
        except ValueError:
            raise BadInput(f"{field}: {value!r} is not an ISO-8601 time (like 2026-10-15T09:00:00Z)") from None
    else:
        raise BadInput(f"{field}: expected an ISO-8601 time, got {type(value).__name__}")
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    try:
        return dt.astimezone(UTC)
    except OverflowError:
        raise BadInput(f"{field}: {value!r} is outside the years 1-9999 in UTC") from None


def format_time(dt: _dt.datetime | None) -> str | None:
    if dt is None:
        return None
    dt = dt.astimezone(UTC)
    if dt.microsecond:
        return dt.isoformat().replace("+00:00", "Z")
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def resolve_now(now: TimeLike = None) -> _dt.datetime:
    """``now`` if given, else the clock. (MDMEM_NOW is the CLI's: it passes ``now``.)"""
    if now is not None:
        return parse_time(now, field="now")
    return utcnow()


WRITE_SKEW = _dt.timedelta(minutes=5)  # clocks of two machines may differ this much


def resolve_write_time(now=None) -> _dt.datetime:
    """The time a write is recorded at: ``now`` (a replay of a past history) or the clock,
    never later than the clock. A future time would date a version after its successors and
    make history run backwards; a fact that starts later is ``valid_from``."""
    when = resolve_now(now)
    clock = utcnow()
    if when > clock + WRITE_SKEW:
        raise BadInput(f"now: {format_time(when)} is after the clock ({format_time(clock)}); a write is recorded "
                       "when it happens (to say a fact starts later, give valid_from)")
    return when


MAX_SPAN = _dt.timedelta(days=365 * 1000)  # beyond this a ttl is a typo, and datetimes overflow


def _check_span(span: _dt.timedelta, value, field: str) -> _dt.timedelta:
    if not _dt.timedelta(0) <= span <= MAX_SPAN:
        raise BadInput(f"{field}: {value!r} must be between 0 and 365000d (1000 years; "
                       "units s, m, h, d, w: like 90s, 15m, 2h, 7d)")
    return span


def add_span(start: _dt.datetime, span: _dt.timedelta, *, field: str = "ttl") -> _dt.datetime:
    """``start + span``, or BadInput when it passes the year 9999."""
    try:
        return start + span
    except OverflowError:
        raise BadInput(f"{field}: {format_time(start)} plus {span} passes the year 9999") from None


def parse_duration(value, *, field: str = "ttl") -> _dt.timedelta:
    """``3600``/``"90s"``/``"15m"``/``"2h"``/``"7d"`` or a timedelta."""
    if isinstance(value, _dt.timedelta):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return _check_span(_dt.timedelta(seconds=value), value, field)
        except (ValueError, OverflowError):
            pass
    if isinstance(value, str):
        text = value.strip().lower()
        units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
        try:
            if text and text[-1] in units:
                return _check_span(_dt.timedelta(seconds=float(text[:-1]) * units[text[-1]]), value, field)
            return _check_span(_dt.timedelta(seconds=float(text)), value, field)
        except (ValueError, OverflowError):
            pass
    raise BadInput(f"{field}: {value!r} is not a duration (like 90s, 15m, 2h, 7d)")
