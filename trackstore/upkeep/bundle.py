"""Bundles: carrying runs across an air gap (export/import), and sync receipts back.

A bundle is a POSIX tar stream (optionally zstd- or gzip-compressed, optionally split into
``<out>.000``, ``<out>.001``, ... volumes) whose members all live under ``trackstore-bundle/``:

::

    trackstore-bundle/manifest.json                           first member
    trackstore-bundle/runs/project=<p>/run=<id>/...          run folders (temp files left out)
    trackstore-bundle/sync/<dest_id>/...                      receipts: sync cursors

The manifest lists every file's path, size and sha256, each run's row counts per kind and
schema versions, the source host and the trackstore version. It comes first (bundle format 2;
format 1, trackstore 0.1.0's first bundles, put it last and must be exported again), so export
hashes every file before writing it (immutable files are read again and checked while being
written; run.json and heartbeats, which a live run rewrites, are snapshots).

What import promises:

* **Every member is checked against the manifest before and while it is written.** Refused
  before a byte of it is written: a member that is not listed, or whose tar header gives
  another size than listed (a gzip bomb is refused at its header, never inflated), and a
  bundle whose listed files do not fit in the free disk space. A member is written no further
  than its listed size, its sha256 is computed as it streams, and a mismatch stops the import
  at that member. Errors say which it is: hostile (``refusing bundle``), damaged or
  truncated, or the disk (a :class:`~trackstore.errors.WriteError`, exit code 4).
* **Nothing becomes visible before everything is verified.** The stream is extracted into a
  staging folder inside the store (``<root>/_import/<token>/``, outside every query glob), no
  listed file may be missing, and a run whose files repeat a ``(writer, seq)`` row id is
  refused (:func:`repeated_row_ids`); only then are runs moved into place — a new run with one
  ``rename(2)``. Any failure removes the staging folder: the store is unchanged.
* **Hostile archives are refused** before a byte of theirs is written: absolute paths, ``..``,
  paths outside ``trackstore-bundle/``, invalid project/run names, symlinks, hard links,
  devices and FIFOs, duplicate members, members not listed or of another size.
* **An existing run is never overwritten with different content.** Part files are immutable
  and named by writer and first seq, so runs merge by row identity: an incoming part whose
  ``(writer, seq)`` rows are already present (even in a compacted file) is skipped, a part with
  new rows is added, a compacted incoming file replaces the small local parts it covers (with
  the atomic folder swap of :mod:`trackstore.store.merge`). A file with the same name and other
  bytes, a partial overlap of rows, or a run.json describing a different run (another
  ``created_at``) is a :class:`~trackstore.errors.BundleError` and nothing is changed.
  ``run.json`` and writer heartbeats: the newer one wins.
* **A bundled run must be what it claims.** Its run.json must name the run of the folder it is
  in (``project`` and ``run_id``), and every ``.parquet`` file in its record folders must be a
  readable Parquet part of that kind (framing, footer and schema): otherwise the bundle is
  refused (a :class:`~trackstore.errors.BundleError`, exit code 9) and nothing is imported.
* **Idempotent.** Importing the same bundle twice changes nothing the second time; importing
  a newer bundle of a still-growing run adds only its new part files.

Receipts (``kind: "receipt"``) carry ``_sync`` cursors from the connected side back to the
air-gapped one; importing one merges them (union of acknowledged rows), so gc there knows what
was uploaded. Every cursor of a receipt is read as every reader reads a cursor
(:func:`trackstore.store.cursor.check_cursor`: field types, row ids int64 from 0, ranges with
``lo <= hi``, counts from 0), and so is each merged result, before any is written: one bad
cursor refuses the whole receipt (a :class:`~trackstore.errors.BundleError` naming the file
and the field, exit code 9). The manifest's row counts are checked the same way.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import secrets
import shutil
import tarfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any, Callable, Iterable, Iterator, Sequence

from ..errors import BundleError, InvalidNameError, UsageError, WriteError
from ..read.listing import RunInfo
from ..store import meta as _meta
from ..store.atomic import is_temp_file, read_json, write_bytes_atomic
from ..store.clock import iso, parse_iso
from ..store.files import sha256_file
from ..store.host import hostname
from ..store.layout import (
    DESTINATION_FILE,
    IMPORT_DIR,
    PROJECT_PREFIX,
    RUN_FILE,
    RUN_PREFIX,
    WRITERS_DIR,
    RunPaths,
    is_part_name,
    resolve_root,
)
from ..store.names import validate_project, validate_run_id
from ..store.ranges import RangeSet, check_count

TOP = "trackstore-bundle"
MANIFEST = "manifest.json"
FORMAT = "trackstore-bundle"
BUNDLE_VERSION = 2  # 2: the manifest is the first member (1, trackstore 0.1.0's first bundles: the last)
CHUNK = 1 << 20
MAX_MANIFEST = 256 << 20  # a million files listed take about 150 MB
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_GZIP_MAGIC = b"\x1f\x8b"


# ---------------------------------------------------------------------------- byte streams
class _SplitWriter(io.RawIOBase):
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


class _ConcatReader(io.RawIOBase):
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


def _open_read(path: str | os.PathLike):
    raw = io.BufferedReader(_ConcatReader(volumes(path)), CHUNK)
    head = raw.peek(4)[:4]
    if head == _ZSTD_MAGIC:
        import pyarrow as pa

        return pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), "zstd"), "zstd"
    if head[:2] == _GZIP_MAGIC:
        import gzip

        return gzip.GzipFile(fileobj=raw, mode="rb"), "gzip"
    return raw, None


# ---------------------------------------------------------------------------- export
@dataclass
class ExportResult:
    paths: list[Path]
    runs: int
    files: int
    bytes: int
    manifest: dict


@dataclass
class _Member:
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
    def of_bytes(cls, name: str, data: bytes, mtime: float | None = None) -> _Member:
        return cls(name, len(data), hashlib.sha256(data).hexdigest(), mtime or time.time(), data=data)

    @classmethod
    def of_file(cls, name: str, path: Path) -> _Member:
        mtime = path.stat().st_mtime
        size, sha = sha256_file(path)
        return cls(name, size, sha, mtime, path=path)

    @classmethod
    def snapshot(cls, name: str, path: Path) -> _Member:
        mtime = path.stat().st_mtime
        return cls.of_bytes(name, path.read_bytes(), mtime)


def _run_files(paths: RunPaths) -> Iterator[Path]:
    """Files of a run folder worth carrying: no temp files, no compaction leftovers."""
    from ..store.layout import MERGE_MARKER, MERGE_STAGING_PREFIX

    for dirpath, dirs, files in os.walk(paths.dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith(MERGE_STAGING_PREFIX))
        for f in sorted(files):
            p = Path(dirpath) / f
            if is_temp_file(p) or f == MERGE_MARKER or p.is_symlink() or not p.is_file():
                continue
            yield p


def _part_stats(path: Path) -> tuple[int, int | None]:
    import pyarrow.parquet as pq

    from ..store.schema import file_version

    try:
        pf = pq.ParquetFile(path)
        return pf.metadata.num_rows, file_version(pf.schema_arrow.metadata)
    except Exception:
        return 0, None


class _Bundle:
    """A tar stream being written: the manifest first, then every member, checked as it goes."""

    def __init__(self, out: Path, compress: str | None, split_bytes: int | None):
        self.sink = _SplitWriter(out, split_bytes)
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

    def write(self, manifest: dict, members: list[_Member]) -> list[Path]:
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


def _manifest_base(kind: str, compress: str | None) -> dict:
    from .._version import __version__
    from ..store.schema import SCHEMA_VERSION

    return {"format": FORMAT, "version": BUNDLE_VERSION, "kind": kind, "created_at": iso(time.time()),
            "source_host": hostname(), "trackstore_version": __version__, "schema_version": SCHEMA_VERSION,
            "compression": compress}


def _run_members(info: RunInfo) -> tuple[dict, list[_Member]]:
    """One run's manifest entry and its members (run.json and heartbeats as snapshots)."""
    from ..store.schema import KINDS

    base = f"runs/{PROJECT_PREFIX}{info.project}/{RUN_PREFIX}{info.run_id}"
    run_json = info.paths.run_file.read_bytes()  # one consistent snapshot, taken first
    rows = {}
    versions: set[int] = set()
    for kind in KINDS:
        n = 0
        for p in info.paths.parts(kind):
            r, v = _part_stats(p)
            n += r
            if v is not None:
                versions.add(v)
        rows[kind] = n
    members = []
    for p in _run_files(info.paths):
        rel = p.relative_to(info.paths.dir).as_posix()
        if rel == RUN_FILE:
            continue
        live = rel.startswith(f"{WRITERS_DIR}/")  # heartbeats are rewritten while a run lives
        members.append((_Member.snapshot if live else _Member.of_file)(f"{base}/{rel}", p))
    members.append(_Member.of_bytes(f"{base}/{RUN_FILE}", run_json, info.paths.run_file.stat().st_mtime))
    meta = json.loads(run_json)
    entry = {"project": info.project, "run_id": info.run_id, "name": info.name, "status": info.status,
             "created_at": meta.get("created_at"), "updated_at": meta.get("updated_at"), "rows": rows,
             "schema_versions": sorted(versions), "files": len(members)}
    return entry, members


