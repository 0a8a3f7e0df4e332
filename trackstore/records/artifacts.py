"""Artifacts: snapshots of files and folders (checkpoints, datasets, eval outputs) inside the run.

::

    v = run.log_artifact("ckpt/step_100", name="policy", type="model", aliases=["best"])
    v.version, v.digest, v.dir          # 0, 'sha256 of the content', <run>/artifacts/policy/v0

    run.log_checkpoint("ckpt/global_step_100", step=100, metrics={"acc": 0.7})  # by reference, a Future
    run.alias_artifact("model-<run id>", 0, "best")                            # best moves to v0

Layout and promises:

* ``log_artifact(..., reference=True)`` and ``log_checkpoint`` copy nothing: see
  :mod:`trackstore.records.artifact_refs`. Everything below about copies holds for them except
  the copying; versions are published and deduplicated the same way
  (:mod:`trackstore.records.artifact_versions`).
* Aliases move: one version of a name holds an alias at a time. Aliases given at log time, to
  identical content logged again, or by :func:`alias_artifact` take it from the version that
  held it; each move is a row of the ``artifacts`` kind (``event = 'alias'``), so sync replays
  moves in order, and the ``artifact_aliases`` view says who holds what.
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
  version and stores nothing new (its aliases move to it).
* The manifest is also one ``artifacts`` row per file (:data:`trackstore.store.schema.ARTIFACTS`),
  queryable with SQL, handed to the run as a record sink (:class:`~trackstore.records.sink.RecordSink`).
* Caller mistakes (a missing path, a bad name, unserialisable metadata) raise
  :class:`~trackstore.errors.InvalidValueError`/:class:`~trackstore.errors.InvalidNameError`.
  I/O trouble while copying (disk full, unreadable file) never raises into training: it warns
  loudly on stderr, removes the partial copy and returns ``None``.
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import shutil
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import InvalidNameError, InvalidValueError, UsageError
from ..store.files import sha256_file
from ..store.layout import ARTIFACT_FILES_DIR, ARTIFACT_STAGING_PREFIX
from ..store.names import validate_artifact_name
from ..store.notices import warn
from ..store.values import as_step, json_safe
from ..store.vocab import Kind
from .artifact_versions import (
    ALIAS_EVENT,
    COPY,
    FILE_EVENT,
    REFERENCE,
    ArtifactFile,
    ArtifactVersion,
    alias_row,
    list_versions,
    manifest_rows,
    publish,
    stored_versions,
)
from .sink import RecordSink

__all__ = ["log_artifact", "log_checkpoint", "alias_artifact", "list_versions", "manifest_rows", "ArtifactVersion",
           "ArtifactFile", "COPY", "REFERENCE", "FILE_EVENT", "ALIAS_EVENT"]

CHUNK = 8 << 20
MAX_TYPE_CHARS = 64
_FICLONE = 0x40049409  # linux/fs.h


def log_artifact(run: RecordSink, path: str | os.PathLike, name: str | None = None, type: str = "model",
                 aliases: Iterable[str] | None = None, metadata: Mapping[str, Any] | None = None, *,
                 step: int | None = None, hardlink: bool = False, reference: bool = False):
    """Store a snapshot of the file or folder ``path`` as a version of artifact ``name``.

    ``name`` defaults to the file or folder name. ``step`` defaults to the run's current step.
    Aliases given here go to the new version and move away from any other version of ``name``
    (one version holds an alias at a time); :func:`alias_artifact` moves them later.

    A copy (the default; ``hardlink=True`` links instead) returns the :class:`ArtifactVersion`
    (``new=False`` if identical content was already stored: then nothing is written and the
    aliases move to that version), or ``None`` after a warning if the copy failed for an I/O
    reason. ``reference=True`` copies nothing: the file list, sizes and sha256 are hashed on a
    background thread and the call returns at once a :class:`concurrent.futures.Future` of the
    version (``None`` if the files could not be read or changed while they were hashed); the
    run waits for it when it finishes (see :mod:`trackstore.records.artifact_refs`).
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
    if reference and hardlink:
        raise InvalidValueError("log_artifact: reference=True copies nothing, so hardlink=True does not apply")
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
    if reference:
        from .artifact_refs import submit

        return submit(run, src, name, type, alias_list, meta, step, sources)

    base = run.paths.artifacts_dir / name
    stage = base / f"{ARTIFACT_STAGING_PREFIX}{run.writer_id}-{secrets.token_hex(4)}"
    try:
        files = _stage(sources, stage, hardlink)
        return publish(run, name, type, files, alias_list, meta, step, stage=stage)
    except OSError as exc:
        shutil.rmtree(stage, ignore_errors=True)
        warn(f"log_artifact({str(src)!r}, name={name!r}) failed: {exc}. Training continues; the artifact "
              "was NOT stored (free space or fix permissions and log it again)")
        return None


