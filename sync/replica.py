"""The ``store`` target: replicate runs into a team store on S3-compatible storage or a shared path.

``trackstore sync --to store --uri s3://BUCKET/PREFIX`` (or ``--uri /shared/team``) makes the
destination a *replica*: itself a valid trackstore store, read by trackstore (``--root``) and
by plain DuckDB, Spark, Polars, Ray Data or Trino globs (docs/team-store.md; the layout is
docs/format.md section 12). The engine is the same as every target's: exactly once, resumable,
``--jobs``, from cron. What this adapter promises:

* **Parts are written once, create-only, and never rewritten.** A batch of one kind becomes
  one part per writer, ``<kind>/part-<writer>-<first seq>-<last seq>.parquet``, written with
  :meth:`~trackstore.store.objects.ObjectFolder.put_new`; each row (``writer``, ``seq``) is in
  exactly one part of the replica. A plain glob over ``project=*/run=*/<kind>/*.parquet``
  therefore never counts a row twice nor meets a half-written file, whatever the source store
  does meanwhile (compaction rewrites local parts; the replica never sees it).
* **A local part goes as it is** when none of its rows is at the replica yet and it is its
  writer's only such part (a finished or compacted run; :attr:`~.adapter.Capabilities.whole_parts`):
  its bytes, never decoded nor encoded again, under the name of its writer and rows' range. A
  live run's many small parts go merged, as rows. A part some of whose rows
  are here already (a lost ledger met a replica, a compaction merged parts replicated one by
  one) goes as its missing rows, encoded anew.
* **Reconcile reads the replica.** The rows of a batch in doubt (SIGKILL, a connection cut
  before or after the request arrived, a lost cursor) that a replica part already holds are
  not sent again: the run's parts of that kind are read (``writer`` and ``seq``). A create-only
  write that meets its own name holds the same rows (the name is the rows' range) and counts as
  done; a part of that name with other rows is refused, never overwritten.
* **Artifacts**: a version's files are copied (create-only) before the manifest rows that name
  them, so a reader never finds a manifest row whose file is missing.
* **run.json** is the source's, with the status as readers there see it, and a ``replica``
  object naming the source store (:func:`trackstore.store.identity.store_identity`: id, host,
  root), when it was replicated, the run's ``metric_facts`` as the source's catalog keeps
  them (non-finite values, newest log time, usual interval, largest step) and its ``writers``'
  states (the run page's status history; writer files are not replicated): a listing of the
  team store reads its alerts there, not from every metrics part
  (:meth:`trackstore.store.catalog.Catalog.metric_facts`). It is replaced atomically (S3 PUT;
  rename on a path), in the pass that finds it saying something else.
* **Two stores, one run id**: a run whose replica ``run.json`` names another source store is
  refused with a one-line error naming both (a copied store, or a run carried by a bundle into
  a second store): never merged silently.
* **The destination** is checked before a pass (:meth:`check_online`): an unreachable endpoint
  is exit 7, missing credentials exit 2, access denied, a missing bucket and a read-only or full
  filesystem exit 10 (:class:`~trackstore.errors.TargetRefusedError`); a folder that holds
  files and is not a replica (a mistyped path) is refused before anything is written. The
  first pass writes ``_replica.json`` at its root.
* Credentials come from the standard AWS variables or ``AWS_PROFILE``
  (:mod:`trackstore.store.objects`); the destination string has none.
"""

from __future__ import annotations

import io
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from trackstore.errors import PermanentError, UsageError
from trackstore.records.artifacts import ALIAS_EVENT, REFERENCE
from trackstore.store import objects
from trackstore.store.clock import iso
from trackstore.store.identity import store_identity
from trackstore.store.layout import (
    MEDIA_DIR,
    PART_PREFIX,
    PART_SUFFIX,
    REPLICA_FACTS,
    REPLICA_FORMAT,
    REPLICA_MARKER,
    REPLICA_VERSION,
    REPLICA_WRITERS,
    RUN_FILE,
    kind_folder,
    run_key,
)
from trackstore.store.media import parse_media_path
from trackstore.store.meta import replica_field, writer_summaries
from trackstore.store.ranges import RangeSet
from trackstore.store.vocab import KINDS, Kind, RunStatus

from .adapter import Adapter, Capabilities, Opened, SendResult, WholePart

# an image file a sample row refers to, inside its JSON text (records.images.Image.ref)
_MEDIA_REF = re.compile(MEDIA_DIR + r"/[0-9a-f]{2}/[0-9a-f]{64}\.(?:png|jpg)")


def part_key(project: str, run_id: str, kind: str, writer: str, first: int, last: int) -> str:
    return f"{run_key(project, run_id)}{kind_folder(kind)}/{PART_PREFIX}{writer}-{first:012d}-{last:012d}{PART_SUFFIX}"