def _check_output_folder(out: str | os.PathLike) -> None:
    """The bundle's folder must exist. It is not created: on removable media a missing folder
    usually means the drive is not mounted, and creating it would fill the local disk instead."""
    folder = Path(out).parent
    if not folder.is_dir():
        raise UsageError(f"{folder} does not exist (is the drive mounted?): create it, or write the bundle elsewhere")


def _write_bundle(out: str | os.PathLike, compress: str | None, split_bytes: int | None, manifest: dict,
                  members: list[_Member]) -> list[Path]:
    """Write a bundle; on any failure remove what was written of it."""
    b = _Bundle(Path(out), compress, split_bytes)
    try:
        return b.write(manifest, members)
    except BaseException:
        for p in b.sink.paths:
            p.unlink(missing_ok=True)
        raise


def export_runs(root: str | Path | None, runs: Iterable[RunInfo], out: str | os.PathLike, *,
                compress: str | None = None, split_bytes: int | None = None,
                on_stage: Callable[[str], None] | None = None) -> ExportResult:
    """Write the given runs to a bundle at ``out`` (see the module docstring). ``on_stage`` is
    told what begins: each run read, then the writing of the bundle (progress)."""
    from ..store import locks

    root = resolve_root(root)
    runs = list(runs)
    if not runs:
        raise UsageError("no runs to export: none matched (name runs, or use --project / --since / --all)")
    _check_output_folder(out)
    with locks.reading(root, job="export"):  # writes nothing into the store (works on a read-only one)
        entries, members = [], []
        for info in runs:
            if on_stage is not None:
                on_stage(f"reading {info.project}/{info.run_id}")
            entry, files = _run_members(info)
            entries.append(entry)
            members.extend(files)
        manifest = _manifest_base("runs", compress)
        manifest["runs"] = entries
        if on_stage is not None:
            on_stage(f"writing {len(members)} files to {out}")
        paths = _write_bundle(out, compress, split_bytes, manifest, members)
    return ExportResult(paths, len(entries), len(manifest["files"]), sum(p.stat().st_size for p in paths), manifest)


