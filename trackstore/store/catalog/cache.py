"""The catalog of one store for one command: answers from the kept rows, derived again from the
files only where :mod:`.freshness` says something changed.

:class:`Catalog` hands out a run's ``run.json`` fields (:meth:`Catalog.entry`), its writer
files, its part records and their summary, its folder's bytes and its cursors' summaries, and
two fast paths over the rows the file holds: :meth:`Catalog.listing` (one ``stat`` per run)
and :meth:`Catalog.unchanged_row` (what ``status`` and a sync's no-change check need of a run
that ended and did not change). Every answer is the one a read of the files gives: a row's
fields are used only when :func:`.freshness.holds` says so for what the caller needs.
Fingerprints are taken *before* the files are read (a change in between makes the stored
fingerprint old, never the content). What was derived again is written by :meth:`Catalog.save`
(:mod:`.storage`); writers of runs never read or lock the catalog.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..layout import (
    ARTIFACTS_DIR,
    KINDS,
    PROJECT_PREFIX,
    REPLICA_MARKER,
    RUN_PREFIX,
    RunPaths,
    outside_store,
)
from ..meta import parse_run_json
from ..vocab import Kind
from .folders import run_folders
from .freshness import (
    FOLDER_BYTES,
    KIND_DIRS,
    LISTING,
    META,
    PARTS,
    SEP,
    UNCHANGED,
    WRITERS,
    Look,
    bytes_basis,
    holds,
    racy_limit,
    same,
    stat_fingerprint,
)
from .part_records import (
    MetricFacts,
    PartRecord,
    PartsSummary,
    carried_facts,
    list_part_facts,
    list_parts,
    metric_facts,
    parts_digest,
)
from .rows import (
    CURSOR_COLUMNS,
    DETAIL_COLUMNS,
    OVERVIEWS_TABLE,
    PART_FOLDERS_TABLE,
    RUN_COLUMNS,
    CursorRow,
    RunDetails,
    RunRow,
    catalog_path,
    dumps,
    facts_columns,
    light_columns,
    light_of_meta,
    writers_lost,
)
from .rows import (
    digest as text_digest,
)
from .storage import open_file, replace_file


@dataclass(frozen=True)
class UnchangedRun:
    """A run that did not change since the catalog's row of it was made, and has ended
    (:meth:`Catalog.unchanged_run`): what ``status`` shows of it, from that row alone."""

    status: str  # as recorded: final, so also the effective status
    created_at: str | None
    parts: PartsSummary
    bytes: int
    write_errors: str | None  # what run.json recorded
    writers_lost: list[dict]  # the writer files that recorded write_errors


@dataclass(slots=True, eq=False)
class RunEntry:
    """One run as the catalog has it (validated by ``run.json``'s fingerprint when handed out).

    ``light`` holds the fields listings need (name, recorded status, times, ...); ``meta`` (every
    usable field of run.json) is parsed only when asked for.
    """

    catalog: Catalog
    project: str
    run_id: str
    light: dict
    _meta: dict | None  # parsed run.json, or None until asked for
    _meta_text: str | None  # its text when the catalog had it at hand
    unreadable: bool
    problems: list[str]

    @property
    def paths(self) -> RunPaths:
        return RunPaths(self.catalog.root, self.project, self.run_id)

    @property
    def meta(self) -> dict:
        if self._meta is None:
            text = self._meta_text if self._meta_text is not None else self.catalog.meta_json(self.project, self.run_id)
            self._meta = json.loads(text) if text else {}
            self._meta_text = None
        return self._meta

    def meta_json(self) -> str:
        """:attr:`meta` as JSON text (what the catalog keeps, not parsed when not parsed yet)."""
        if self._meta is None:
            text = self._meta_text if self._meta_text is not None else self.catalog.meta_json(self.project, self.run_id)
            if text is not None:
                return text
        return dumps(self.meta)


def _summary_of_row(row: RunRow) -> PartsSummary:
    """The parts in short as a row keeps them (valid while :data:`~.freshness.PARTS` holds)."""
    return PartsSummary(row.parts_fp, row.rows_per_kind(), int(row.damaged or 0), None)


class Catalog:
    """The catalog of one store, for one command. Use :func:`open_catalog`; call :meth:`save`
    when done (it writes only if something was derived again)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.path = catalog_path(self.root)
        self._db: Any = open_file(self.path)  # the file, read-only and immutable (sqlite3.Connection)
        self._rows: dict[tuple[str, str], RunRow | None] = {}  # what the file holds, as read
        self._cursors: dict[str, CursorRow | None] = {}  # cursor rows of the file, by path, as read
        self._all = False  # every row of the file read (prefetch): a run not in _rows has none
        self._all_cursors = False
        self._metas: dict[tuple[str, str], str | None] | None = None  # run_details.meta of every run (prefetch_meta)
        self._fresh: dict[tuple[str, str], RunRow] = {}  # rows derived again by this process
        self._fresh_details: dict[tuple[str, str], RunDetails] = {}  # and their large columns
        self._fresh_cursors: dict[str, CursorRow] = {}
        self._folder_fps: dict[str, str | None] = {}  # cursor folders stat-ed by this process
        self._writers_now: dict[tuple[str, str], str | None] = {}  # _writers folders stat-ed by this process
        self._meta_now: dict[tuple[str, str], str] = {}  # run.json fingerprints listing() found as stored
        self._unchanged: dict[tuple[str, str], RunRow | None] = {}  # unchanged_row(): the answer, once per command
        self._overviews: dict[tuple[str, str], tuple[str, str]] = {}  # fresh run overviews to write (put_overview)
        self._part_checks: dict[str, tuple] | None = None  # fresh part checks to write (see put_part_checks)
        self._part_checks_all = False
        self._part_folders: dict[str, tuple[str, list[str]]] | None = None  # fresh folder listings (put_part_checks)
        self._dir_keys: list[tuple[str, str]] | None = None
        self._replica: bool | None = None  # the root is a team store's (see _carried_facts)
        self._dirty = False
        self._prefix = f"{self.root}{SEP}{PROJECT_PREFIX}"
        self._now = time.time()  # one clock reading for the racy rule of a whole listing (older is stricter)

    @property
    def _limit(self) -> float:
        return racy_limit(self._now)

    # ------------------------------------------------------------------ reading the file
    def _query(self, sql: str, args: tuple = ()) -> list:
        """Rows of a query on the file; none when it fails (then the file is of no further use)."""
        if self._db is None:
            return []
        try:
            return self._db.execute(sql, args).fetchall()
        except Exception:
            self._db = None
            return []

    def prefetch(self, project: str | None = None) -> None:
        """Read the rows of every run (of one project) in one query."""
        if self._db is None or self._all:
            return
        cols = ", ".join(RUN_COLUMNS)
        if project is None:
            found = self._query(f"SELECT {cols} FROM runs")
            self._all = self._db is not None
        else:
            found = self._query(f"SELECT {cols} FROM runs WHERE project = ?", (project,))
        rows, make = self._rows, RunRow.from_values
        for values in found:
            row = make(values)
            rows[row.key] = row

    def prefetch_meta(self) -> None:
        """Read every run's kept ``run.json`` fields (JSON text) in one query, for :meth:`meta_json`."""
        if self._metas is None:
            self._metas = dict.fromkeys(self._rows) if self._all else {}
            self._metas.update({(p, r): m for p, r, m in self._query("SELECT project, run_id, meta FROM run_details")})

    def prefetch_cursors(self) -> None:
        if not self._all_cursors:
            found = self._query(f"SELECT {', '.join(CURSOR_COLUMNS)} FROM cursors")
            self._cursors.update({path: CursorRow.from_values(values) for path, *values in found})
            self._all_cursors = True

    def _stored(self, key: tuple[str, str]) -> RunRow | None:
        if key in self._rows or self._all or self._db is None:
            return self._rows.get(key)
        found = self._query(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE project = ? AND run_id = ?", key)
        row = self._rows[key] = RunRow.from_values(found[0]) if found else None
        return row

    def _stored_cursor(self, rel: str) -> CursorRow | None:
        if rel in self._cursors or self._all_cursors:
            return self._cursors.get(rel)
        found = self._query(f"SELECT {', '.join(CURSOR_COLUMNS[1:])} FROM cursors WHERE path = ?", (rel,))
        self._cursors[rel] = CursorRow.from_values(found[0]) if found else None
        return self._cursors[rel]

    def meta_json(self, project: str, run_id: str) -> str | None:
        """The run.json fields the catalog keeps of a run, as JSON text (None: none kept)."""
        return self._detail((project, run_id), "meta")

    def _detail(self, key: tuple[str, str], column: str) -> str | None:
        """A large column (one of :class:`~.rows.RunDetails`) of a run, as stored."""
        fresh = self._fresh_details.get(key)
        if fresh is not None:
            return getattr(fresh, column)
        if column == "meta" and self._metas is not None and key in self._metas:
            return self._metas[key]
        if self._db is None:
            return None
        try:
            found = self._db.execute(f"SELECT {column} FROM run_details WHERE project = ? AND run_id = ?",
                                     key).fetchone()
        except Exception:
            return None
        return found[0] if found else None

    def _row(self, key: tuple[str, str]) -> RunRow | None:
        """The run's row as this process has it: derived again here, else as the file holds it."""
        return self._fresh.get(key) or self._stored(key)

    def _update(self, key: tuple[str, str], **values: Any) -> None:
        """Change fields of the run's row (and of its large columns) to what was derived again."""
        details = {c: values.pop(c) for c in DETAIL_COLUMNS if c in values}
        row = self._fresh.get(key)
        if row is None:
            row = self._stored(key) or RunRow(*key)
            # carry the stored large columns into the rewritten row
            kept = RunDetails(*(details[c] if c in details else self._detail(key, c) for c in DETAIL_COLUMNS))
        else:
            kept = self._fresh_details[key]
        self._fresh[key] = row.replaced(**values)
        self._fresh_details[key] = kept.replaced(**details)
        self._dirty = True

    # ------------------------------------------------------------------ the folders
    def run_keys(self, project: str | None = None) -> list[tuple[str, str]]:
        """Every ``(project, run_id)`` folder of the store, sorted (a directory scan: no stat)."""
        if self._dir_keys is None:
            self._dir_keys = run_folders(self.root)
        if project is None:
            return self._dir_keys
        return [k for k in self._dir_keys if k[0] == project]

    def _run_dir(self, project: str, run_id: str) -> str:
        return f"{self._prefix}{project}{SEP}{RUN_PREFIX}{run_id}"

    def _look(self, key: tuple[str, str], **known: str | None) -> Look:
        return Look(self._run_dir(*key), self._limit, **known)

    def has_run_dir(self, project: str, run_id: str) -> bool:
        """Whether the run's folder exists in the store (not through a link leading outside it)."""
        run_dir = RunPaths(self.root, project, run_id).dir
        if not os.path.isdir(run_dir):
            return False
        if not (os.path.islink(run_dir) or os.path.islink(run_dir.parent)):
            return True
        return outside_store(run_dir, os.path.realpath(self.root)) is None

    # ------------------------------------------------------------------ runs
    def entry(self, project: str, run_id: str) -> RunEntry | None:
        """The run's ``run.json`` as the catalog has it, checked against the file; None without one."""
        key = (project, run_id)
        look = self._look(key)
        current = look.meta()
        if current == "-":
            return None
        row = self._row(key)
        if row is not None and holds(row, META, look):
            return RunEntry(self, project, run_id, row.light(), None, None, bool(row.unreadable), row.problem_list())
        paths = RunPaths(self.root, project, run_id)
        # derived again: the fingerprint was taken first, so a change meanwhile leaves it old
        try:
            raw = paths.run_file.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            return RunEntry(self, project, run_id, light_of_meta({}), {}, None, True,
                            [f"cannot be read: {exc.strerror or exc}"])
        doc = parse_run_json(raw)
        light = light_of_meta(doc.meta)
        try:
            text = dumps(doc.meta)
        except (ValueError, TypeError):  # nothing the checks let through; never cache what cannot be stored
            return RunEntry(self, project, run_id, light, doc.meta, None, doc.unreadable, doc.problems)
        self._update(key, meta_fp=current, unreadable=int(doc.unreadable), problems=dumps(doc.problems),
                     meta=text, **light_columns(light))
        return RunEntry(self, project, run_id, light, doc.meta, None, doc.unreadable, doc.problems)

    def listing(self, project: str | None = None) -> list[tuple[tuple[str, str], RunRow | None]]:
        """Every run folder (of ``project``), sorted, with the row the file holds for it when that
        row answers a listing as it is (:data:`~.freshness.LISTING`: ``run.json`` keeps the
        fingerprint stored with the row, it was read whole, and the recorded status is
        ``finished`` or ``failed``: a running run's status depends on its writers, a crashed
        run's last step and end on its parts). None: ask :meth:`entry`. What :meth:`entry`
        checks, in one loop of one ``stat`` per run (the listing of a store of thousands of runs
        that did not change)."""
        self.prefetch(project)
        rows, fresh = self._rows, self._fresh
        limit, run_dir = self._limit, self._run_dir
        out: list[tuple[tuple[str, str], RunRow | None]] = []
        for key in self.run_keys(project):
            row = rows.get(key)
            if row is None or key in fresh or not holds(row, LISTING, Look(run_dir(*key), limit)):
                out.append((key, None))  # changed, gone, racy or not stat-able: ask entry()
                continue
            self._meta_now[key] = row.meta_fp  # type: ignore[assignment]
            out.append((key, row))
        return out

    def entry_of(self, row: RunRow) -> RunEntry:
        """The :class:`RunEntry` of a row :meth:`listing` handed out (what :meth:`entry` gives)."""
        return RunEntry(self, row.project, row.run_id, row.light(), None, None, False, [])

    def writers(self, project: str, run_id: str) -> list[dict]:
        """The run's writer files (``_writers/*.json``), checked against the folder."""
        from ..meta import read_writer_files

        key = (project, run_id)
        look = self._look(key)
        current = self._writers_now[key] = look.writers()
        row = self._row(key)
        if row is not None and holds(row, WRITERS, look):
            text = self._detail(key, "writers")
            if text is not None:
                return json.loads(text)
        found = read_writer_files(RunPaths(self.root, project, run_id))
        try:
            text = dumps(found)
        except (ValueError, TypeError):
            return found
        if row is not None:  # only runs with a run.json have a row
            self._update(key, writers_fp=current, writers=text, writers_lost=writers_lost(found))
        return found

    def _writers_fp(self, key: tuple[str, str]) -> str | None:
        """The ``_writers`` folder's fingerprint, taken once per catalog (one command)."""
        if key not in self._writers_now:
            self._writers_now[key] = self._look(key).writers()
        return self._writers_now[key]

    def writer_losses(self, project: str, run_id: str) -> list[dict]:
        """Of the run's writer files, those that recorded ``write_errors`` (``writer_id`` and
        ``write_errors`` only): one ``stat`` of the ``_writers`` folder while it is unchanged,
        no JSON read when none did."""
        key = (project, run_id)
        unchanged = self._unchanged.get(key)
        if unchanged is not None:  # its _writers folder was checked by unchanged_row() in this command
            return unchanged.losses()
        row = self._row(key)
        if row is not None and holds(row, WRITERS, self._look(key, writers=self._writers_fp(key))):
            return row.losses()
        return [w for w in self.writers(project, run_id) if w.get("write_errors")]

    def parts(self, project: str, run_id: str) -> tuple[dict[str, list[PartRecord]], bool]:
        """Every part of the run per kind, checked against each kind folder; and whether the
        listing is trustworthy later (no folder changed within :data:`~.freshness.RACY_S`)."""
        key = (project, run_id)
        run_dir = self._run_dir(project, run_id)
        limit = self._limit
        dir_fp = stat_fingerprint(run_dir, limit)  # before the kind folders: see freshness.holds
        has_artifacts = os.path.isdir(f"{run_dir}{SEP}{ARTIFACTS_DIR}")
        row = self._row(key)
        stored: dict = {}
        if row is not None:
            text = self._detail(key, "parts")
            stored = json.loads(text) if text else {}
        out: dict[str, list[PartRecord]] = {}
        fps: dict[str, str | None] = {}
        changed = False
        for kind in KINDS:
            kdir = f"{run_dir}{SEP}{KIND_DIRS[kind]}"
            current = stat_fingerprint(kdir, limit)
            fps[kind] = current
            old_fp, old_parts = stored.get(kind) or (None, [])
            if old_fp is not None and same(old_fp, current):
                out[kind] = [PartRecord.from_json(p) for p in old_parts]
                continue
            changed = True
            known = {(r.name, r.size, r.mtime_ns): r for r in map(PartRecord.from_json, old_parts)}
            out[kind] = list_parts(Path(kdir), kind, known) if current != "-" else []
        stable = all(fps.values())
        if row is not None:
            kind_fps = "|".join([*(fps[k] or "" for k in KINDS), "+" if has_artifacts else "-"]) if stable else ""
            quick: dict[str, Any] = {"dir_fp": dir_fp or "", "kind_fps": kind_fps,
                     "kind_rows": "|".join(str(sum(p.rows or 0 for p in out[k] if not p.damaged)) for k in KINDS),
                     "damaged": sum(p.damaged for k in KINDS for p in out[k]),
                     "metrics_fp": fps[Kind.METRICS] or "", **facts_columns(metric_facts(out[Kind.METRICS]))}
            if changed:
                self._update(key, parts=dumps({k: [fps[k], [p.to_json() for p in out[k]]] for k in KINDS}),
                             parts_fp=parts_digest(out) if stable else "", **quick)
            elif row.replaced(**quick) != row:
                self._update(key, **quick)
        return out, stable

    def metric_facts(self, project: str, run_id: str) -> MetricFacts | None:
        """What the run's metrics parts say for alerts (:class:`~.part_records.MetricFacts`):
        from its row and one ``stat`` of its metrics folder while that folder keeps the
        fingerprint the facts were derived under (parts arrive and leave by renames, and are
        immutable); else from :meth:`parts`, which reads only the parts it has not seen. None
        for a folder without a run.json.

        In a team store (a replica, or a local copy of one: :data:`~trackstore.store.layout.REPLICA_MARKER`
        at its root), the facts a run's run.json carries (``replica.metric_facts``, :data:`~trackstore.store.layout.REPLICA_FACTS`: its source
        store's, as of its last replication) come first: a copy made for a listing holds no
        parts, or older ones than the replica's."""
        key = (project, run_id)
        carried = self._carried_facts(key)
        if carried is not None:
            return carried
        row = self._row(key)
        if row is not None and row.nonfinite is not None and row.metrics_fp:
            now = stat_fingerprint(f"{self._run_dir(project, run_id)}{SEP}{KIND_DIRS[Kind.METRICS]}", self._limit)
            if same(row.metrics_fp, now):
                return row.metric_facts()
        if row is None and not self.has_run_dir(project, run_id):
            return None
        if row is not None and not self._detail(key, "parts"):
            # this run's parts were never read (a first listing of the store): while its metrics
            # folder is settled, its parts' footers say what alerts need, without the row ids every
            # part would cost; the sums are kept under the folder's fingerprint, taken before the
            # listing. A folder changed in the last seconds (a live run) goes to parts(), which
            # keeps each part's record, so a poll reads only the parts that arrived since.
            mdir = f"{self._run_dir(project, run_id)}{SEP}{KIND_DIRS[Kind.METRICS]}"
            fp = stat_fingerprint(mdir, self._limit)
            if fp:
                summed = metric_facts(list_part_facts(Path(mdir)) if fp != "-" else [])
                self._update(key, metrics_fp=fp, **facts_columns(summed))
                return summed
        found, _stable = self.parts(project, run_id)
        row = self._row(key)
        facts = row.metric_facts() if row is not None else None
        return facts if facts is not None else metric_facts(found[Kind.METRICS])

    def _carried_facts(self, key: tuple[str, str]) -> MetricFacts | None:
        """The facts a replica's run.json carries for the run (see :meth:`metric_facts`); None
        outside a team store, or when its run.json carries none (replicated before 7 December
        2026) or none the catalog has read."""
        if self._replica is None:
            self._replica = os.path.isfile(f"{self.root}{SEP}{REPLICA_MARKER}")
        if not self._replica:
            return None
        text = self.meta_json(*key)
        if not text:
            return None
        try:
            return carried_facts(json.loads(text))
        except ValueError:
            return None

    def unchanged_row(self, project: str, run_id: str) -> RunRow | None:
        """The run's row as the file holds it when nothing of the run changed since the row was
        made (:data:`~.freshness.UNCHANGED`: its ``run.json``, its folder, its kind folders and
        its ``_writers`` folder keep the fingerprints stored with the row, run.json was read
        whole, its recorded status is final, and its parts digest and bytes were derived from
        exactly these). Else None (ask :meth:`entry`, :meth:`parts_summary` and the others).
        ``stat`` calls and string comparisons only: what ``status``, ``sync_state`` and the
        no-change check of a sync cost for a run that did not change, nearly all of a store."""
        key = (project, run_id)
        if key in self._unchanged:
            return self._unchanged[key]
        self._unchanged[key] = None
        row = self._rows.get(key)
        if row is None or key in self._fresh:
            return None
        look = self._look(key, meta=self._meta_now.get(key), writers=self._writers_now.get(key))
        if not holds(row, UNCHANGED, look):
            return None
        self._writers_now[key] = look.writers()
        self._unchanged[key] = row
        return row

    def unchanged_run(self, project: str, run_id: str) -> UnchangedRun | None:
        """:meth:`unchanged_row` as what ``status`` shows of the run."""
        row = self.unchanged_row(project, run_id)
        if row is None:
            return None
        return UnchangedRun(row.status or "", row.created_at, _summary_of_row(row), int(row.bytes or 0),
                            row.write_errors, row.losses())

    def parts_summary(self, project: str, run_id: str) -> PartsSummary:
        """What ``status`` and the no-change check need of a run's parts (their digest, readable
        rows per kind, damaged parts), from ``stat`` calls only while no kind folder changed
        (:data:`~.freshness.PARTS`); else from :meth:`parts`."""
        key = (project, run_id)
        unchanged = self._unchanged.get(key)  # checked already in this command
        if unchanged is not None:
            return _summary_of_row(unchanged)
        row = self._row(key)
        if row is not None:
            look = self._look(key)
            if holds(row, PARTS, look):
                folder_fp = look.folder()
                if not look.folder_same and folder_fp and row.kind_fps:
                    # every kind folder was checked after the run folder's fingerprint: keep it
                    marker = "+" if look.has_artifacts else "-"
                    self._update(key, dir_fp=folder_fp, kind_fps="|".join([*row.kind_fps.split("|")[:-1], marker]))
                return _summary_of_row(row)
        found, stable = self.parts(project, run_id)
        return PartsSummary(parts_digest(found) if stable else None,
                            {k: sum(p.rows or 0 for p in found[k] if not p.damaged) for k in KINDS},
                            sum(p.damaged for k in KINDS for p in found[k]), found)

    def run_bytes(self, project: str, run_id: str) -> int:
        """Bytes of the run folder, derived again when its run.json, its writer files or any kind
        folder changed (:data:`~.freshness.FOLDER_BYTES`)."""
        from ..files import tree_bytes

        key = (project, run_id)
        row = self._row(key)
        look = self._look(key, writers=self._writers_fp(key))
        if row is not None and holds(row, FOLDER_BYTES, look):
            return int(row.bytes)  # type: ignore[arg-type]
        if row is None:  # only runs with a run.json have a row
            return tree_bytes(RunPaths(self.root, project, run_id).dir)
        # what the bytes are counted under, taken before they are counted
        basis = bytes_basis(look.meta(), look.writers(), self.parts_summary(project, run_id).fp)
        n = tree_bytes(RunPaths(self.root, project, run_id).dir)
        self._update(key, bytes_fp=basis, bytes=n)
        return n

    def meta_fingerprint(self, project: str, run_id: str) -> str | None:
        """The ``run.json`` fingerprint the run's row was derived under (None: no row)."""
        row = self._row((project, run_id))
        return None if row is None else row.meta_fp

    # ------------------------------------------------------------------ cursors
    def _rel(self, path: Path | str) -> str:
        text = str(path)
        head = f"{self.root}{SEP}"
        return text[len(head):] if text.startswith(head) else os.path.relpath(text, self.root)

    def _folder_fp(self, folder: str) -> str | None:
        if folder not in self._folder_fps:
            self._folder_fps[folder] = stat_fingerprint(folder, self._limit)
        return self._folder_fps[folder]

    def cursor_summary(self, path: Path | str) -> tuple[str | None, dict | None]:
        """``(fingerprint now, the stored summary if it still holds)`` of a cursor file.

        Cursor files are replaced whole by a rename into their folder, so while the folder keeps
        the fingerprint it had when the file's was taken, the file keeps its own: one ``stat``
        per folder, not per file (the file is ``stat``-ed only when its folder changed)."""
        rel = self._rel(path)
        stored = self._fresh_cursors.get(rel) or self._stored_cursor(rel)
        folder_fp = self._folder_fp(os.path.dirname(str(path)))  # before the file's: see put_cursor_summary
        if stored is not None and same(stored.dir_fp, folder_fp) and stored.fp and stored.fp != "-":
            return stored.fp, stored.summary()
        current = stat_fingerprint(path, self._limit)
        if stored is not None and same(stored.fp, current):
            return current, stored.summary()
        return current, None

    def put_cursor_summary(self, path: Path | str, fp: str | None, summary: dict) -> None:
        """Remember ``summary`` (with its ``parts_fp``) for the cursor file whose fingerprint,
        taken by :meth:`cursor_summary` before the file was read, is ``fp``."""
        if fp and fp != "-":
            folder = os.path.dirname(str(path))
            try:
                row = CursorRow.from_summary(fp, self._folder_fp(folder) or "", summary)
            except (ValueError, TypeError, KeyError):  # a value the columns cannot hold: not cached
                return
            self._fresh_cursors[self._rel(path)] = row
            self._dirty = True

    # ------------------------------------------------------------------ run overviews (show)
    def overview(self, project: str, run_id: str) -> tuple[str | None, Any]:
        """``(basis, overview)``: the digest of the run's parts now (None when a kind folder changed
        within :data:`~.freshness.RACY_S` or a part is damaged: nothing may be kept), and the overview kept for
        exactly those parts (None if none was). An overview is whatever a reader derived from
        the run's part files alone (:func:`trackstore.read.overview.run_overview`); parts are
        immutable and their digest names every one (name, size, mtime), so it holds while the
        digest does. From ``stat`` calls only while no kind folder changed."""
        summary = self.parts_summary(project, run_id)
        if not summary.fp or summary.damaged:
            return None, None
        key = (project, run_id)
        kept = self._overviews.get(key)
        if kept is None and self._db is not None:
            try:  # a version-2 file written before the table existed has none: nothing kept
                kept = self._db.execute("SELECT basis, overview FROM run_overviews WHERE project = ? AND run_id = ?",
                                        key).fetchone()
            except Exception:
                kept = None
        if kept is None or kept[0] != summary.fp:
            return summary.fp, None
        try:
            return summary.fp, json.loads(kept[1])
        except ValueError:
            return summary.fp, None

    def put_overview(self, project: str, run_id: str, basis: str | None, overview: Any) -> None:
        """Keep ``overview`` for the run's parts whose digest :meth:`overview` gave as ``basis``
        (taken before the files were read; None: not kept)."""
        if basis:
            self._overviews[(project, run_id)] = (basis, dumps(overview))
            self._dirty = True

    # ------------------------------------------------------------------ part checks (views)
    def part_checks(self) -> dict[str, tuple[int, int, str | None, tuple | None]]:
        """What the views' check of each part file found (:func:`trackstore.read.part_scan.scan_parts`):
        path relative to the root -> ``(size, mtime_ns, problem, columns)``. Valid while the
        file has that size and modification time (parts are immutable), as the per-process
        caches of :mod:`trackstore.store.parts` are."""
        schemas = {d: tuple(tuple(c) for c in json.loads(cols))
                   for d, cols in self._query("SELECT digest, columns FROM part_schemas")}
        return {path: (size, mtime, problem, schemas.get(digest) if digest else None)
                for path, size, mtime, problem, digest in
                self._query("SELECT path, size, mtime_ns, problem, schema FROM part_checks")}

    def part_folders(self) -> dict[str, tuple[str, list[str]]]:
        """The part names of each kind folder the views' check listed: folder path relative to
        the root -> ``(fingerprint, names)``. Valid while the folder has that fingerprint:
        parts arrive and leave by renames, which change it, so the names and (parts being
        immutable) their :meth:`part_checks` still hold without a ``stat`` of each part."""
        if self._db is None:
            return {}
        try:  # a version-2 file written before the table existed has none
            found = self._db.execute("SELECT folder, fp, names FROM part_folders").fetchall()
        except Exception:
            return {}
        return {folder: (fp, json.loads(names)) for folder, fp, names in found}

    def put_part_checks(self, checks: dict[str, tuple], *, complete: bool,
                        folders: dict[str, tuple[str, list[str]]] | None = None) -> None:
        """Remember part checks (as :meth:`part_checks` gives them) and the listings of the
        folders they are in (as :meth:`part_folders` gives them); ``complete``: these are every
        part and folder of the store (the others are forgotten)."""
        self._part_checks = dict(checks)
        self._part_folders = dict(folders or {})
        self._part_checks_all = complete
        self._dirty = True

    def _write_part_checks(self, db: Any) -> None:
        if self._part_checks is None:
            return
        db.execute(PART_FOLDERS_TABLE)
        if self._part_checks_all:
            db.execute("DELETE FROM part_checks")
            db.execute("DELETE FROM part_schemas")
            db.execute("DELETE FROM part_folders")
        db.executemany("INSERT OR REPLACE INTO part_folders VALUES (?, ?, ?)",
                       [(folder, fp, dumps(names)) for folder, (fp, names) in (self._part_folders or {}).items()])
        rows, schemas = [], {}
        for path, (size, mtime, problem, columns) in self._part_checks.items():
            digest = None
            if columns is not None:
                text = dumps([list(c) for c in columns])
                digest = text_digest(text)
                schemas[digest] = text
            rows.append((path, size, mtime, problem, digest))
        db.executemany("INSERT OR REPLACE INTO part_schemas VALUES (?, ?)", list(schemas.items()))
        db.executemany("INSERT OR REPLACE INTO part_checks VALUES (?, ?, ?, ?, ?)", rows)

    # ------------------------------------------------------------------ writing the file
    def save(self) -> None:
        """Write what was derived again, if anything (never raises: the catalog is a cache)."""
        if not self._dirty and not self._gone():
            return
        try:
            replace_file(self.path, self.root, self._db is not None, self._fill)
        except Exception:  # a read-only store, a full disk, a race on the temp name: only time is lost
            pass
        self._dirty = False
        if self._dir_keys is not None and self._all:
            for key in self._gone():
                del self._rows[key]

    def _gone(self) -> list[tuple[str, str]]:
        """Runs the file holds whose folders are gone (known only after a full prefetch and scan)."""
        if self._dir_keys is None or not self._all:
            return []
        present = set(self._dir_keys)
        return [k for k, r in self._rows.items() if r is not None and k not in present]

    def _fill(self, db: Any, new: bool) -> None:
        """Put what this process derived again into a copy of the file (``new``: empty tables)."""
        put_run = f"INSERT OR REPLACE INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({', '.join('?' for _ in RUN_COLUMNS)})"
        details = ("project", "run_id", *DETAIL_COLUMNS)
        put_details = (f"INSERT OR REPLACE INTO run_details ({', '.join(details)}) "
                       f"VALUES ({', '.join('?' for _ in details)})")
        if new:
            # a new file keeps what this process knows that is still valid, from the old rows
            keep = [row for key, row in list(self._rows.items()) if row is not None and key not in self._fresh]
            for row in keep:
                db.execute(put_run, row)
                db.execute(put_details, [*row.key, *(self._detail(row.key, c) for c in DETAIL_COLUMNS)])
        db.executemany(put_run, list(self._fresh.values()))
        db.executemany(put_details, [[*key, *self._fresh_details[key]] for key in self._fresh])
        gone = self._gone()
        db.executemany("DELETE FROM runs WHERE project = ? AND run_id = ?", gone)
        db.executemany("DELETE FROM run_details WHERE project = ? AND run_id = ?", gone)
        self._write_part_checks(db)
        db.execute(OVERVIEWS_TABLE)
        db.executemany("INSERT OR REPLACE INTO run_overviews VALUES (?, ?, ?, ?)",
                       [(*key, basis, text) for key, (basis, text) in self._overviews.items()])
        db.executemany("DELETE FROM run_overviews WHERE project = ? AND run_id = ?", gone)
        db.executemany(f"INSERT OR REPLACE INTO cursors ({', '.join(CURSOR_COLUMNS)}) "
                       f"VALUES ({', '.join('?' for _ in CURSOR_COLUMNS)})",
                       [(path, *row) for path, row in self._fresh_cursors.items()])

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def open_catalog(root: str | os.PathLike) -> Catalog:
    """The catalog of the store at ``root`` (an empty one when the file is missing or unusable)."""
    return Catalog(Path(root))
