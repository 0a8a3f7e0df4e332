"""The store's catalog: a cache of what every run folder holds, so a command costs what changed.

``<root>/_catalog/catalog.sqlite`` remembers, per run: the usable fields of its ``run.json``
(and what could not be read), its writer files, and per record kind its part files (name,
size, modification time) with what their footers and ``writer``/``seq`` columns say (rows,
row-id set, largest step, newest time); the bytes of the run folder; and, per sync cursor, what
the cursor says and how many rows are pending against the run's parts. docs/format.md section
11 is the spec.

The promise: **the catalog is a cache, never the truth.** Every entry is stored with the
``stat`` fingerprint of what it was derived from, checked again before the entry is used, and
derived again from the files when it differs; a missing, stale, corrupt, truncated or foreign
catalog file only costs time; writers of runs never read or lock it; a store that cannot be
written (a read-only snapshot) is served without a catalog; deleting ``_catalog/`` is always
safe. Its parts:

* :mod:`.rows`: the file's tables and the one type of each row (:class:`RunRow`, ...);
* :mod:`.freshness`: fingerprints, and :func:`~.freshness.holds`, the one check of whether a
  row's fields still hold, parameterised by what the caller needs;
* :mod:`.part_records`: what is known of each part file, read once;
* :mod:`.cache`: :class:`Catalog`, the answers for one command;
* :mod:`.storage`: the file, opened read-only and replaced whole by a rename;
* :mod:`.folders`: which runs the store holds, from its folders alone.

sqlite3 (standard library) is imported only when the catalog is opened; pyarrow only when a
part file must be read.
"""

from __future__ import annotations

from ..layout import RUN_FILE
from .cache import Catalog, RunEntry, UnchangedRun, open_catalog
from .folders import run_folders
from .freshness import RACY_S, fingerprint
from .part_records import (
    MetricFacts,
    PartRecord,
    PartsSummary,
    column_max,
    column_max_time,
    metric_facts,
    parts_digest,
    read_part_record,
)
from .rows import CATALOG_DIR, CATALOG_FILE, CATALOG_VERSION, RunRow, catalog_path, is_catalog_path

__all__ = ["CATALOG_DIR", "CATALOG_FILE", "CATALOG_VERSION", "RACY_S", "RUN_FILE", "Catalog", "MetricFacts", "PartRecord",
           "PartsSummary", "RunEntry", "RunRow", "UnchangedRun", "catalog_path", "column_max", "column_max_time",
           "fingerprint", "is_catalog_path", "metric_facts", "open_catalog", "parts_digest", "read_part_record", "run_folders"]