def export_receipt(root: str | Path | None, out: str | os.PathLike, *, runs: Iterable[tuple[str, str]] | None = None,
                   project: str | None = None, compress: str | None = None) -> ExportResult:
    """Write the sync cursors of ``runs`` (``(project, run_id)`` pairs; default all) to a receipt."""
    from ..store.ledger import cursor_path, iter_cursors, sync_root

    root = resolve_root(root)
    _check_output_folder(out)
    wanted = set(runs) if runs is not None else None
    entries, members = [], []
    seen_dest: set[str] = set()
    for c in iter_cursors(root, project=project):
        if wanted is not None and (c.project, c.run_id) not in wanted:
            continue
        path = cursor_path(root, c.target, c.destination, c.project, c.run_id)
        rel = path.relative_to(sync_root(root)).as_posix()
        dest_dir = rel.split("/", 1)[0]
        desc = sync_root(root) / dest_dir / DESTINATION_FILE
        if dest_dir not in seen_dest and desc.is_file():
            members.append(_Member.snapshot(f"sync/{dest_dir}/destination.json", desc))
            seen_dest.add(dest_dir)
        members.append(_Member.snapshot(f"sync/{rel}", path))
        entries.append({"target": c.target, "destination": c.destination, "project": c.project,
                        "run_id": c.run_id, "synced_status": c.synced_status, "last_sync_at": c.last_sync_at})
    manifest = _manifest_base("receipt", compress)
    manifest["cursors"] = entries
    paths = _write_bundle(out, compress, None, manifest, members)
    return ExportResult(paths, len({(e["project"], e["run_id"]) for e in entries}), len(manifest["files"]),
                        sum(p.stat().st_size for p in paths), manifest)


# ---------------------------------------------------------------------------- import: verify
def _check_member(m: tarfile.TarInfo) -> str:
    """The member's path relative to ``trackstore-bundle/``, or BundleError if it is unsafe."""
    name = m.name
    if not (m.isreg() or m.isdir()):
        what = ("a symlink" if m.issym() else "a hard link" if m.islnk() else
                "a device file" if (m.ischr() or m.isblk()) else "a FIFO" if m.isfifo() else "not a regular file")
        raise BundleError(f"refusing bundle: member {name!r} is {what}; nothing was imported")
    if name.startswith("/") or "\\" in name or any(ord(ch) < 32 for ch in name):
        raise BundleError(f"refusing bundle: member {name!r} has an absolute or unsafe path; nothing was imported")
    parts = PurePosixPath(name).parts
    if any(p in ("..", ".") for p in parts) or ".." in name.split("/"):
        raise BundleError(f"refusing bundle: member {name!r} contains '..'; nothing was imported")
    if not parts or parts[0] != TOP:
        raise BundleError(f"refusing bundle: member {name!r} is outside {TOP}/; nothing was imported")
    rel = "/".join(parts[1:])
    if m.isdir() or not rel:
        return rel
    head = parts[1] if len(parts) > 1 else ""
    try:
        if head == "runs":
            if len(parts) < 5 or not parts[2].startswith(PROJECT_PREFIX) or not parts[3].startswith(RUN_PREFIX):
                raise BundleError(f"refusing bundle: member {name!r} is not inside a run folder")
            validate_project(parts[2][len(PROJECT_PREFIX):])
            validate_run_id(parts[3][len(RUN_PREFIX):])
        elif head == "sync":
            if len(parts) == 4 and parts[3] == DESTINATION_FILE:
                pass
            elif (len(parts) == 5 and parts[3].startswith(PROJECT_PREFIX) and parts[4].startswith(RUN_PREFIX)
                  and parts[4].endswith(".json")):
                validate_project(parts[3][len(PROJECT_PREFIX):])
                validate_run_id(parts[4][len(RUN_PREFIX):-len(".json")])
            else:
                raise BundleError(f"refusing bundle: unexpected sync member {name!r}")
            if parts[2].startswith((".", "_")):
                raise BundleError(f"refusing bundle: unexpected sync member {name!r}")
        elif rel != MANIFEST:
            raise BundleError(f"refusing bundle: unexpected member {name!r}")
    except InvalidNameError as exc:
        raise BundleError(f"refusing bundle: member {name!r}: {exc}") from exc
    return rel


@dataclass
class Staged:
    """A verified bundle extracted into a staging folder."""

    dir: Path
    manifest: dict
    files: dict[str, tuple[int, str]]


