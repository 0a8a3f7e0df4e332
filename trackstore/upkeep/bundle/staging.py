"""Extracting a bundle into a staging folder inside the store, verified member by member.

Promises (:func:`extract_verified`): the bundle must start with its manifest
(:func:`read_manifest`: of a bounded size, this format, a version this trackstore reads). It
streams into ``<root>/_import/<token>/``, outside every query glob. Before a byte is written, a bundle whose listed files do not fit on
the disk is refused (a :class:`~trackstore.errors.WriteError`), and so is every member that is
unsafe (:func:`~.checks.check_member`), not listed, listed twice or of another size than listed.
A member is written no further than its listed size and its sha256 is checked at its end; no
listed file may be missing. On any failure the staging folder is removed: the store is
unchanged.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import shutil
import tarfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator

from ...errors import BundleError, WriteError
from ...store.layout import IMPORT_DIR
from .checks import check_member
from .manifest import BUNDLE_VERSION, FORMAT, MANIFEST, MAX_MANIFEST, TOP, listed_files
from .volumes import CHUNK, open_volumes

_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


@dataclass
class Staged:
    """A verified bundle extracted into a staging folder."""

    dir: Path
    manifest: dict
    files: dict[str, tuple[int, str]]


def read_manifest(tf: tarfile.TarFile, first: tarfile.TarInfo | None, bundle) -> dict:
    """The manifest, which must be the bundle's first member (so every other is checked against it)."""
    if first is None or check_member(first) != MANIFEST:
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


def _check_space(root: Path, need: int) -> None:
    """Refuse up front when the files the manifest lists cannot fit on the store's disk."""
    from ...store.files import format_bytes

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
        rel = check_member(m)
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
        if f is None:  # not reached: check_member lets only files and folders through
            raise BundleError(f"refusing bundle: member {m.name!r} is not a regular file; nothing was imported")
        _copy_member(f, dest, m.name, size, sha, bundle)
        try:
            os.utime(dest, (m.mtime, m.mtime))
        except OSError as exc:
            raise _write_failed(exc, dest) from None
        got.add(rel)
    return got


def extract_verified(root: Path, bundle: str | os.PathLike) -> Staged:
    """Stream the bundle into ``<root>/_import/<token>``, every member checked against the manifest
    (its first member) before and while it is written; on any error remove it all.

    Refused before a byte is written: a bundle whose files do not fit on the disk, and every
    member that is unsafe, not listed, or of another size than listed. A member whose bytes do
    not match its sha256 stops the import at that member.
    """
    stream, _ = open_volumes(bundle)
    staging = root / IMPORT_DIR / f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{secrets.token_hex(4)}"
    done = False
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tf:
            members = iter(tf)
            manifest = read_manifest(tf, next(members, None), bundle)
            listed = listed_files(manifest, bundle)
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
            remove_empty(root / IMPORT_DIR)


def remove_empty(d: Path) -> None:
    try:
        d.rmdir()
    except OSError:
        pass

