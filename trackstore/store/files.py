"""What files weigh and hash to: a file's sha256, a folder's bytes, and bytes as people read them.

Kept in one place so artifacts, bundles, gc and the CLI agree on what "the size of a run" and
"the sha256 of a file" mean, and print sizes the same way (1024-based units: KiB, MiB, ...).
Nothing here changes a file.
"""

from __future__ import annotations

import hashlib
import os

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


def format_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"``: bytes in 1024-based units, whole bytes below 1 KiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
