"""Bundles: carrying runs across an air gap (export/import), and sync receipts back.

A bundle is a POSIX tar stream (optionally zstd- or gzip-compressed, optionally split into
``<out>.000``, ``<out>.001``, ... volumes) whose members all live under ``trackstore-bundle/``:

::

    trackstore-bundle/runs/project=<p>/run=<id>/...          run folders (temp files left out)
    trackstore-bundle/sync/<dest_id>/...                      receipts: sync cursors
    trackstore-bundle/manifest.json                           last member

The manifest lists every file's path, size and sha256, each run's row counts per kind and
schema versions, the source host and the trackstore version.

What import promises:

* **Nothing becomes visible before everything is verified.** The stream is extracted into a
  staging folder inside the store (``<root>/_import/<token>/``, outside every query glob), every
  file is checked against the manifest (no file missing, none extra, sizes and sha256 equal),
  and only then are runs moved into place — a new run with one ``rename(2)``. Any failure
  removes the staging folder: the store is unchanged.
* **Hostile archives are refused** before a byte of theirs is written: absolute paths, ``..``,
  paths outside ``trackstore-bundle/``, invalid project/run names, symlinks, hard links,
  devices and FIFOs, duplicate members.
* **An existing run is never overwritten with different content.** Part files are immutable
  and named by writer and first seq, so runs merge by row identity: an incoming part whose
  ``(writer, seq)`` rows are already present (even in a compacted file) is skipped, a part with
  new rows is added, a compacted incoming file replaces the small local parts it covers (with
  the atomic folder swap of :mod:`trackstore.compact`). A file with the same name and other
  bytes, a partial overlap of rows, or a run.json describing a different run (another
  ``created_at``) is a :class:`~trackstore.errors.BundleError` and nothing is changed.
  ``run.json`` and writer heartbeats: the newer one wins.
* **Idempotent.** Importing the same bundle twice changes nothing the second time; importing
  a newer bundle of a still-growing run adds only its new part files.

Receipts (``kind: "receipt"``) carry ``_sync`` cursors from the connected side back to the
air-gapped one; importing one merges them (union of acknowledged rows), so gc there knows what
was uploaded.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import shutil
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Iterable, Iterator

from .files import sha256_file
from . import meta as _meta
from .atomic import is_temp_file, read_json, write_bytes_atomic
from .catalog import RunInfo
from .errors import BundleError, InvalidNameError, UsageError
from .layout import PROJECT_PREFIX, RUN_FILE, RUN_PREFIX, WRITERS_DIR, RunPaths, resolve_root
from .names import validate_project, validate_run_id
from .ranges import RangeSet

TOP = "trackstore-bundle"
MANIFEST = "manifest.json"
FORMAT = "trackstore-bundle"
BUNDLE_VERSION = 1
IMPORT_DIR = "_import"
CHUNK = 1 << 20
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_GZIP_MAGIC = b"\x1f\x8b"


# ---------------------------------------------------------------------------- byte streams
class _SplitWriter(io.RawIOBase):
    """Writes one file, or consecutive volumes of at most ``limit`` bytes (``out.000``, ...)."""

    def __init__(self, out: Path, limit: int | None):
        self.out, self.limit = Path(out), limit
        self.paths: list[Path] = []
        self._f: IO[bytes] | None = None
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
        self._f: IO[bytes] | None = None

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
    vols = []
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


def _run_files(paths: RunPaths) -> Iterator[Path]:
    """Files of a run folder worth carrying: no temp files, no compaction leftovers."""
    from .compact import MARKER, STAGING_PREFIX

    for dirpath, dirs, files in os.walk(paths.dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith(STAGING_PREFIX))
        for f in sorted(files):
            p = Path(dirpath) / f
            if is_temp_file(p) or f == MARKER or p.is_symlink() or not p.is_file():
                continue
            yield p


def _part_stats(path: Path) -> tuple[int, int | None]:
    import pyarrow.parquet as pq

    from .schema import file_version

    try:
        pf = pq.ParquetFile(path)
        return pf.metadata.num_rows, file_version(pf.schema_arrow.metadata)
    except Exception:
        return 0, None


class _Bundle:
    """A tar stream being written; every member is hashed as it goes into the manifest."""

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
        self.files: list[dict] = []

    def add_bytes(self, name: str, data: bytes, mtime: float | None = None) -> None:
        self._add(name, io.BytesIO(data), len(data), mtime)

    def add_file(self, name: str, path: Path) -> None:
        st = path.stat()
        with open(path, "rb") as f:
            self._add(name, f, st.st_size, st.st_mtime)

    def _add(self, name: str, fobj, size: int, mtime: float | None) -> None:
        h = hashlib.sha256()

        class _Hashing:
            def read(self, n=-1):
                b = fobj.read(n)
                h.update(b)
                return b

        info = tarfile.TarInfo(f"{TOP}/{name}")
        info.size, info.mode, info.mtime = size, 0o644, int(mtime or time.time())
        self.tar.addfile(info, _Hashing())
        self.files.append({"path": name, "size": size, "sha256": h.hexdigest()})

    def close(self, manifest: dict) -> list[Path]:
        manifest["files"] = self.files
        data = json.dumps(manifest, indent=1, ensure_ascii=False).encode()
        info = tarfile.TarInfo(f"{TOP}/{MANIFEST}")
        info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
        self.tar.addfile(info, io.BytesIO(data))
        self.tar.close()
        self.stream.close()
        if not self.sink.closed:
            self.sink.close()
        return self.sink.paths


def _manifest_base(kind: str, compress: str | None) -> dict:
    from ._version import __version__
    from .schema import SCHEMA_VERSION

    return {"format": FORMAT, "version": BUNDLE_VERSION, "kind": kind, "created_at": _meta.iso(time.time()),
            "source_host": _meta.hostname(), "trackstore_version": __version__, "schema_version": SCHEMA_VERSION,
            "compression": compress}


def export_runs(root: str | Path | None, runs: Iterable[RunInfo], out: str | os.PathLike, *,
                compress: str | None = None, split_bytes: int | None = None) -> ExportResult:
    """Write the given runs to a bundle at ``out`` (see the module docstring)."""
    from . import locks
    from .schema import KINDS

    root = resolve_root(root)
    runs = list(runs)
    if not runs:
        raise UsageError("no runs to export: none matched (name runs, or use --project / --since / --all)")
    with locks.reading(root, job="export"):  # writes nothing into the store (works on a read-only one)
        b = _Bundle(Path(out), compress, split_bytes)
        entries = []
        try:
            for info in runs:
                base = f"runs/{PROJECT_PREFIX}{info.project}/{RUN_PREFIX}{info.run_id}"
                run_json = info.paths.run_file.read_bytes()  # one consistent snapshot
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
                n_files = 0
                for p in _run_files(info.paths):
                    rel = p.relative_to(info.paths.dir).as_posix()
                    if rel == RUN_FILE:
                        continue
                    b.add_file(f"{base}/{rel}", p)
                    n_files += 1
                b.add_bytes(f"{base}/{RUN_FILE}", run_json)
                meta = json.loads(run_json)
                entries.append({"project": info.project, "run_id": info.run_id, "name": info.name,
                                "status": info.status, "created_at": meta.get("created_at"),
                                "updated_at": meta.get("updated_at"), "rows": rows,
                                "schema_versions": sorted(versions), "files": n_files + 1})
            manifest = _manifest_base("runs", compress)
            manifest["runs"] = entries
            paths = b.close(manifest)
        except BaseException:
            for p in b.sink.paths:
                p.unlink(missing_ok=True)
            raise
    return ExportResult(paths, len(entries), len(manifest["files"]), sum(p.stat().st_size for p in paths), manifest)


def export_receipt(root: str | Path | None, out: str | os.PathLike, *, runs: Iterable[tuple[str, str]] | None = None,
                   project: str | None = None, compress: str | None = None) -> ExportResult:
    """Write the sync cursors of ``runs`` (``(project, run_id)`` pairs; default all) to a receipt."""
    from .syncstate import cursor_path, iter_cursors, sync_root

    root = resolve_root(root)
    wanted = set(runs) if runs is not None else None
    b = _Bundle(Path(out), compress, None)
    entries = []
    seen_dest: set[str] = set()
    try:
        for c in iter_cursors(root, project=project):
            if wanted is not None and (c.project, c.run_id) not in wanted:
                continue
            path = cursor_path(root, c.target, c.destination, c.project, c.run_id)
            rel = path.relative_to(sync_root(root)).as_posix()
            dest_dir = rel.split("/", 1)[0]
            desc = sync_root(root) / dest_dir / "destination.json"
            if dest_dir not in seen_dest and desc.is_file():
                b.add_file(f"sync/{dest_dir}/destination.json", desc)
                seen_dest.add(dest_dir)
            b.add_file(f"sync/{rel}", path)
            entries.append({"target": c.target, "destination": c.destination, "project": c.project,
                            "run_id": c.run_id, "synced_status": c.synced_status, "last_sync_at": c.last_sync_at})
        manifest = _manifest_base("receipt", compress)
        manifest["cursors"] = entries
        paths = b.close(manifest)
    except BaseException:
        for p in b.sink.paths:
            p.unlink(missing_ok=True)
        raise
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
            if len(parts) == 4 and parts[3] == "destination.json":
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


def _extract_verified(root: Path, bundle: str | os.PathLike) -> Staged:
    """Extract into ``<root>/_import/<token>`` and verify everything; on error remove it all."""
    staging = root / IMPORT_DIR / f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{secrets.token_hex(4)}"
    staging.mkdir(parents=True)
    try:
        stream, _ = _open_read(bundle)
        got: dict[str, tuple[int, str]] = {}
        manifest_bytes = None
        try:
            with tarfile.open(fileobj=stream, mode="r|") as tf:
                for m in tf:
                    rel = _check_member(m)
                    if m.isdir() or not rel:
                        continue
                    if rel in got or (rel == MANIFEST and manifest_bytes is not None):
                        raise BundleError(f"refusing bundle: member {m.name!r} appears twice")
                    src = tf.extractfile(m)
                    if rel == MANIFEST:
                        manifest_bytes = src.read()
                        continue
                    dest = staging / rel
                    if not dest.resolve().is_relative_to(staging.resolve()):
                        raise BundleError(f"refusing bundle: member {m.name!r} escapes the staging folder")
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    h = hashlib.sha256()
                    n = 0
                    with open(dest, "xb") as out:
                        while True:
                            chunk = src.read(CHUNK)
                            if not chunk:
                                break
                            h.update(chunk)
                            out.write(chunk)
                            n += len(chunk)
                        out.flush()
                        os.fsync(out.fileno())
                    os.utime(dest, (m.mtime, m.mtime))
                    got[rel] = (n, h.hexdigest())
        except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
            if isinstance(exc, BundleError):
                raise
            raise BundleError(f"bundle {bundle} is damaged or truncated: {exc}") from exc
        finally:
            stream.close()
        if manifest_bytes is None:
            raise BundleError(f"bundle {bundle} has no {TOP}/{MANIFEST} (truncated, or not a trackstore bundle)")
        try:
            manifest = json.loads(manifest_bytes)
        except ValueError as exc:
            raise BundleError(f"bundle manifest is not valid JSON: {exc}") from exc
        if manifest.get("format") != FORMAT:
            raise BundleError(f"{bundle} is not a trackstore bundle")
        if int(manifest.get("version") or 0) > BUNDLE_VERSION:
            raise BundleError(f"bundle format version {manifest.get('version')} is newer than this trackstore "
                              f"reads ({BUNDLE_VERSION}); upgrade trackstore")
        listed = {f["path"]: (int(f["size"]), f["sha256"]) for f in manifest.get("files") or []}
        missing = sorted(set(listed) - set(got))
        extra = sorted(set(got) - set(listed))
        bad = sorted(p for p in set(listed) & set(got) if listed[p] != got[p])
        if missing or extra or bad:
            detail = "; ".join(s for s in (
                f"missing {missing[:3]}" if missing else "", f"not in manifest {extra[:3]}" if extra else "",
                f"checksum or size mismatch {bad[:3]}" if bad else "") if s)
            raise BundleError(f"bundle {bundle} failed verification ({detail}); nothing was imported")
        return Staged(staging, manifest, got)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        _remove_empty(root / IMPORT_DIR)
        raise


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
    from .reader import read_part

    rs = RangeSet()
    rs.add_table(read_part(path, kind, columns=["writer", "seq"]))
    return rs


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
    ta = _meta.parse_iso((a or {}).get(key))
    tb = _meta.parse_iso((b or {}).get(key))
    return ta is not None and (tb is None or ta > tb)


def _merge_run(root: Path, staged_run: Path, local: RunPaths, files: dict, base: str, apply: bool) -> RunImport:
    """Plan (``apply=False``: only raise on conflicts) or apply the merge of one staged run."""
    from .compact import replace_kind_dir
    from .schema import KINDS

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
                    if f.name.endswith(".parquet") and not f.name.startswith(".") and f.name not in kp.remove:
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
    entries = st.manifest.get("runs") or []
    todo = []
    for e in entries:
        project, run_id = validate_project(e["project"]), validate_run_id(e["run_id"])
        base = f"runs/{PROJECT_PREFIX}{project}/{RUN_PREFIX}{run_id}"
        staged_run = st.dir / base
        if not (staged_run / RUN_FILE).is_file():
            raise BundleError(f"bundle lists run {project}/{run_id} but carries no run.json for it")
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


def _import_receipt(root: Path, st: Staged) -> ImportResult:
    from .syncstate import Cursor, load_cursor, save_cursor

    res = ImportResult("receipt", source_host=st.manifest.get("source_host"))
    for path in sorted((st.dir / "sync").glob(f"*/{PROJECT_PREFIX}*/{RUN_PREFIX}*.json")):
        try:
            incoming = Cursor.from_json(read_json(path))
        except (OSError, ValueError, KeyError) as exc:
            raise BundleError(f"receipt cursor {path.name} is unreadable: {exc}") from exc
        validate_project(incoming.project)
        validate_run_id(incoming.run_id)
        if not RunPaths(root, incoming.project, incoming.run_id).dir.exists():
            res.cursors_skipped.append(f"{incoming.project}/{incoming.run_id} ({incoming.target}): run not in this store")
            continue
        local = load_cursor(root, incoming.target, incoming.destination, incoming.project, incoming.run_id)
        merged = merge_cursors(local, incoming)
        if merged.to_json() != local.to_json():
            save_cursor(root, merged)
            res.cursors_merged += 1
    return res


def merge_cursors(local, incoming):
    """Union of acknowledged rows; status, errors and in-doubt batch from the more recent sync."""
    from .syncstate import Cursor

    out = Cursor.from_json(local.to_json())
    for kind, rs in incoming.acked.items():
        out.acked_set(kind).update(rs)
    for kind, n in incoming.skipped.items():
        out.skipped[kind] = max(out.skipped.get(kind, 0), n)
    for k, v in incoming.remote.items():
        out.remote.setdefault(k, v)
    if _newer({"t": incoming.last_sync_at}, {"t": local.last_sync_at}, "t"):
        out.synced_status = incoming.synced_status
        out.last_sync_at = incoming.last_sync_at
        out.in_doubt = incoming.in_doubt
        out.last_error, out.last_error_at = incoming.last_error, incoming.last_error_at
    out.notes = list(dict.fromkeys(local.notes + incoming.notes))
    return out


def import_bundle(root: str | Path | None, bundle: str | os.PathLike, *, expect: str | None = None) -> ImportResult:
    """Verify and import a bundle or receipt (``expect``: ``"runs"`` or ``"receipt"`` to insist)."""
    from . import locks

    root = resolve_root(root)
    root.mkdir(parents=True, exist_ok=True)
    with locks.acquire_maintenance(root, job="import"):
        st = _extract_verified(root, bundle)
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
