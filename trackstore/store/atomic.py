"""Make a file visible only when it is complete: temp file -> flush -> fsync -> rename -> fsync dir.

This is the single idiom every file in the store goes through (Parquet parts, run.json, sync
cursors, manifests). A crash at any point leaves either the old file, the new file, or a stray
temp file whose name ends in ``.tmp`` (never matched by ``*.parquet`` or ``*.json`` globs), which
``trackstore doctor`` and the next writer clean up.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any, Callable

from .layout import TMP_SUFFIX
from .text import storable


def temp_path_for(path: Path) -> Path:
    """A hidden sibling name for ``path`` that no reader glob matches."""
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}{TMP_SUFFIX}")


def is_temp_file(path: Path) -> bool:
    return path.name.startswith(".") and path.name.endswith(TMP_SUFFIX)


def fsync_dir(directory: Path) -> None:
    """Persist a rename: on POSIX the directory entry itself must be synced."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems (e.g. certain FUSE mounts) refuse fsync on directories
    finally:
        os.close(fd)


def write_atomic(path: Path, writer: Callable[[Any], None], *, durable: bool = True) -> None:
    """Call ``writer(fileobj)`` on a temp file, then atomically move it to ``path``.

    ``durable=False`` skips the fsyncs: for files whose loss on power failure is harmless
    (heartbeats), where the rename still guarantees readers never see a partial file.
    """
    path = Path(path)
    tmp = temp_path_for(path)
    try:
        with open(tmp, "wb") as f:
            writer(f)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(path.parent)


def write_bytes_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    write_atomic(path, lambda f: f.write(data), durable=durable)


def write_json_atomic(path: Path, obj: Any, *, durable: bool = True, indent: int | None = 1) -> None:
    """``obj`` as UTF-8 JSON; text that is not valid Unicode (lone surrogates, from undecodable
    bytes in ``sys.argv`` or a path) is written escaped, see :mod:`trackstore.store.text`.
    ``indent=None`` writes it on one line, several times faster (Python's indenting encoder is
    pure Python): for files machines rewrite often and people rarely read (sync cursors)."""
    separators = (",", ":") if indent is None else None
    try:
        data = json.dumps(obj, indent=indent, separators=separators, ensure_ascii=False, default=str,
                          allow_nan=True).encode("utf-8")
    except UnicodeEncodeError:
        data = json.dumps(storable(obj), indent=indent, separators=separators, ensure_ascii=False, default=str,
                          allow_nan=True).encode("utf-8")
    write_bytes_atomic(path, data, durable=durable)


def read_json(path: Path) -> Any:
    with open(path, "rb") as f:
        return json.loads(f.read())