def _read_manifest(tf: tarfile.TarFile, first: tarfile.TarInfo | None, bundle) -> dict:
    """The manifest, which must be the bundle's first member (so every other is checked against it)."""
    if first is None or _check_member(first) != MANIFEST:
        raise BundleError(f"{bundle} does not start with {TOP}/{MANIFEST}: it is damaged, not a trackstore "
                          f"bundle, or from trackstore 0.1.0's first format (manifest last): export it again; "
                          "nothing was imported")
    if first.size > MAX_MANIFEST:
        raise BundleError(f"refusing bundle {bundle}: its manifest claims {first.size} bytes, more than any "
                          f"trackstore writes ({MAX_MANIFEST}); nothing was imported")
    f = tf.extractfile(first)
    if f is None:  # a directory or link under the manifest's name
        raise BundleError(f"{bundle}: its {TOP}/{MANIFEST} is not a file; nothing was imported")
    try:
        manifest = json.loads(f.read())
    except ValueError as exc:
        raise BundleError(f"bundle manifest is not valid JSON: {exc}; nothing was imported") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(f"{bundle} is not a trackstore bundle")
    version = manifest.get("version")
    if type(version) is not int or version < 2:  # 2: the first format whose manifest comes first
        raise BundleError(f"refusing bundle {bundle}: its manifest has no valid format version "
                          f"({version!r}); nothing was imported")
    if version > BUNDLE_VERSION:
        raise BundleError(f"bundle format version {version} is newer than this trackstore "
                          f"reads ({BUNDLE_VERSION}); upgrade trackstore")
    return manifest


def _listed_files(manifest: dict, bundle) -> dict[str, tuple[int, str]]:
    """``{path: (size, sha256)}`` of every file the manifest lists (a malformed list is refused)."""
    listed: dict[str, tuple[int, str]] = {}
    try:
        for f in manifest.get("files") or []:
            path, size, sha = f["path"], f["size"], f["sha256"]
            if not (isinstance(path, str) and type(size) is int and size >= 0 and isinstance(sha, str)
                    and len(sha) == 64) or path in listed or path == MANIFEST:
                raise ValueError(f"bad entry {f!r}")
            listed[path] = (size, sha)
    except (KeyError, TypeError, ValueError) as exc:
        raise BundleError(f"refusing bundle {bundle}: its manifest's file list is malformed ({exc}); "
                          "nothing was imported") from None
    return listed


def _check_space(root: Path, need: int) -> None:
    """Refuse up front when the files the manifest lists cannot fit on the store's disk."""
    from ..store.units import format_bytes

    free = shutil.disk_usage(root).free
    if need > free:
        raise WriteError(f"not enough space to import into {root}: the bundle holds {format_bytes(need)}, "
                         f"{format_bytes(free)} are free; nothing was imported (free some space and import "
                         "again, or export fewer runs per bundle)")


def _write_failed(exc: OSError, dest: Path) -> WriteError:
    """The error for a failed write of ``dest`` while staging: disk full, or another write problem."""
    if exc.errno in _NO_SPACE:
        return WriteError(f"the disk is full (or a quota or file-size limit was hit) while importing: "
                          f"{exc.strerror} writing {dest}; nothing was imported (the bundle was fine as far as "
                          "it was read): free some space and import again")
    return WriteError(f"cannot write {dest} while importing: {exc.strerror or exc}; nothing was imported")


def _copy_member(src: IO[bytes], dest: Path, name: str, size: int, sha: str, bundle) -> None:
    """Stream one member to ``dest``, never past its listed size, checking its sha256 at its end."""
    h = hashlib.sha256()
    n = 0
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        out = open(dest, "xb")
    except OSError as exc:
        raise _write_failed(exc, dest) from None
    with out:
        while chunk := src.read(min(CHUNK, size - n + 1)):  # one byte more than listed shows an excess
            n += len(chunk)
            if n > size:
                raise BundleError(f"refusing bundle: member {name!r} is larger than the {size} bytes its "
                                  "manifest lists; nothing was imported")
            h.update(chunk)
            try:
                out.write(chunk)
            except OSError as exc:
                raise _write_failed(exc, dest) from None
        try:
            out.flush()
            os.fsync(out.fileno())
        except OSError as exc:
            raise _write_failed(exc, dest) from None
    if n != size or h.hexdigest() != sha:
        raise BundleError(f"bundle {bundle} is damaged or was tampered with: {name} does not match the size and "
                          "checksum (sha256) its manifest lists; nothing was imported")


def _extract_listed(tf: tarfile.TarFile, members: Iterator[tarfile.TarInfo], staging: Path,
                    listed: dict[str, tuple[int, str]], bundle) -> set[str]:
    """Extract every member after the manifest, each refused at its header unless listed with its size."""
    got: set[str] = set()
    for m in members:
        rel = _check_member(m)
        if m.isdir() or not rel:
            continue
        if rel == MANIFEST or rel in got:
            raise BundleError(f"refusing bundle: member {m.name!r} appears twice; nothing was imported")
        if rel not in listed:
            raise BundleError(f"refusing bundle: member {m.name!r} is not listed in its manifest; nothing was imported")
        size, sha = listed[rel]
        if m.size != size:
            raise BundleError(f"refusing bundle: member {m.name!r} holds {m.size} bytes but its manifest lists "
                              f"{size}; nothing was imported")
        dest = staging / rel
        if not dest.resolve().is_relative_to(staging.resolve()):
            raise BundleError(f"refusing bundle: member {m.name!r} escapes the staging folder")
        f = tf.extractfile(m)
        if f is None:  # not reached: _check_member lets only files and folders through
            raise BundleError(f"refusing bundle: member {m.name!r} is not a regular file; nothing was imported")
        _copy_member(f, dest, m.name, size, sha, bundle)
        try:
            os.utime(dest, (m.mtime, m.mtime))
        except OSError as exc:
            raise _write_failed(exc, dest) from None
        got.add(rel)
    return got


