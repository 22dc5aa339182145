"""RFC 3339 times in and out, always in UTC (pure: no clock is read here)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from gangplugin.core.errors import InputError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_time(value: object, field: str) -> datetime:
    """A UTC-aware datetime from RFC 3339 text (or from a datetime YAML already parsed).

    An offset other than Z is accepted and converted to UTC; a time without an offset
    is refused, because guessing its zone would silently shift a reservation.
    """
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, date):
        raise InputError(field, f"{value.isoformat()!r} is a date; write a time like 2026-12-01T11:30:00Z")
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        # fromisoformat takes "Z" since 3.11, but also forms RFC 3339 does not allow (e.g. no "T").
        if "T" not in text.upper():
            raise InputError(field, f"{value!r} is not an RFC 3339 time like 2026-12-01T11:30:00Z")
        try:
            parsed = datetime.fromisoformat(text.upper())
        except ValueError:
            raise InputError(field, f"{value!r} is not an RFC 3339 time like 2026-12-01T11:30:00Z") from None
    else:
        raise InputError(field, f"{value!r} is not an RFC 3339 time like 2026-12-01T11:30:00Z")
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise InputError(field, f"{format_naive(parsed)!r} has no time zone; end it with Z (UTC)")
    return parsed.astimezone(UTC)


def format_naive(value: datetime) -> str:
    return value.replace(tzinfo=None).isoformat()


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with a Z, e.g. "2026-12-01T11:30:00Z" (fraction only when there is one)."""
    utc = value.astimezone(UTC)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond:
        text += f".{utc.microsecond:06d}".rstrip("0")
    return text + "Z"


def to_seconds(value: datetime) -> int:
    """Whole seconds since the epoch, rounded down (exact for whole-second times)."""
    delta = value - _EPOCH
    return delta.days * 86400 + delta.seconds


def from_seconds(seconds: int) -> datetime:
    return _EPOCH + timedelta(seconds=seconds)
