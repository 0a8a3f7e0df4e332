"""Time as the store records it: row timestamps are timezone-aware UTC datetimes (pyarrow's
``timestamp[us, UTC]``); times in JSON files (run.json, writer files, locks, cursors) are
ISO-8601 strings in UTC with microseconds (:func:`iso`), and a reader takes any ISO-8601 string,
naive meaning UTC (:func:`parse_time`), and nothing else."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any


def ts_now() -> datetime:
    """Current time as a timezone-aware datetime, as pyarrow's timestamp[us, UTC] expects."""
    return datetime.now(timezone.utc)


def iso(ts: float | None) -> str | None:
    """A Unix time as an ISO-8601 UTC string with microseconds; None stays None."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="microseconds")


def parse_iso(value: str | None) -> float | None:
    """An ISO-8601 string as a Unix time (:func:`parse_time`); None if it is not one."""
    when = parse_time(value)
    return None if when is None else when.timestamp()


def parse_time(value: Any) -> datetime | None:
    """An ISO-8601 string as an aware UTC datetime (naive means UTC); None if it is not one."""
    if not value or not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
        return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)
    except (ValueError, OverflowError):
        return None
