"""Small file helpers shared across the core: hashing, sizing, and loud warnings.

Kept in one place so artifacts, bundles, gc and the CLI agree on what "the size of a run" and
"the sha256 of a file" mean.
"""

from __future__ import annotations

import hashlib
import os
import sys

CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike) -> tuple[int, str]:
    """``(size, sha256 hex)`` of a file, streamed in 1 MiB chunks (checkpoints can be huge)."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def tree_bytes(path: str | os.PathLike) -> int:
    """Bytes of every file below ``path`` (links counted as themselves; vanished files skipped)."""
    total = 0
    for dirpath, _dirs, files in os.walk(os.fspath(path)):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


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