def alias_artifact(run: RecordSink, name: str, version: int | ArtifactVersion, alias: str, *,
                   step: int | None = None) -> ArtifactVersion:
    """Give ``alias`` (``"best"``, ``"latest"``, ...) to ``version`` of artifact ``name``, moving it
    from whichever version of ``name`` held it. Recorded as a row of the ``artifacts`` kind, so it
    is replayed by sync in order; the ``artifacts`` and ``artifact_aliases`` views show the result.

    The move is at ``step`` (default: the run's current step, and never before any version of
    ``name`` nor this process's earlier moves): the ``artifacts`` rows replay in step order,
    and the holder of an alias is the version given it last in that order.

    Raises :class:`InvalidValueError` for an alias that is not a short printable string or a
    version that is not stored (a reference still being hashed is not stored yet: wait for its
    future first).
    """
    if run.finished:
        raise UsageError(f"run {run.id} is finished; its artifact aliases cannot change")
    name = validate_artifact_name(name)
    number = version.version if isinstance(version, ArtifactVersion) else version
    if isinstance(number, bool) or not isinstance(number, int):
        raise InvalidValueError(f"artifact version must be an int (0, 1, ...), got {number!r:.60}")
    if not isinstance(alias, str):
        raise InvalidValueError(f"an artifact alias is one string such as 'best', got {alias!r:.60}")
    (one,) = _aliases([alias])  # validates it
    stored = stored_versions(run.paths.artifacts_dir / name)
    target = stored.get(number)
    if target is None:
        have = ", ".join(f"v{n}" for n in sorted(stored)) or "none"
        raise InvalidValueError(f"artifact {name!r} of run {run.id} has no version {number} (stored: {have})")
    at = as_step(run.step if step is None else step)
    moves: dict[str, int] = run.record_state("artifact_alias_steps", dict)  # name -> step of our last move
    if step is None:  # after every version of the name and every earlier move, in replay order
        at = max([at, moves.get(name, at), *(v.step for v in stored.values() if v.step is not None)])
    moves[name] = max(at, moves.get(name, at))
    run.append(Kind.ARTIFACTS, alias_row(target, one, at))
    return target


def log_checkpoint(run: RecordSink, path: str | os.PathLike, step: int | None = None, *,
                   metrics: Mapping[str, Any] | None = None, name: str | None = None,
                   aliases: Iterable[str] = ("latest",), metadata: Mapping[str, Any] | None = None,
                   reference: bool = True):
    """A training checkpoint (file or folder) as the next version of the run's model artifact.

    The artifact is ``model-<run id>`` (the name wandb's Lightning and Transformers integrations
    give theirs, so versions of different runs never share aliases on a target), type
    ``model``; the version gets ``aliases`` (``latest`` by default) plus ``step-<step>``, and
    ``{"step": step, "metrics": metrics}`` (the metrics of that step) merged into ``metadata``.
    By reference by default (``reference=False`` copies): see :func:`log_artifact` for what is
    returned.
    """
    step = as_step(run.step if step is None else step)
    meta = dict(_metadata(metadata))
    meta["step"] = step
    if metrics:
        meta["metrics"] = _metadata(metrics)
    names = [*_aliases(aliases), f"step-{step}"]
    return log_artifact(run, path, name=name or f"model-{run.id}", type="model", aliases=names, metadata=meta,
                        step=step, reference=reference)


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


