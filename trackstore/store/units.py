"""Parsing the human units users type on the command line: durations (``7d``) and sizes (``2G``)."""

from __future__ import annotations

import re

from ..errors import UsageError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)?\s*$", re.I)
_DURATION_S = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b?)\s*$", re.I)
_SIZE_POW = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_duration(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` (a bare number is seconds) -> seconds."""
    m = _DURATION.match(str(text))
    if not m:
        raise UsageError(f"invalid duration {text!r}: use a number with s, m, h, d or w (e.g. 30d, 12h)")
    return float(m.group(1)) * _DURATION_S[(m.group(2) or "s").lower()]


def parse_size(text: str) -> int:
    """``200G``, ``1.5T``, ``500MiB``, ``1024`` -> bytes (powers of 1024)."""
    m = _SIZE.match(str(text))
    if not m:
        raise UsageError(f"invalid size {text!r}: use a number with K, M, G or T (e.g. 200G)")
    return int(float(m.group(1)) * 1024 ** _SIZE_POW[m.group(2).lower()])


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