def _extract_verified(root: Path, bundle: str | os.PathLike) -> Staged:
    """Stream the bundle into ``<root>/_import/<token>``, every member checked against the manifest
    (its first member) before and while it is written; on any error remove it all.

    Refused before a byte is written: a bundle whose files do not fit on the disk, and every
    member that is unsafe, not listed, or of another size than listed. A member whose bytes do
    not match its sha256 stops the import at that member.
    """
    stream, _ = _open_read(bundle)
    staging = root / IMPORT_DIR / f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{secrets.token_hex(4)}"
    done = False
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tf:
            members = iter(tf)
            manifest = _read_manifest(tf, next(members, None), bundle)
            listed = _listed_files(manifest, bundle)
            _check_space(root, sum(size for size, _sha in listed.values()))
            try:
                staging.mkdir(parents=True)
            except OSError as exc:
                raise _write_failed(exc, staging) from None
            got = _extract_listed(tf, members, staging, listed, bundle)
        missing = sorted(set(listed) - got)
        if missing:
            raise BundleError(f"bundle {bundle} is truncated or damaged: {len(missing)} files its manifest lists "
                              f"are missing ({', '.join(missing[:3])}); nothing was imported")
        done = True
        return Staged(staging, manifest, listed)
    except (tarfile.TarError, EOFError, OSError, ValueError, zlib.error) as exc:  # reading the bundle
        raise BundleError(f"bundle {bundle} is damaged or truncated: {exc}; nothing was imported") from exc
    finally:
        stream.close()
        if not done:
            shutil.rmtree(staging, ignore_errors=True)
            _remove_empty(root / IMPORT_DIR)


def _remove_empty(d: Path) -> None:
    try:
        d.rmdir()
    except OSError:
        pass


# ---------------------------------------------------------------------------- import: merge
@dataclass
class RunImport:
    project: str
    run_id: str
    action: str = "unchanged"  # added | updated | unchanged
    files_added: int = 0
    files_replaced: int = 0
    rows_added: dict[str, int] = field(default_factory=dict)


@dataclass
class ImportResult:
    kind: str
    runs: list[RunImport] = field(default_factory=list)
    cursors_merged: int = 0
    cursors_skipped: list[str] = field(default_factory=list)
    source_host: str | None = None


def _coverage(path: Path, kind: str) -> RangeSet:
    from ..store.parts import read_part

    rs = RangeSet()
    rs.add_table(read_part(path, kind, columns=["writer", "seq"]))
    return rs


@dataclass
class RepeatedIds:
    """Row ids ``(writer, seq)`` that more than one row of one kind of a run holds."""

    kind: str
    count: int                                  # ids held by two rows or more
    examples: list[tuple[str, int, list[str]]]  # (writer, seq, files holding it) for the first few

    def describe(self) -> str:
        shown = "; ".join(f"writer {w} seq {s} in {', '.join(files)}" for w, s, files in self.examples)
        return f"{self.count} {self.kind} row ids (writer, seq) are held by more than one row, e.g. {shown}"


def repeated_row_ids(parts: Sequence[Path], kind: str, *, examples: int = 3) -> RepeatedIds | None:
    """The ``(writer, seq)`` ids held by more than one row of ``parts`` (a run's files of ``kind``).

    Every row keeps its id for ever (compaction and import included), so a repeat is damage or a
    crafted run, and queries and sync would count those rows twice: import refuses such a run
    and ``doctor --deep`` reports it. Reads only the two id columns (a part they cannot be read
    from is left out: no query reads it either, and doctor reports it as damaged). Per writer,
    ids in increasing order across its files (a live run's parts) are seen in one pass; others
    (a compacted part is ordered by key) are counted in one pass over their dense seq range.
    """
    by_writer: dict[str, list[tuple[Any, int]]] = {}
    for i, path in enumerate(parts):
        for writer, seqs in _ids_by_writer(path):
            by_writer.setdefault(writer, []).append((seqs, i))
    count = 0
    found: list[tuple[str, int, list[str]]] = []
    for writer, chunks in by_writer.items():
        repeated = _repeated([seqs for seqs, _i in chunks])
        count += len(repeated)
        for seq in repeated[: max(0, examples - len(found))].tolist():
            files = sorted({parts[i].name for seqs, i in chunks if (seqs == seq).any()})
            found.append((writer, seq, files))
    return RepeatedIds(kind, count, found) if count else None


def _ids_by_writer(path: Path) -> list[tuple[str, Any]]:
    """``[(writer, seqs as a numpy array), ...]`` of one part file (none if it cannot be read)."""
    import numpy as np
    import pyarrow.parquet as pq

    try:  # writer ids as stored: dictionary-encoded, no hashing of strings
        table = pq.ParquetFile(path, read_dictionary=["writer"]).read(columns=["writer", "seq"])
    except Exception:  # unreadable, or gone (a compaction swapped the folder): no query reads it
        return []
    writers = table.column("writer").unify_dictionaries().combine_chunks()
    seqs = np.asarray(table.column("seq").to_numpy(), dtype=np.int64)
    names = writers.dictionary.to_pylist()
    if len(names) == 1:
        return [(names[0], seqs)]
    codes = writers.indices.to_numpy(zero_copy_only=False)
    return [(w, seqs[codes == c]) for c, w in enumerate(names)]


