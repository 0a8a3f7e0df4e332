"""Artifact versions on disk: how a version is published, described and found again.

The part of :mod:`trackstore.records.artifacts` that both ways of storing a version share (a
copy in the run folder, or a reference, :mod:`trackstore.records.artifact_refs`): the
``manifest.json`` of each version, the one-step publish under a name lock, content
deduplication, and the rows of the ``artifacts`` kind (a row per file, a row per alias move).
The promises are the ones :mod:`trackstore.records.artifacts` states; docs/format.md section 7
is the format.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..store.layout import ARTIFACT_FILES_DIR, ARTIFACT_LOCK, ARTIFACT_MANIFEST, ARTIFACT_STAGING_PREFIX
from ..store.vocab import Kind
from .sink import RecordSink

MANIFEST_VERSION = 1

COPY = "copy"
REFERENCE = "reference"
FILE_EVENT = "file"
ALIAS_EVENT = "alias"


@dataclass
class ArtifactFile:
    logical_path: str  # inside the artifact, '/'-separated
    path: str  # relative to the run folder (a copy), or absolute (a reference)
    size: int
    sha256: str
    mtime_ns: int | None = None  # a reference's modification time when it was hashed


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
    storage: str = COPY
    source: str | None = None  # a reference's file or folder, absolute

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def __repr__(self) -> str:
        kind = " by reference" if self.storage == REFERENCE else ""
        return f"<trackstore.ArtifactVersion {self.name}:v{self.version} {len(self.files)} files {self.size} bytes{kind}>"

    def file_path(self, f: ArtifactFile, run_dir: str | os.PathLike) -> Path:
        """Where the bytes of ``f`` are: in the run folder (a copy) or at the referenced path."""
        return Path(f.path) if self.storage == REFERENCE else Path(run_dir) / f.path


def publish(run: RecordSink, name: str, type: str, files: list[ArtifactFile], aliases: list[str], meta: dict,
            step: int | None, *, stage: Path, storage: str = COPY, source: str | None = None) -> ArtifactVersion:
    """Publish the version staged in ``stage`` (its files already there for a copy; nothing for a
    reference) unless the same content is stored already; append its rows. Raises ``OSError``."""
    base = run.paths.artifacts_dir / name
    stage.mkdir(parents=True, exist_ok=True)
    digest = _digest(files)
    with _name_lock(base):  # dedupe check and publish are one step across processes
        _remove_stale_staging(run, base)
        existing = _find_digest(base, digest, storage, source)
        if existing is not None:
            shutil.rmtree(stage, ignore_errors=True)
            existing.new = False
            for alias in aliases:  # the aliases asked for move to the identical version
                run.append(Kind.ARTIFACTS, alias_row(existing, alias, step))
            return existing
        version = _publish(run, base, stage, name, type, digest, files, aliases, meta, step, storage, source)
    if not version.new:
        for alias in aliases:
            run.append(Kind.ARTIFACTS, alias_row(version, alias, step))
        return version
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
        out.extend(sorted(stored_versions(root / n).values(), key=lambda v: v.version))
    return out



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


def stored_versions(base: Path) -> dict[int, ArtifactVersion]:
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
        files=[ArtifactFile(f["logical_path"], f["path"], int(f["size"]), f["sha256"], f.get("mtime_ns"))
               for f in m.get("files", [])],
        aliases=list(m.get("aliases") or []), metadata=dict(m.get("metadata") or {}), step=m.get("step"),
        created_at=m.get("created_at"), new=True, storage=m.get("storage") or COPY, source=m.get("source"),
    )


def _find_digest(base: Path, digest: str, storage: str = COPY, source: str | None = None) -> ArtifactVersion | None:
    """The first version of the same content and storage (a reference: also the same place: a
    copy is never answered by a reference, which the trainer may delete, nor the reverse)."""
    for v in sorted(stored_versions(base).values(), key=lambda v: v.version):
        if v.digest == digest and v.storage == storage and v.source == source:
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
             aliases: list[str], meta: dict, step: int | None, storage: str, source: str | None) -> ArtifactVersion:
    import time

    from ..store.atomic import fsync_dir
    from ..store.clock import iso

    existing = stored_versions(base)
    used = [int(p.name[1:]) for p in _iterdir(base) if p.name.startswith("v") and p.name[1:].isdigit()]
    number = max(used, default=-1) + 1
    created = iso(time.time())
    for _attempt in range(1000):
        vdir = base / f"v{number}"
        rel = vdir.relative_to(run.paths.dir).as_posix()
        if storage == COPY:
            for f in files:
                f.path = f"{rel}/{ARTIFACT_FILES_DIR}/{f.logical_path}"
        manifest = {
            "manifest_version": MANIFEST_VERSION, "name": name, "version": number, "type": type, "digest": digest,
            "aliases": aliases, "metadata": meta, "step": step, "created_at": created, "writer": run.writer_id,
            "files": [{k: v for k, v in f.__dict__.items() if v is not None} for f in files],
        }
        if storage != COPY:
            manifest.update(storage=storage, source=source)
        _write_manifest(stage / ARTIFACT_MANIFEST, manifest)
        _fsync_tree(stage)
        try:
            os.rename(stage, vdir)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            # another writer published this number first; it may even be our content
            other = _find_digest(base, digest, storage, source)
            if other is not None and other.version not in existing:
                shutil.rmtree(stage, ignore_errors=True)
                other.new = False
                return other
            number += 1
            continue
        fsync_dir(base)
        return ArtifactVersion(name=name, version=number, type=type, digest=digest, dir=vdir, files=files,
                               aliases=aliases, metadata=meta, step=step, created_at=created, new=True,
                               storage=storage, source=source)
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
        "step": v.step, "ts": ts_now(), "storage": v.storage, "event": FILE_EVENT,
    }


def alias_row(v: ArtifactVersion, alias: str, step: int | None) -> dict:
    """The row that moves ``alias`` to version ``v`` at ``step`` (when the move was made: rows
    replay in step order): no file, no digest, ``event`` ``alias``."""
    from ..store.clock import ts_now

    return {
        # no digest: batches keep rows of one digest together (a version's files), and a move must
        # keep its place in log order (trackstore.sync.batches.row_batches)
        "name": v.name, "version": v.version, "type": v.type, "digest": "", "path": "", "logical_path": "",
        "size": 0, "sha256": "", "aliases": [alias], "metadata": None, "step": step, "ts": ts_now(),
        "storage": v.storage, "event": ALIAS_EVENT,
    }
