"""Lines trackstore writes to stderr on its own: warnings and notes that never raise.

Used where training must not be disturbed (the writer thread, atexit, tracing): a failed write to
stderr (closed, a broken pipe) is swallowed, never turned into an exception in the caller.
Every line starts with ``trackstore: ``.
"""

from __future__ import annotations

import sys


def warn(msg: str) -> None:
    """A loud warning on stderr that never raises (used where training must not be disturbed)."""
    _say(f"WARNING: {msg}")


def warn_note(msg: str) -> None:
    """An informational line on stderr (why something takes a moment) that never raises."""
    _say(msg)


def _say(line: str) -> None:
    try:
        sys.stderr.write(f"trackstore: {line}\n")
        sys.stderr.flush()
    except Exception:
        pass
