"""A bundle's bytes: one file or split volumes (``out.000``, ``out.001``, ...), compressed or not.

Promises: :class:`SplitWriter` writes consecutive volumes of at most ``limit`` bytes, each
fsynced when closed; :func:`volumes` finds the files of a bundle by its name (or any volume's);
:func:`open_volumes` reads them as one stream, undoing zstd or gzip compression found by its
magic bytes. Nothing here knows what the tar stream holds.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

from ...errors import BundleError

CHUNK = 1 << 20
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_GZIP_MAGIC = b"\x1f\x8b"


class SplitWriter(io.RawIOBase):
    """Writes one file, or consecutive volumes of at most ``limit`` bytes (``out.000``, ...)."""

    def __init__(self, out: Path, limit: int | None):
        self.out, self.limit = Path(out), limit
        self.paths: list[Path] = []
        self._f: io.BufferedWriter | None = None
        self._n = 0

    def _next(self) -> None:
        if self._f is not None:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
        path = self.out if self.limit is None else self.out.with_name(f"{self.out.name}.{len(self.paths):03d}")
        self._f = open(path, "wb")
        self.paths.append(path)
        self._n = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        data = memoryview(data).cast("B")
        done = 0
        while done < len(data):
            if self._f is None or (self.limit is not None and self._n >= self.limit):
                self._next()
            assert self._f is not None  # _next opened it
            room = len(data) - done if self.limit is None else min(len(data) - done, self.limit - self._n)
            self._f.write(data[done:done + room])
            self._n += room
            done += room
        return done

    def close(self) -> None:
        if self._f is not None and not self._f.closed:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
        super().close()


class ConcatReader(io.RawIOBase):
    """Reads several volume files as one stream."""

    def __init__(self, paths: list[Path]):
        self._paths = list(paths)
        self._f: io.BufferedReader | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while True:
            if self._f is None:
                if not self._paths:
                    return 0
                self._f = open(self._paths.pop(0), "rb")
            n = self._f.readinto(b)
            if n:
                return n
            self._f.close()
            self._f = None

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
        super().close()


def volumes(path: str | os.PathLike) -> list[Path]:
    """The files of a bundle: ``path`` itself, or its split volumes ``path.000``, ``path.001``..."""
    path = Path(path)
    if path.suffix.isdigit() and len(path.suffix) == 4 and not path.with_suffix("").exists():
        path = path.with_suffix("")
    if path.is_file():
        return [path]
    vols: list[Path] = []
    while (path.with_name(f"{path.name}.{len(vols):03d}")).is_file():
        vols.append(path.with_name(f"{path.name}.{len(vols):03d}"))
    if not vols:
        raise BundleError(f"no bundle at {path} (nor split volumes {path.name}.000, ...)")
    return vols


def open_volumes(path: str | os.PathLike):
    raw = io.BufferedReader(ConcatReader(volumes(path)), CHUNK)
    head = raw.peek(4)[:4]
    if head == _ZSTD_MAGIC:
        import pyarrow as pa

        return pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), "zstd"), "zstd"
    if head[:2] == _GZIP_MAGIC:
        import gzip

        return gzip.GzipFile(fileobj=raw, mode="rb"), "gzip"
    return raw, None