def _repeated(chunks: list[Any]) -> Any:
    """The values occurring more than once in the numpy arrays ``chunks`` (sorted)."""
    import numpy as np

    chunks = sorted((c for c in chunks if len(c)), key=lambda c: c[0])
    if all(len(c) < 2 or bool(np.all(c[1:] > c[:-1])) for c in chunks) and all(
            a[-1] < b[0] for a, b in zip(chunks, chunks[1:])):
        return np.empty(0, np.int64)  # increasing across the files: no repeats
    seqs = np.concatenate(chunks)
    lo = int(seqs.min())
    if int(seqs.max()) - lo <= 4 * len(seqs) + (1 << 20):  # seqs are dense from 0: count each
        return np.flatnonzero(np.bincount(seqs - lo) > 1) + lo
    ordered = np.sort(seqs)
    return np.unique(ordered[1:][ordered[1:] == ordered[:-1]])


def _refuse_foreign_or_broken_run(staged: RunPaths) -> None:
    """Refuse a bundled run whose run.json names another run, or one of whose part files is not
    a readable Parquet part of its kind: importing either would plant a run that readers
    attribute to the wrong run, or that every query over the store fails on."""
    from ..store.parts import check_part, find_unreadable, schema_problem
    from ..store.schema import KINDS

    where = f"run {staged.project}/{staged.run_id}"
    try:
        meta = read_json(staged.run_file)
    except (OSError, ValueError) as exc:
        raise BundleError(f"refusing bundle: {where}: its run.json is not valid JSON ({exc}); "
                          "nothing was imported") from None
    if not isinstance(meta, dict):
        raise BundleError(f"refusing bundle: {where}: its run.json is not a JSON object; nothing was imported")
    named = (meta.get("project"), meta.get("run_id"))
    if named != (staged.project, staged.run_id):
        raise BundleError(f"refusing bundle: {where}: its run.json names another run "
                          f"(project {named[0]!r}, run id {named[1]!r}); nothing was imported")
    import pyarrow.parquet as pq

    for kind in KINDS:
        kind_dir = staged.kind_dir(kind)
        if not kind_dir.is_dir():
            continue
        for part in sorted(kind_dir.glob("*.parquet")):
            path = str(part)
            problem = check_part(path) or find_unreadable([path]).get(path)
            if problem is None:
                try:
                    problem = schema_problem(pq.read_schema(path), kind)
                except Exception as exc:
                    problem = f"unreadable schema ({exc})"
            if problem is not None:
                rel = part.relative_to(staged.root.parent).as_posix()  # as the manifest lists it
                raise BundleError(f"refusing bundle: {where}: {rel} is not a valid {kind} part "
                                  f"({' '.join(problem.split())}); nothing was imported")


def _refuse_repeated_ids(staged: RunPaths) -> None:
    """Refuse a bundled run whose files hold one row id twice (see :func:`repeated_row_ids`)."""
    from ..store.schema import KINDS

    for kind in KINDS:
        rep = repeated_row_ids(staged.parts(kind), kind)
        if rep:
            raise BundleError(f"refusing bundle: run {staged.project}/{staged.run_id} repeats row ids: "
                              f"{rep.describe()}; nothing was imported")


def _relation(a: RangeSet, covered: RangeSet) -> str:
    """``subset``, ``disjoint`` or ``overlap`` of ``a`` against ``covered``."""
    cov = covered.to_json()
    inside = outside = False
    for w, ranges in a.to_json().items():
        theirs = cov.get(w, [])
        for lo, hi in ranges:
            if any(clo <= lo and hi <= chi for clo, chi in theirs):
                inside = True
            elif any(not (hi < clo or lo > chi) for clo, chi in theirs):
                return "overlap"
            else:
                outside = True
    if inside and outside:
        return "overlap"
    return "subset" if inside else "disjoint"


@dataclass
class _KindPlan:
    kind: str
    add: list[Path] = field(default_factory=list)     # staged files to move in
    remove: list[str] = field(default_factory=list)   # local names superseded by added files
    rows: int = 0


def _plan_kind(local: RunPaths, staged_dir: Path, kind: str, files: dict[str, tuple[int, str]], base: str) -> _KindPlan:
    kp = _KindPlan(kind)
    rel_kind = local.kind_dir(kind).relative_to(local.dir)
    incoming_dir = staged_dir / rel_kind
    incoming = sorted(p for p in incoming_dir.glob("*.parquet")) if incoming_dir.is_dir() else []
    if not incoming:
        return kp
    local_parts = {p.name: p for p in local.parts(kind)}
    candidates = []  # (coverage, is_local, name, path)
    for p in incoming:
        if p.name in local_parts:
            if sha256_file(local_parts[p.name])[1] != files[f"{base}/{rel_kind.as_posix()}/{p.name}"][1]:
                raise BundleError(f"{local.project}/{local.run_id}: {rel_kind}/{p.name} exists with different "
                                  "content; refusing to overwrite (nothing was imported)")
            continue
        candidates.append((_coverage(p, kind), False, p.name, p))
    if not candidates:
        return kp
    for name, p in local_parts.items():
        try:
            candidates.append((_coverage(p, kind), True, name, p))
        except Exception:
            continue  # an unreadable local part stays as it is; doctor reports it
    candidates.sort(key=lambda c: (-len(c[0]), not c[1], c[2]))
    covered = RangeSet()
    chosen_local = set()
    for cov, is_local, name, p in candidates:
        rel = _relation(cov, covered)
        if rel == "subset":
            continue
        if rel == "overlap":
            raise BundleError(f"{local.project}/{local.run_id}: {rel_kind}/{name} partly overlaps rows already "
                              "present; refusing to merge (nothing was imported)")
        covered.update(cov)
        if is_local:
            chosen_local.add(name)
        else:
            kp.add.append(p)
            kp.rows += len(cov)
    kp.remove = sorted(set(n for _c, is_l, n, _p in candidates if is_l) - chosen_local)
    return kp


