"""Bundles: carrying runs across an air gap (export/import), and sync receipts back.

The package's modules, each saying what it promises: :mod:`.volumes` (one file or split volumes,
compression), :mod:`.manifest` (the first member), :mod:`.writing` (members and the tar stream
written), :mod:`.export` (runs out), :mod:`.checks` (hostile input refused) and :mod:`.row_ids`,
:mod:`.staging` (extraction, verified), :mod:`.merge_runs` (runs in, merged by row id),
:mod:`.receipts` (sync cursors both ways), :mod:`.import_` (verify, then merge) and
:mod:`.results`. The names other code uses are re-exported here.

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
  refused (:func:`~.row_ids.repeated_row_ids`); only then are runs moved into place — a new run with one
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

from ...store.layout import IMPORT_DIR
from .export import export_runs
from .import_ import import_bundle
from .manifest import BUNDLE_VERSION, FORMAT, MANIFEST, TOP
from .receipts import export_receipt, merge_cursors
from .results import ExportResult, ImportResult, RunImport
from .row_ids import RepeatedIds, repeated_row_ids
from .volumes import volumes

__all__ = [
    "BUNDLE_VERSION",
    "FORMAT",
    "IMPORT_DIR",
    "MANIFEST",
    "TOP",
    "ExportResult",
    "ImportResult",
    "RepeatedIds",
    "RunImport",
    "export_receipt",
    "export_runs",
    "import_bundle",
    "merge_cursors",
    "repeated_row_ids",
    "volumes",
]
