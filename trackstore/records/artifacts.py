"""Artifacts: snapshots of files and folders (checkpoints, datasets, eval outputs) inside the run.

::

    v = run.log_artifact("ckpt/step_100", name="policy", type="model", aliases=["best"])
    v.version, v.digest, v.dir          # 0, 'sha256 of the content', <run>/artifacts/policy/v0

Layout and promises:

* ``log_artifact`` copies the content at log time into
  ``<run>/artifacts/<name>/v<N>/files/<path inside the artifact>``, with
  ``<run>/artifacts/<name>/v<N>/manifest.json`` beside it. The trainer may then overwrite,
  rotate or delete its own files: sync reads only our copy.
* Copies, not hard links, by default: a hard link shares the inode, so a trainer that rewrites
  a checkpoint in place (``open(path, "r+b")``, ``torch.save`` to the same name on some
  filesystems, ``rsync --inplace``) would silently change the stored version. Where the
  filesystem can clone (``FICLONE``: btrfs, XFS, bcachefs) the copy is a copy-on-write reflink,
  as cheap as a link and as safe as a copy. ``hardlink=True`` opts into hard links for files the
  caller promises never to modify in place (falling back to a copy across filesystems).
* A version appears whole or not at all: it is assembled in a hidden staging folder (files
  fsynced, manifest last) and published with one ``rename``. Processes logging the same name
  (ranks, attempts) take an ``flock`` on ``artifacts/<name>/.lock`` for the short
  check-then-publish step, so identical content is never published twice and version numbers
  never collide; without ``flock`` (or where it is a no-op) a taken number makes the rename fail
  and the next number is tried. A staging folder left by a writer of the run that is no longer
  alive (killed mid-copy) is removed the next time that artifact name is logged; readers never
  look inside staging folders.
* Versions are content-addressed: the digest is a sha256 over every file's path, size and
  sha256 (files are hashed in 8 MiB chunks while they are copied). Logging content identical
  to a version already on disk — from this process or an earlier attempt — returns that
  version and stores nothing new.
* The manifest is also one ``artifacts`` row per file (:data:`trackstore.store.schema.ARTIFACTS`),
  queryable with SQL, handed to the run as a record sink (:class:`~trackstore.records.sink.RecordSink`).
* Caller mistakes (a missing path, a bad name, unserialisable metadata) raise
  :class:`~trackstore.errors.InvalidValueError`/:class:`~trackstore.errors.InvalidNameError`.
  I/O trouble while copying (disk full, unreadable file) never raises into training: it warns
  loudly on stderr, removes the partial copy and returns ``None``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import InvalidNameError, InvalidValueError, UsageError
from ..store.files import sha256_file
from ..store.layout import ARTIFACT_FILES_DIR, ARTIFACT_LOCK, ARTIFACT_MANIFEST, ARTIFACT_STAGING_PREFIX
from ..store.names import validate_artifact_name
from ..store.notices import warn
from ..store.values import as_step, json_safe
from ..store.vocab import Kind
from .sink import RecordSink

CHUNK = 8 << 20
MANIFEST_VERSION = 1
MAX_TYPE_CHARS = 64
_FICLONE = 0x40049409  # linux/fs.h


@dataclass
class ArtifactFile:
    logical_path: str  # inside the artifact, '/'-separated
    path: str  # relative to the run folder
    size: int
    sha256: str


@dataclass
class ArtifactVersion:
    """One stored version of an artifact. ``new`` is False when identical content was already stored."""

    name: str
    version: int
    type: str
    digest: str
    dir: Path
    files: list[ArtifactFile] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)
    step: int | None = None
    created_at: str | None = None
    new: bool = True

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def __repr__(self) -> str:
        return f"<trackstore.ArtifactVersion {self.name}:v{self.version} {len(self.files)} files {self.size} bytes>"


def log_artifact(run: RecordSink, path: str | os.PathLike, name: str | None = None, type: str = "model",
                 aliases: Iterable[str] | None = None, metadata: Mapping[str, Any] | None = None, *,
                 step: int | None = None, hardlink: bool = False) -> ArtifactVersion | None:
    """Store a snapshot of the file or folder ``path`` as a version of artifact ``name``.

    ``name`` defaults to the file or folder name. ``step`` defaults to the run's current step.
    Returns the :class:`ArtifactVersion` (``new=False`` if identical content already existed:
    then nothing is written, and the given aliases and metadata are not recorded), or ``None``
    after a warning if the copy failed for an I/O reason.
    """
    if run.finished:
        raise UsageError(f"run {run.id} is finished; artifacts cannot be added to it")
    src = Path(path)
    if not src.exists():
        raise InvalidValueError(f"artifact path {str(src)!r} does not exist")
    if not (src.is_file() or src.is_dir()):
        raise InvalidValueError(f"artifact path {str(src)!r} is neither a file nor a folder")
    name = validate_artifact_name(src.resolve().name if name is None else name)
    if name.startswith("_"):  # artifacts/_manifest holds the manifest parts
        raise InvalidNameError(f"artifact name {name!r} must not start with '_' (reserved for trackstore)")
    if not isinstance(type, str) or not type or len(type) > MAX_TYPE_CHARS or not type.isprintable():
        raise InvalidValueError(f"artifact type must be a short printable string such as 'model', got {type!r:.60}")
    alias_list = _aliases(aliases)
    meta = _metadata(metadata)
    step = as_step(run.step if step is None else step)  # an int64, or InvalidValueError naming it
    try:
        sources = _list_files(src)
    except OSError as exc:
        warn(f"log_artifact({str(src)!r}): could not list the files: {exc}; nothing stored")
        return None
    if not sources:
        raise InvalidValueError(f"artifact folder {str(src)!r} contains no files")

    base = run.paths.artifacts_dir / name
    stage = base / f"{ARTIFACT_STAGING_PREFIX}{run.writer_id}-{secrets.token_hex(4)}"
    try:
        files = _stage(sources, stage, hardlink)
        digest = _digest(files)
        with _name_lock(base):  # dedupe check and publish are one step across processes
            _remove_stale_staging(run, base)
            existing = _find_digest(base, digest)
            if existing is not None:
                shutil.rmtree(stage, ignore_errors=True)
                existing.new = False
                return existing
            version = _publish(run, base, stage, name, type, digest, files, alias_list, meta, step)
    except OSError as exc:
        shutil.rmtree(stage, ignore_errors=True)
        warn(f"log_artifact({str(src)!r}, name={name!r}) failed: {exc}. Training continues; the artifact "
              "was NOT stored (free space or fix permissions and log it again)")
        return None
    for f in version.files:
        run.append(Kind.ARTIFACTS, _row(version, f))
    return version


def list_versions(run_dir: str | os.PathLike, name: str | None = None) -> list[ArtifactVersion]:
    """Complete artifact versions stored in a run folder (from their manifest.json), by name and version."""
    root = Path(run_dir) / "artifacts"
    names = [name] if name is not None else sorted(p.name for p in _iterdir(root) if p.is_dir() and
                                                    not p.name.startswith(("_", ".")))
    out: list[ArtifactVersion] = []
    for n in names:
        out.extend(sorted(_versions(root / n).values(), key=lambda v: v.version))
    return out


# ---------------------------------------------------------------------- validation
def _aliases(aliases: Iterable[str] | None) -> list[str]:
    if aliases is None:
        return []
    if isinstance(aliases, str):
        aliases = [aliases]
    out: list[str] = []
    for a in aliases:
        if not isinstance(a, str) or not a or len(a) > 128 or not a.isprintable():
            raise InvalidValueError(f"artifact aliases must be short printable strings, got {a!r:.60}")
        if a not in out:
            out.append(a)
    return out


def _metadata(metadata: Mapping[str, Any] | None) -> dict:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise InvalidValueError(f"artifact metadata must be a dict, got {type(metadata).__name__}")
    return json_safe(dict(metadata))


# ---------------------------------------------------------------------- copying and hashing
def _list_files(src: Path) -> list[tuple[str, Path]]:
    """``(logical path, source path)`` of every regular file, sorted; symlinks are followed."""
    if src.is_file():
        return [(src.name, src)]
    out = []
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        dirnames.sort()
        for fn in filenames:
            p = Path(dirpath) / fn
            if p.is_file():  # follows file symlinks; skips broken links, sockets, fifos
                out.append((p.relative_to(src).as_posix(), p))
            else:
                warn(f"log_artifact: skipping {str(p)!r} (not a regular file)")
    out.sort()
    return out


def _stage(sources: list[tuple[str, Path]], stage: Path, hardlink: bool) -> list[ArtifactFile]:
    files_dir = stage / ARTIFACT_FILES_DIR
    files_dir.mkdir(parents=True)
    files = []
    for logical, source in sources:
        dest = files_dir / logical
        dest.parent.mkdir(parents=True, exist_ok=True)
        size, sha = _copy(source, dest, hardlink)
        files.append(ArtifactFile(logical, "", size, sha))
    return files


def _copy(source: Path, dest: Path, hardlink: bool) -> tuple[int, str]:
    """Copy (reflink if possible, hard link if asked) and hash; returns (size, sha256 hex)."""
    if hardlink:
        try:
            os.link(source, dest)
            return sha256_file(dest)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise
    with open(source, "rb") as fin, open(dest, "wb") as fout:
        if _reflink(fin, fout):
            fout.flush()
            os.fsync(fout.fileno())
            return sha256_file(dest)
        h = hashlib.sha256()
        size = 0
        while True:
            chunk = fin.read(CHUNK)
            if not chunk:
                break
            h.update(chunk)
            fout.write(chunk)
            size += len(chunk)
        fout.flush()
        os.fsync(fout.fileno())
    return size, h.hexdigest()


def _reflink(fin, fout) -> bool:
    try:
        import fcntl

        fcntl.ioctl(fout.fileno(), _FICLONE, fin.fileno())
        return True
    except (OSError, ImportError, AttributeError):
        return False


def _digest(files: list[ArtifactFile]) -> str:
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.logical_path):
        h.update(f"{f.logical_path}\0{f.size}\0{f.sha256}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


# ---------------------------------------------------------------------- versions on disk
def _iterdir(d: Path) -> list[Path]:
    try:
        return list(d.iterdir())
    except OSError:
        return []


def _versions(base: Path) -> dict[int, ArtifactVersion]:
    out: dict[int, ArtifactVersion] = {}
    for p in _iterdir(base):
        if not (p.name.startswith("v") and p.name[1:].isdigit()):
            continue
        try:
            m = json.loads((p / ARTIFACT_MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not a complete version (cannot happen through rename, but be lenient)
        out[int(p.name[1:])] = _from_manifest(p, m)
    return out


def _from_manifest(vdir: Path, m: dict) -> ArtifactVersion:
    return ArtifactVersion(
        name=m["name"], version=int(m["version"]), type=m.get("type", ""), digest=m["digest"], dir=vdir,
        files=[ArtifactFile(f["logical_path"], f["path"], int(f["size"]), f["sha256"]) for f in m.get("files", [])],
        aliases=list(m.get("aliases") or []), metadata=dict(m.get("metadata") or {}), step=m.get("step"),
        created_at=m.get("created_at"), new=True,
    )


def _find_digest(base: Path, digest: str) -> ArtifactVersion | None:
    for v in sorted(_versions(base).values(), key=lambda v: v.version):
        if v.digest == digest:
            return v
    return None


@contextlib.contextmanager
def _name_lock(base: Path):
    """An exclusive ``flock`` on ``artifacts/<name>/.lock``; the kernel drops it if we die."""
    try:
        import fcntl
    except ImportError:  # not POSIX: rely on rename failing for a taken number
        yield
        return
    fd = os.open(base / ARTIFACT_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _remove_stale_staging(run: RecordSink, base: Path) -> None:
    """Delete staging folders left by writers of this run that are no longer alive (killed mid-copy)."""
    from ..store import meta as _meta

    stale = [p for p in _iterdir(base) if p.name.startswith(ARTIFACT_STAGING_PREFIX)]
    if not stale:
        return
    writers = {w.get("writer_id"): w for w in _meta.read_writer_files(run.paths)}
    for p in stale:
        owner = p.name[len(ARTIFACT_STAGING_PREFIX):].rsplit("-", 1)[0]
        info = writers.get(owner)
        if owner != run.writer_id and info is not None and not _meta.writer_alive(info):
            shutil.rmtree(p, ignore_errors=True)


def _publish(run: RecordSink, base: Path, stage: Path, name: str, type: str, digest: str, files: list[ArtifactFile],
             aliases: list[str], meta: dict, step: int | None) -> ArtifactVersion:
    import time

    from ..store.atomic import fsync_dir
    from ..store.clock import iso

    existing = _versions(base)
    used = [int(p.name[1:]) for p in _iterdir(base) if p.name.startswith("v") and p.name[1:].isdigit()]
    number = max(used, default=-1) + 1
    created = iso(time.time())
    for _attempt in range(1000):
        vdir = base / f"v{number}"
        rel = vdir.relative_to(run.paths.dir).as_posix()
        for f in files:
            f.path = f"{rel}/{ARTIFACT_FILES_DIR}/{f.logical_path}"
        manifest = {
            "manifest_version": MANIFEST_VERSION, "name": name, "version": number, "type": type, "digest": digest,
            "aliases": aliases, "metadata": meta, "step": step, "created_at": created, "writer": run.writer_id,
            "files": [f.__dict__ for f in files],
        }
        _write_manifest(stage / ARTIFACT_MANIFEST, manifest)
        _fsync_tree(stage)
        try:
            os.rename(stage, vdir)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            # another writer published this number first; it may even be our content
            other = _find_digest(base, digest)
            if other is not None and other.version not in existing:
                shutil.rmtree(stage, ignore_errors=True)
                other.new = False
                return other
            number += 1
            continue
        fsync_dir(base)
        return ArtifactVersion(name=name, version=number, type=type, digest=digest, dir=vdir, files=files,
                               aliases=aliases, metadata=meta, step=step, created_at=created, new=True)
    raise OSError(errno.EEXIST, f"could not claim a version number under {base}")


def _write_manifest(path: Path, manifest: dict) -> None:
    data = json.dumps(manifest, indent=1, ensure_ascii=True, allow_nan=True).encode("ascii")
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_tree(stage: Path) -> None:
    from ..store.atomic import fsync_dir

    for dirpath, _dirs, _files in os.walk(stage):
        fsync_dir(Path(dirpath))


def manifest_rows(version: ArtifactVersion) -> list[dict]:
    """The rows of the ``artifacts`` kind that describe ``version``, one per file (what
    :func:`log_artifact` appends for a new version)."""
    return [_row(version, f) for f in version.files]


def _row(v: ArtifactVersion, f: ArtifactFile) -> dict:
    from ..store.clock import ts_now
    from .samples import clean_text, encode_json

    return {
        "name": v.name, "version": v.version, "type": v.type, "digest": v.digest, "path": clean_text(f.path),
        "logical_path": clean_text(f.logical_path), "size": f.size, "sha256": f.sha256,
        "aliases": v.aliases or None, "metadata": encode_json(v.metadata) if v.metadata else None,
        "step": v.step, "ts": ts_now(),
    }