def _newer(a: dict | None, b: dict | None, key: str) -> bool:
    """Is ``a`` newer than ``b`` by the ISO timestamp ``key``?"""
    ta = parse_iso((a or {}).get(key))
    tb = parse_iso((b or {}).get(key))
    return ta is not None and (tb is None or ta > tb)


def _merge_run(root: Path, staged_run: Path, local: RunPaths, files: dict, base: str, apply: bool) -> RunImport:
    """Plan (``apply=False``: only raise on conflicts) or apply the merge of one staged run."""
    from ..store.merge import replace_kind_dir
    from ..store.schema import KINDS

    ri = RunImport(local.project, local.run_id)
    try:
        incoming_meta = read_json(staged_run / RUN_FILE)
    except (OSError, ValueError) as exc:
        raise BundleError(f"{local.project}/{local.run_id}: run.json in the bundle is unreadable: {exc}") from exc
    local_meta = _meta.read_run_json(local)
    if local_meta is None:
        raise BundleError(f"{local.project}/{local.run_id} exists here with an unreadable run.json; run "
                          "`trackstore doctor --fix` first")
    if (incoming_meta.get("created_at") and local_meta.get("created_at")
            and incoming_meta["created_at"] != local_meta["created_at"]):
        raise BundleError(f"{local.project}/{local.run_id} exists here but is a different run (created "
                          f"{local_meta['created_at']} here, {incoming_meta['created_at']} in the bundle); "
                          "refusing to overwrite it")
    kind_dirs = {local.kind_dir(k).relative_to(local.dir).as_posix() for k in KINDS}
    plans = [_plan_kind(local, staged_run, k, files, base) for k in KINDS]
    other = []  # (rel, staged path, action)
    for p in sorted(staged_run.rglob("*")):
        if not p.is_file():
            continue
        rel = p.relative_to(staged_run).as_posix()
        if rel == RUN_FILE or rel.rsplit("/", 1)[0] in kind_dirs:
            continue
        target = local.dir / rel
        if not target.exists():
            other.append((rel, p, "add"))
        elif sha256_file(target)[1] != files[f"{base}/{rel}"][1]:
            if rel.startswith(f"{WRITERS_DIR}/"):
                try:
                    if _newer(read_json(p), read_json(target), "heartbeat_at"):
                        other.append((rel, p, "replace"))
                except (OSError, ValueError):
                    other.append((rel, p, "replace"))
            else:
                raise BundleError(f"{local.project}/{local.run_id}: {rel} exists with different content; "
                                  "refusing to overwrite (nothing was imported)")
    newer_meta = _newer(incoming_meta, local_meta, "updated_at")
    if not apply:
        return ri
    for kp in plans:
        kind_dir = local.kind_dir(kp.kind)
        if not kp.add:
            continue
        if kp.remove:
            def build(staging: Path, kp=kp, kind_dir=kind_dir) -> list[str]:
                for f in kind_dir.iterdir():
                    if is_part_name(f.name) and f.name not in kp.remove:
                        os.link(f, staging / f.name)
                for f in kp.add:
                    os.rename(f, staging / f.name)
                return kp.remove
            replace_kind_dir(kind_dir, build)
            ri.files_replaced += len(kp.remove)
        else:
            kind_dir.mkdir(parents=True, exist_ok=True)
            for f in kp.add:
                os.rename(f, kind_dir / f.name)
        ri.files_added += len(kp.add)
        ri.rows_added[kp.kind] = kp.rows
    for rel, p, _action in other:
        target = local.dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(p, target)
        ri.files_added += 1
    if newer_meta:
        write_bytes_atomic(local.run_file, (staged_run / RUN_FILE).read_bytes())
    if ri.files_added or newer_meta:
        ri.action = "updated"
    return ri


def _import_runs(root: Path, st: Staged) -> ImportResult:
    from .gc import restore_cursors

    res = ImportResult("runs", source_host=st.manifest.get("source_host"))
    entries = _run_entries(st.manifest.get("runs"))
    named = {f"{PROJECT_PREFIX}{e['project']}/{RUN_PREFIX}{e['run_id']}" for e in entries}
    carried = {f"{p.parent.name}/{p.name}" for p in (st.dir / "runs").glob(f"{PROJECT_PREFIX}*/{RUN_PREFIX}*")}
    if carried - named:
        raise BundleError(f"refusing bundle: it carries files of runs its manifest does not list "
                          f"({', '.join(sorted(carried - named)[:3])}); nothing was imported")
    todo = []
    for e in entries:
        project, run_id = e["project"], e["run_id"]
        base = f"runs/{PROJECT_PREFIX}{project}/{RUN_PREFIX}{run_id}"
        staged_run = st.dir / base
        if not (staged_run / RUN_FILE).is_file():
            raise BundleError(f"bundle lists run {project}/{run_id} but carries no run.json for it")
        staged_paths = RunPaths(st.dir / "runs", project, run_id)
        _refuse_foreign_or_broken_run(staged_paths)
        _refuse_repeated_ids(staged_paths)
        local = RunPaths(root, project, run_id)
        if local.dir.exists():
            _merge_run(root, staged_run, local, st.files, base, apply=False)  # conflicts first
        todo.append((local, staged_run, base))
    rows_of = {(e["project"], e["run_id"]): {k: n for k, n in (e.get("rows") or {}).items() if n} for e in entries}
    for local, staged_run, base in todo:
        if not local.dir.exists():
            local.dir.parent.mkdir(parents=True, exist_ok=True)
            os.rename(staged_run, local.dir)  # the whole run appears at once
            restore_cursors(root, local.project, local.run_id)
            res.runs.append(RunImport(local.project, local.run_id, "added",
                                      files_added=sum(1 for p in local.dir.rglob("*") if p.is_file()),
                                      rows_added=rows_of.get((local.project, local.run_id), {})))
        else:
            res.runs.append(_merge_run(root, staged_run, local, st.files, base, apply=True))
    return res