def part_bytes(table, kind: str) -> bytes:
    """``table`` as a part file of ``kind``, encoded in memory by the store's own encoder."""
    from trackstore.store import parts, schema

    if kind != Kind.METRICS:
        table = table.select(schema.SCHEMAS[kind].names).cast(schema.with_metadata(schema.SCHEMAS[kind], kind))
    return parts.part_bytes(table, kind)


def row_ids_of(data: bytes) -> RangeSet:
    """The row ids (``writer``, ``seq``) of a part's bytes."""
    import pyarrow.parquet as pq

    t = pq.ParquetFile(io.BytesIO(data)).read(columns=["writer", "seq"])
    ids = RangeSet()
    ids.add_table(t)
    return ids


def _signature(meta: dict) -> str:
    """What a replica run.json says, the time of its replication aside (compact JSON: the fast
    encoder)."""
    meta = dict(meta)
    replica = dict(meta.get("replica") or {})
    replica.pop("replicated_at", None)
    meta["replica"] = replica
    return json.dumps(meta, sort_keys=True, default=str, separators=(",", ":"))


class ReplicaAdapter(Adapter):
    """Replication into a team store (see the module docstring)."""

    name = "store"
    CAPABILITIES = Capabilities(
        kinds=KINDS,
        # big batches: one part per writer and kind per pass keeps the replica's files few
        batch_sizes={k: 1_000_000 for k in KINDS} | {Kind.ARTIFACTS: 10_000},
        default_jobs=8,
        # a local part none of whose rows is here yet is stored as it is: no decoding, no encoding
        # (artifacts go as rows: their files are copied before the manifest rows naming them)
        whole_parts=(Kind.METRICS, Kind.SAMPLES, Kind.SPANS, Kind.HISTOGRAMS),
        # reconcile reads the run's parts of a kind: a crash anywhere in a run's pass costs the
        # same reading whether one batch or all of them were in doubt, so one mark covers them
        doubt_per_run=True,
        # a run's parts go up at once: an object store answers many requests side by side (a
        # round trip each), and a server given a burst spends less per request than one given
        # a trickle (measured: docs/performance.md, "Team store")
        concurrent_sends=16,
        # decoding, merging and encoding parts is the replication's CPU: workers in processes
        processes=True,
    )

    def __init__(self, options):
        super().__init__(options)
        if not options.uri:
            raise UsageError("sync --to store needs --uri: s3://BUCKET/PREFIX or a shared path")
        self.folder = objects.open_location(options.uri, timeout=options.timeout)
        if isinstance(self.folder, objects.PathFolder) and options.store_root:
            src = Path(options.store_root).resolve()
            dst = self.folder.path.resolve()
            if dst == src or src in dst.parents or dst in src.parents:
                raise UsageError(f"--uri {options.uri} overlaps the store being synced ({src}): "
                                 "a replica needs a folder of its own")
        self._lock = threading.Lock()
        self._marked = False
        self._source: dict | None = None
        self._runs: dict[str, Any] = {}  # remote id -> RunPaths (artifact files are read from there)
        self._written: dict[str, str] = {}  # run.json key -> what it says (see _signature)

    # ------------------------------------------------------------------ the destination
    def destination(self) -> str:
        return self.folder.url

    def check_online(self) -> None:
        objects.check_reachable(self.folder)
        self._ensure_replica()

    def _ensure_replica(self) -> None:
        """Make sure the folder is a replica (or empty, then mark it one); once per adapter."""
        with self._lock:
            if self._marked:
                return
            marker = self.folder.get(REPLICA_MARKER)
            if marker is None:
                stray = next((o.key for o in self.folder.listing() if not o.key.startswith(".")), None)
                if stray is None:
                    body = {"format": REPLICA_FORMAT, "version": REPLICA_VERSION, "created_at": iso(time.time())}
                    if not self.folder.put_new(REPLICA_MARKER, json.dumps(body).encode()):
                        marker = self.folder.get(REPLICA_MARKER)  # another worker or process was first
                else:
                    # another worker (sync() with jobs > 1 makes one adapter each) or process may
                    # have marked the empty folder and begun writing since the first look
                    marker = self.folder.get(REPLICA_MARKER)
                    if marker is None:
                        raise UsageError(f"{self.folder.url} holds files ({stray}) and is not a trackstore replica "
                                         f"(no {REPLICA_MARKER}): give sync --to store an empty folder or a replica")
            if marker is not None:
                try:
                    ok = json.loads(marker).get("format") == REPLICA_FORMAT
                except (ValueError, AttributeError):
                    ok = False
                if not ok:
                    raise UsageError(f"{self.folder.url}/{REPLICA_MARKER} is not a trackstore replica marker")
            self._marked = True

    def _source_store(self) -> dict:
        if self._source is None:
            if not self.options.store_root:
                raise UsageError("sync --to store needs the source store's root")
            ident = store_identity(self.options.store_root)
            self._source = {"store_id": ident["store_id"], "host": ident.get("host"), "root": ident.get("root")}
        return self._source

    # ------------------------------------------------------------------ runs
    def open_run(self, run, cursor) -> str:
        self._ensure_replica()
        base = run_key(run.project, run.run_id)
        rid = f"{run.project}/{run.run_id}"
        with self._lock:
            self._runs[rid] = run.paths
        had = cursor.remote_id is not None
        # a run this destination never acknowledged is most often new there: its run.json is
        # written create-only, one request; only when that name exists is it read and checked
        if not had and self._put_run_json(run, run.status, create_only=True):
            cursor.remote_id = rid
            return Opened.CREATED
        existing = self._read_json(base + RUN_FILE)
        if existing is not None:
            self._check_same_source(run, existing)
        cursor.remote_id = rid
        if existing is None:
            self._put_run_json(run, run.status)
            return Opened.REPLACED if had else Opened.CREATED
        with self._lock:
            self._written[base + RUN_FILE] = _signature(existing)
        return Opened.FOUND

    def _check_same_source(self, run, existing: dict) -> None:
        theirs = replica_field(existing, "source")
        theirs = theirs if isinstance(theirs, dict) else {}
        mine = self._source_store()
        if theirs.get("store_id") and theirs["store_id"] != mine["store_id"]:
            raise PermanentError(
                f"{run.project}/{run.run_id} at {self.folder.url} was replicated from another store "
                f"({theirs.get('host')}:{theirs.get('root')}); this store ({mine['host']}:{mine['root']}) holds "
                "the same run id (a copied store, or a run imported from a bundle): not merged. "
                f"Keep one copy: delete the run from one store, or the replica's {run_key(run.project, run.run_id)} "
                "(docs/team-store.md)")

    def sync_metadata(self, run, cursor) -> list[str]:
        self._put_run_json(run, run.status)
        return []

    def finish_run(self, run, cursor, status: str) -> None:
        self._put_run_json(run, status)

    def _put_run_json(self, run, status: str, *, create_only: bool = False) -> bool:
        """Write the run's replica run.json, unless it already says this (the time of the
        replication aside): one request per run and pass, not one per engine call.
        ``create_only``: only if the replica has none (False, nothing written, when it has)."""
        key = run_key(run.project, run.run_id) + RUN_FILE
        meta = dict(run.meta)
        meta["status"] = str(status)
        if status != RunStatus.RUNNING and not meta.get("ended_at"):
            meta["ended_at"] = run.ended_at  # a crashed run: its last sign of life, as readers here see it
        meta["replica"] = {"source": self._source_store()}
        facts = run.metric_facts()  # what a listing of the team store shows (alerts, a live run's step)
        if facts is not None:
            meta["replica"][REPLICA_FACTS] = facts.to_json()
        if run.writers:  # each attempt's status, end and error, as its run page shows them
            meta["replica"][REPLICA_WRITERS] = writer_summaries(run.writers)
        signature = _signature(meta)
        with self._lock:
            if not create_only and self._written.get(key) == signature:
                return True
        meta["replica"]["replicated_at"] = iso(time.time())
        body = json.dumps(meta, ensure_ascii=False, allow_nan=True, default=str, separators=(",", ":")).encode()
        if create_only:
            if not self.folder.put_new(key, body):
                return False
        else:
            self.folder.put(key, body)
        with self._lock:
            self._written[key] = signature
        return True

    def _read_json(self, key: str) -> dict | None:
        data = self.folder.get(key)
        if data is None:
            return None
        try:
            found = json.loads(data)
        except ValueError:
            return {}
        return found if isinstance(found, dict) else {}

    # ------------------------------------------------------------------ rows
    def send(self, kind: str, rows, cursor, batch_id: str) -> SendResult:
        import pyarrow.compute as pc

        project, _, run_id = cursor.remote_id.partition("/")
        if kind in (Kind.IMAGES, Kind.SAMPLES):  # the image files the rows name, before the rows
            self._copy_media_files(project, run_id, kind, rows, cursor)
        if isinstance(rows, WholePart):
            writers = rows.ids.writers()
            if len(writers) != 1:  # a part of several writers (none is made so): as rows
                return self.send(kind, rows.rows(kind), cursor, batch_id)
            self._put_part(project, run_id, kind, writers[0], rows.ids, rows.data)
            return SendResult()
        if kind == Kind.ARTIFACTS:
            self._copy_artifact_files(project, run_id, rows, cursor)
        writers = rows.column("writer").unique().to_pylist()
        for writer in writers:
            part = rows.filter(pc.equal(rows.column("writer"), writer)) if len(writers) > 1 else rows
            mine = RangeSet()
            mine.add_table(part)
            self._put_part(project, run_id, kind, writer, mine, part_bytes(part, kind))
        return SendResult()

    def _put_part(self, project: str, run_id: str, kind: str, writer: str, ids: RangeSet, data: bytes) -> None:
        """Write one part of one writer's rows ``ids``, create-only, named by their range. A part
        of that name already there holds the same rows (a retry of a write that arrived)."""
        spans = ids.to_json()[writer]
        key = part_key(project, run_id, kind, writer, spans[0][0], spans[-1][1])
        if not self.folder.put_new(key, data):
            there = self.folder.get(key)
            if there is None or row_ids_of(there) != ids:
                raise PermanentError(f"{self.folder.url}/{key} exists with other rows: two stores share "
                                     f"writer {writer!r}? The replica keeps what it has")

    def _copy_artifact_files(self, project: str, run_id: str, rows, cursor) -> None:
        paths = self._runs.get(cursor.remote_id)
        if paths is None:
            raise PermanentError(f"{cursor.remote_id}: artifact rows before the run was opened")
        base = run_key(project, run_id)
        # a reference's files stay where the trainer wrote them (the replica keeps its rows, as the
        # source store does), and an alias move names no file
        copies = [r["path"] for r in rows.select(["path", "storage", "event"]).to_pylist()
                  if r["storage"] != REFERENCE and r["event"] != ALIAS_EVENT]
        for rel in dict.fromkeys(copies):
            src = Path(paths.dir) / rel
            try:
                data = src.read_bytes()
            except FileNotFoundError:
                raise PermanentError(f"{src}: an artifact file named by the manifest is missing") from None
            self.folder.put_new(base + rel, data)  # exists already: the same immutable file

    def _copy_media_files(self, project: str, run_id: str, kind: str, rows, cursor) -> None:
        """Copy the image files (``media/...``, create-only: they never change) that image rows
        name, or that sample rows refer to, before the rows that name them."""
        paths = self._runs.get(cursor.remote_id)
        if paths is None or not (Path(paths.dir) / MEDIA_DIR).is_dir():
            return  # a run without images (the common case) costs one stat
        table = rows.rows(kind) if isinstance(rows, WholePart) else rows
        if kind == Kind.IMAGES:
            named = table.column("path").to_pylist()
        else:
            named = [m.group(0) for col in ("input", "output", "extra") for text in table.column(col).to_pylist()
                     if text and MEDIA_DIR in text for m in _MEDIA_REF.finditer(text)]
        base = run_key(project, run_id)
        for rel in dict.fromkeys(named):
            if parse_media_path(rel) is None:
                continue
            try:
                data = (Path(paths.dir) / rel).read_bytes()
            except FileNotFoundError:
                continue  # a row whose file was never written (a disk failure at log time): nothing to copy
            self.folder.put_new(base + rel, data)  # exists already: the same immutable file

    def reconcile(self, kind: str, rows, cursor, batch_id: str):
        import pyarrow.compute as pc

        project, _, run_id = cursor.remote_id.partition("/")
        held = self.held_rows(project, run_id, kind)
        if not held:
            return rows
        if isinstance(rows, WholePart):
            if not held.overlap(rows.ids):
                return rows
            rows = rows.rows(kind)  # some of it is here: the rest as rows
        return rows.filter(pc.invert(held.mask(rows)))

    def held_rows(self, project: str, run_id: str, kind: str) -> RangeSet:
        """The row ids the replica holds for one run's kind (read from its parts)."""
        held = RangeSet()
        for data in self._parts(project, run_id, kind):
            held.update(row_ids_of(data))
        return held

    def verify(self, run, cursor) -> dict[str, int]:
        import pyarrow.parquet as pq

        counts: dict[str, int] = {}
        for kind in KINDS:
            n = sum(pq.ParquetFile(io.BytesIO(data)).metadata.num_rows
                    for data in self._parts(run.project, run.run_id, kind))
            if n:
                counts[kind] = n
        return counts

    def _parts(self, project: str, run_id: str, kind: str):
        """The bytes of each part the replica holds for one run's kind."""
        prefix = f"{run_key(project, run_id)}{kind_folder(kind)}/"
        for obj in self.folder.listing(prefix):
            name = obj.key[len(prefix):]
            if "/" in name or not name.endswith(PART_SUFFIX) or name.startswith("."):
                continue
            data = self.folder.get(obj.key)
            if data is not None:
                yield data

    def view(self, cursor) -> list[str]:
        uri = self.options.uri or ""
        where = uri if objects.is_remote(uri) else os.fspath(Path(uri).expanduser().absolute())
        return [f"trackstore runs --root {where}"]


__all__ = ["ReplicaAdapter"]
