"""Parsing the human units users type on the command line: durations (``7d``) and sizes (``2G``).

Only the command line reads these spellings (the library takes seconds and bytes), so they live
in the CLI. Durations have one vocabulary (:data:`DURATION_UNITS`) and one parser (:func:`parse_duration`),
used by every option that takes one (``gc --older-than``, ``sync --since``, ``runs --since``,
``export --since``). A number without a unit, ``m`` (minutes or months?) and months or years
(no fixed length) are refused rather than guessed: a guess in a ``gc ... --yes`` cron line
deletes runs.
"""

from __future__ import annotations

import re
import time

from trackstore.errors import UsageError
from trackstore.store.clock import parse_iso

# the one vocabulary of duration units: spelling -> seconds (matched case-insensitively)
DURATION_UNITS = {"s": 1, "sec": 1, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DURATION_EXAMPLES = "45s, 90min, 12h, 30d, 2w"
MAX_DURATION_S = 36500 * 86400  # 100 years: past that a cutoff leaves the calendar datetime can hold
_NO_FIXED_LENGTH = ("mo", "mon", "mos", "mth", "month", "months", "y", "yr", "yrs", "year", "years")
_DURATION = re.compile(r"\s*([+-]?)([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)\s*", re.IGNORECASE | re.ASCII)
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b?)\s*$", re.I)
_SIZE_POW = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_duration(text: str, option: str = "duration") -> float:
    """``45s``, ``90min``, ``12h``, ``1.5d``, ``2w`` -> seconds (``0d`` is 0).

    Refused with a :class:`UsageError` naming ``option`` and the accepted spellings: a number
    without a unit (``30``), ``m`` (``6m``: minutes or months?), months and years, a negative
    number, anything longer than 100 years, and anything else that is not a number and a unit.
    """
    text = str(text)
    accepted = f"use a number and a unit: {DURATION_EXAMPLES} (units: {', '.join(DURATION_UNITS)})"
    m = _DURATION.fullmatch(text)
    if not m:
        raise UsageError(f"invalid {option} {text!r}: not a duration; {accepted}")
    sign, number, unit = m.group(1), m.group(2), m.group(3).lower()
    if not unit:
        raise UsageError(f"invalid {option} {text!r}: a number needs a unit (30d is 30 days, not 30 seconds); "
                         f"{accepted}")
    if unit == "m":
        raise UsageError(f"invalid {option} {text!r}: 'm' could mean minutes or months; write {number}min for "
                         f"minutes, or days for months (90d); {accepted}")
    if unit in _NO_FIXED_LENGTH:
        raise UsageError(f"invalid {option} {text!r}: months and years have no fixed length; write days or weeks "
                         f"(90d, 52w); {accepted}")
    if unit not in DURATION_UNITS:
        raise UsageError(f"invalid {option} {text!r}: unknown unit {unit!r}; {accepted}")
    if sign == "-" and float(number) != 0:
        raise UsageError(f"invalid {option} {text!r}: a duration cannot be negative; {accepted}")
    seconds = float(number) * DURATION_UNITS[unit]
    if seconds > MAX_DURATION_S:
        raise UsageError(f"invalid {option} {text!r}: longer than 100 years (36500d); {accepted}")
    return seconds


def parse_since(text: str, option: str = "--since", now: float | None = None) -> float:
    """An age (a duration, as :func:`parse_duration`: ``7d`` means 7 days ago) or an ISO date or
    time (``2026-11-30``, naive means UTC) -> a Unix time."""
    ts = parse_iso(str(text).strip())
    if ts is not None:
        return ts
    try:
        return (time.time() if now is None else now) - parse_duration(text, option)
    except UsageError as exc:
        raise UsageError(f"{exc}; or a date like 2026-11-30") from None


def parse_size(text: str) -> int:
    """``200G``, ``1.5T``, ``500MiB``, ``1024`` -> bytes (powers of 1024)."""
    m = _SIZE.match(str(text))
    if not m:
        raise UsageError(f"invalid size {text!r}: use a number with K, M, G or T (e.g. 200G)")
    return int(float(m.group(1)) * 1024 ** _SIZE_POW[m.group(2).lower()])

