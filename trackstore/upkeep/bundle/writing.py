"""Writing a bundle: the manifest first, then every member, each checked as it is written.

Promises: a :class:`Member` is one file of a bundle with its size and sha256 known before the
bundle is written (a snapshot in memory of a file a live run rewrites, or an immutable file read
again and checked again while written: one that changed refuses the export).
:func:`write_bundle` writes the manifest listing every member, then the members, into a tar
stream (zstd, gzip or none; split into volumes or not) and removes what it wrote on any failure.
:func:`check_output_folder` refuses an output folder that does not exist (a drive not
mounted) rather than creating it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from ...errors import BundleError, UsageError
from ...store.files import sha256_file
from .manifest import MANIFEST, TOP
from .volumes import SplitWriter


@dataclass
class Member:
    """One file of a bundle: its name under ``trackstore-bundle/``, what the manifest says of it,
    and where its bytes come from: a snapshot in memory (files that may change while a run is
    live: run.json, writer heartbeats, sync cursors) or an immutable file read again, and
    checked again, when it is written."""

    name: str
    size: int
    sha256: str
    mtime: float
    path: Path | None = None
    data: bytes | None = None

    @classmethod
    def of_bytes(cls, name: str, data: bytes, mtime: float | None = None) -> Member:
        return cls(name, len(data), hashlib.sha256(data).hexdigest(), mtime or time.time(), data=data)

    @classmethod
    def of_file(cls, name: str, path: Path) -> Member:
        mtime = path.stat().st_mtime
        size, sha = sha256_file(path)
        return cls(name, size, sha, mtime, path=path)

    @classmethod
    def snapshot(cls, name: str, path: Path) -> Member:
        mtime = path.stat().st_mtime
        return cls.of_bytes(name, path.read_bytes(), mtime)


class BundleWriter:
    """A tar stream being written: the manifest first, then every member, checked as it goes."""

    def __init__(self, out: Path, compress: str | None, split_bytes: int | None):
        self.sink = SplitWriter(out, split_bytes)
        self.compress = compress
        if compress == "zstd":
            import pyarrow as pa

            self._native = pa.PythonFile(self.sink, mode="w")
            self.stream = pa.CompressedOutputStream(self._native, "zstd")
        elif compress == "gzip":
            import gzip

            self.stream = gzip.GzipFile(fileobj=self.sink, mode="wb", mtime=0)
        elif compress is None:
            self.stream = self.sink
        else:
            raise BundleError(f"unknown compression {compress!r} (use zstd or gzip)")
        self.tar = tarfile.open(fileobj=self.stream, mode="w|", format=tarfile.PAX_FORMAT)

    def write(self, manifest: dict, members: list[Member]) -> list[Path]:
        """The manifest (listing every member's path, size and sha256), then the members."""
        manifest["files"] = [{"path": m.name, "size": m.size, "sha256": m.sha256} for m in members]
        data = json.dumps(manifest, indent=1, ensure_ascii=False).encode()
        self._add(MANIFEST, io.BytesIO(data), len(data), time.time())
        for m in members:
            if m.data is not None:
                self._add(m.name, io.BytesIO(m.data), m.size, m.mtime)
                continue
            assert m.path is not None  # a member without data has a path
            with open(m.path, "rb") as f:
                sha = self._add(m.name, f, m.size, m.mtime)
            if sha != m.sha256:
                raise BundleError(f"{m.path} changed while it was being exported; export again")
        self.tar.close()
        self.stream.close()
        if not self.sink.closed:
            self.sink.close()
        return self.sink.paths

    def _add(self, name: str, fobj, size: int, mtime: float) -> str:
        h = hashlib.sha256()

        class _Hashing:
            def read(self, n=-1):
                b = fobj.read(n)
                h.update(b)
                return b

        info = tarfile.TarInfo(f"{TOP}/{name}")
        info.size, info.mode, info.mtime = size, 0o644, int(mtime)
        self.tar.addfile(info, _Hashing())
        return h.hexdigest()


def check_output_folder(out: str | os.PathLike) -> None:
    """The bundle's folder must exist. It is not created: on removable media a missing folder
    usually means the drive is not mounted, and creating it would fill the local disk instead."""
    folder = Path(out).parent
    if not folder.is_dir():
        raise UsageError(f"{folder} does not exist (is the drive mounted?): create it, or write the bundle elsewhere")


def write_bundle(out: str | os.PathLike, compress: str | None, split_bytes: int | None, manifest: dict,
                 members: list[Member]) -> list[Path]:
    """Write a bundle; on any failure remove what was written of it."""
    b = BundleWriter(Path(out), compress, split_bytes)
    try:
        return b.write(manifest, members)
    except BaseException:
        for p in b.sink.paths:
            p.unlink(missing_ok=True)
        raise
