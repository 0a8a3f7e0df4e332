"""Artifacts by reference: checkpoints too big to copy, recorded where they are.

::

    fut = run.log_artifact("ckpt/global_step_100", name="model-RUN", reference=True, aliases=["latest"])
    fut.result()       # the ArtifactVersion once hashed (the call itself returned at once)

What this module promises:

* Nothing is copied. The version's ``manifest.json`` (``storage: reference``, ``source``: the
  absolute file or folder) lists every file with its absolute path, size, sha256 and
  modification time; its rows in the ``artifacts`` kind carry ``storage = 'reference'`` and the
  absolute ``path``. Copy and hardlink modes stay for small artifacts.
* Hashing streams (1 MiB reads, :func:`trackstore.store.files.sha256_file`; ``hashlib`` releases the GIL on them) on one background thread
  per run, never the training thread: :func:`submit` lists and ``stat``-s the files, queues the
  work and returns a :class:`concurrent.futures.Future` at once. Versions are hashed and
  published in the order they were logged.
* A file that changes while it is hashed (size or modification time differ before and after),
  vanishes, or cannot be read is not recorded as something else: the version is not stored, a
  warning names the file, and the future's result is ``None``. Never raises into training.
* When the run finishes (also at exit and on SIGTERM) it first flushes what it holds, then waits
  for the queued hashes, so their rows are part of the run; after ``kill -9`` a reference still
  being hashed is lost (the trainer's files are untouched: log it again).
* :func:`check_reference` is what ``doctor`` and every sync adapter ask before reading a
  referenced file: ``None`` if the file is there with the recorded size and sha256, else the
  problem in words. A reference whose file changed or vanished is reported, never uploaded.
  ``quick=True`` compares size and modification time only (``doctor`` without ``--deep``).
"""

from __future__ import annotations

import os
import secrets
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from ..store.files import sha256_file as _hash  # streamed; hashlib releases the GIL on each chunk
from ..store.layout import ARTIFACT_STAGING_PREFIX
from ..store.notices import warn
from .artifact_versions import REFERENCE, ArtifactFile, ArtifactVersion, publish
from .sink import RecordSink

_STATE_KEY = "artifact_references"


class _Hasher:
    """One run's background hashing: a one-thread pool, drained when the run finishes."""

    def __init__(self, run: RecordSink):
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"trackstore-hash-{run.id}")
        self.pending: list[Future] = []
        run.on_finish(lambda: self.drain(run))

    def drain(self, run: RecordSink) -> None:
        if any(not f.done() for f in self.pending):
            run.flush()  # what the run holds is on disk before a long wait for hashes
        self.pool.shutdown(wait=True)


def submit(run: RecordSink, src: Path, name: str, type: str, aliases: list[str], meta: dict, step: int,
           sources: list[tuple[str, Path]]) -> Future:
    """Queue the hashing and publishing of a reference version; see the module docstring."""
    hasher = run.record_state(_STATE_KEY, lambda: _Hasher(run))
    listed = []
    for logical, path in sources:
        absolute = Path(os.path.abspath(path))
        try:
            st = absolute.stat()
        except OSError as exc:
            warn(f"log_artifact({str(src)!r}, reference=True): cannot stat {str(absolute)!r}: {exc}; nothing stored")
            done: Future = Future()
            done.set_result(None)
            return done
        listed.append((logical, absolute, st.st_size, st.st_mtime_ns))
    source = os.path.abspath(src)
    future = hasher.pool.submit(_hash_and_publish, run, source, name, type, aliases, meta, step, listed)
    hasher.pending.append(future)
    return future


def _hash_and_publish(run: RecordSink, source: str, name: str, type: str, aliases: list[str], meta: dict, step: int,
                      listed: list[tuple[str, Path, int, int]]) -> ArtifactVersion | None:
    files = []
    try:
        for logical, path, size, mtime_ns in listed:
            got_size, sha = _hash(path)
            st = path.stat()
            if (got_size, st.st_size, st.st_mtime_ns) != (size, size, mtime_ns):
                warn(f"log_artifact(reference=True): {str(path)!r} changed while it was hashed (it is still being "
                     f"written?); version of {name!r} NOT stored: log it again once it is complete")
                return None
            files.append(ArtifactFile(logical, str(path), size, sha, mtime_ns))
        stage = run.paths.artifacts_dir / name / f"{ARTIFACT_STAGING_PREFIX}{run.writer_id}-{secrets.token_hex(4)}"
        return publish(run, name, type, files, aliases, meta, step, stage=stage, storage=REFERENCE, source=source)
    except Exception as exc:  # I/O trouble (a vanished file, a full disk) or a run that finished: never raise
        warn(f"log_artifact({source!r}, name={name!r}, reference=True) failed: {exc}; the reference was NOT stored")
        return None


def check_reference(path: str | os.PathLike, size: int, sha256: str, mtime_ns: int | None = None, *,
                    quick: bool = False) -> str | None:
    """``None`` if the referenced file at ``path`` still has ``size`` and ``sha256``, else what is
    wrong (``vanished``, ``changed: ...``, ``unreadable: ...``). ``quick`` compares size and
    modification time only (no read), falling back to the hash where no time was recorded."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "vanished"
    except OSError as exc:
        return f"unreadable: {exc}"
    if st.st_size != size:
        return f"changed: {st.st_size} bytes, {size} recorded"
    if quick and mtime_ns is not None:
        return None if st.st_mtime_ns == mtime_ns else "changed: modified since it was logged"
    try:
        got_size, got = _hash(Path(path))
    except OSError as exc:
        return f"unreadable: {exc}"
    if got_size != size or got != sha256:
        return "changed: its sha256 differs from the one recorded"
    return None