def _run_entries(entries: Any) -> list[dict]:
    """The manifest's ``runs`` list, each entry checked (a malformed one refuses the bundle)."""
    if not isinstance(entries, list):
        raise BundleError(f"refusing bundle: its manifest's runs are not a list ({type(entries).__name__}); "
                          "nothing was imported")
    for e in entries:
        if not (isinstance(e, dict) and isinstance(e.get("project"), str) and isinstance(e.get("run_id"), str)
                and isinstance(e.get("rows", {}), dict)):
            raise BundleError(f"refusing bundle: malformed run entry in its manifest: {str(e)[:80]}; "
                              "nothing was imported")
        try:
            for kind, n in (e.get("rows") or {}).items():
                check_count(n, f"rows.{kind}")
        except ValueError as exc:
            raise BundleError(f"refusing bundle: run entry {e['project']}/{e['run_id']} of its manifest: {exc}; "
                              "nothing was imported") from exc
        try:
            validate_project(e["project"])
            validate_run_id(e["run_id"])
        except InvalidNameError as exc:
            raise BundleError(f"refusing bundle: run entry {e['project']!r}/{e['run_id']!r}: {exc}; "
                              "nothing was imported") from exc
    return entries


def _import_receipt(root: Path, st: Staged) -> ImportResult:
    from ..store.cursor import Cursor
    from ..store.ledger import load_cursor, save_cursor

    res = ImportResult("receipt", source_host=st.manifest.get("source_host"))
    cursors = []  # every cursor is read before any is merged: a bad one refuses the whole receipt
    for path in sorted((st.dir / "sync").glob(f"*/{PROJECT_PREFIX}*/{RUN_PREFIX}*.json")):
        rel = path.relative_to(st.dir).as_posix()
        try:  # the reading every reader does (cursor.check_cursor): types, and numbers in the format's ranges
            incoming = Cursor.from_json(read_json(path))
            validate_project(incoming.project)
            validate_run_id(incoming.run_id)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BundleError(f"refusing receipt: its cursor {rel} is unreadable: {_reason(exc)}; "
                              "nothing was imported") from exc
        cursors.append(incoming)
    changed = []
    for incoming in cursors:
        if not RunPaths(root, incoming.project, incoming.run_id).dir.exists():
            res.cursors_skipped.append(f"{incoming.project}/{incoming.run_id} ({incoming.target}): run not in this store")
            continue
        local = load_cursor(root, incoming.target, incoming.destination, incoming.project, incoming.run_id)
        try:
            merged = merge_cursors(local, incoming)
            Cursor.from_json(merged.to_json())  # the union is read back as every reader will read it
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BundleError(f"refusing receipt: its cursor of {incoming.project}/{incoming.run_id} "
                              f"({incoming.target}) cannot be merged: {_reason(exc)}; nothing was imported") from exc
        if merged.to_json() != local.to_json():
            changed.append(merged)
    for merged in changed:
        save_cursor(root, merged)
        res.cursors_merged += 1
    return res


def _reason(exc: BaseException) -> str:
    """An exception as a reason in a message: its text (a KeyError's names the missing field)."""
    if isinstance(exc, KeyError):
        return f"missing field {exc}"
    return str(exc) or type(exc).__name__


def merge_cursors(local, incoming):
    """``local`` and ``incoming`` as one cursor (:meth:`~trackstore.store.cursor.Cursor.merge`),
    the more recent sync deciding the status, errors and batch in doubt."""
    return local.merge(incoming, other_is_newer=_newer({"t": incoming.last_sync_at}, {"t": local.last_sync_at}, "t"))


def import_bundle(root: str | Path | None, bundle: str | os.PathLike, *, expect: str | None = None,
                  on_stage: Callable[[str], None] | None = None) -> ImportResult:
    """Verify and import a bundle or receipt (``expect``: ``"runs"`` or ``"receipt"`` to insist).
    ``on_stage`` is told what begins: verifying, then merging (progress)."""
    from ..store import locks

    root = resolve_root(root)
    root.mkdir(parents=True, exist_ok=True)
    with locks.acquire_maintenance(root, job="import"):
        if on_stage is not None:
            on_stage(f"verifying {bundle}")
        st = _extract_verified(root, bundle)
        if on_stage is not None:
            on_stage(f"merging {len(st.manifest.get('runs') or [])} runs")
        try:
            kind = st.manifest.get("kind")
            if expect is not None and kind != expect:
                raise BundleError(f"{bundle} is a {kind!r} bundle, not a {expect!r} one"
                                  + (" (drop --receipt)" if expect == "receipt" else " (add --receipt)"))
            if kind == "runs":
                return _import_runs(root, st)
            if kind == "receipt":
                return _import_receipt(root, st)
            raise BundleError(f"unknown bundle kind {kind!r}")
        finally:
            shutil.rmtree(st.dir, ignore_errors=True)
            _remove_empty(root / IMPORT_DIR)
