"""Time as the store records it: row timestamps are timezone-aware UTC datetimes (pyarrow's
``timestamp[us, UTC]``)."""

from __future__ import annotations

from datetime import datetime, timezone


def ts_now() -> datetime:
    """Current time as a timezone-aware datetime, as pyarrow's timestamp[us, UTC] expects."""
    return datetime.now(timezone.utc)
