"""Weights & Biases targets: ``trackstore sync --to wandb`` and ``--to wandb-offline``.

Where: the wandb client's own variables keep their meaning. ``WANDB_API_KEY`` (never read,
printed or stored by trackstore: the client reads it), ``WANDB_BASE_URL`` or ``--uri``,
``WANDB_ENTITY`` or ``--entity``, the trackstore project or ``--remote-project``, proxies from
the standard variables or ``--proxy`` (``wandb.Settings(https_proxy=...)``). ``WANDB_MODE`` or
``--mode`` picks online/offline. Run directories (and the transaction logs this adapter reads
back) go under ``--logdir``, else ``$WANDB_DIR``, else ``<store root>/_wandb``; the run
folders are ``<dir>/wandb/{run,offline-run}-<time>-<id>``. ``--to wandb-offline`` is the same
code with the mode forced to offline: the folders are the ones ``wandb sync`` uploads later.

Mapping (the full table, with what is lost: docs/sync.md § Weights & Biases and docs/sync-wandb.md):

* run -> one wandb run whose id is ``ts`` + 16 hex digits of sha1(project, run id), opened with
  ``resume="allow"``: every sync continues the same run. Name, notes, tags, group, job type;
  config -> ``config`` (``allow_val_change``); the user summary, the original status, exit code,
  start and end times -> ``summary`` after the history; the exit code -> the run state
  (0 finished, else failed; a crashed run is failed with ``trackstore/status = crashed``).
* metrics, histograms and samples share wandb's single, strictly increasing step axis: the
  adapter declares them :attr:`~.adapter.Capabilities.merge_steps`, so the engine sends them
  together, whole steps in step order (a live run's newest step held back until it stops
  growing), and each step becomes one ``run.log(row, step=s, commit=True)`` with every key of
  the step: histograms as ``wandb.Histogram(np_histogram=(counts, edges))``, samples as one
  ``wandb.Table`` per (step, split) under ``samples/<split>`` (its history entry without wandb's
  ``ncols``/``nrows``, which viewers chart as metrics: :mod:`.wandb_tables`), and ``_timestamp``
  set to the original wall time of the step (its latest point). Images (step-merged too) are
  ``wandb.Image(path, caption=)`` of the stored file, a list of them when several share a key
  and step; wandb copies the file, so its bytes are the stored ones.
* spans -> an artifact ``trajectories-<id>`` (type ``trajectories``) holding a ``wandb.Table``
  with one row per trajectory and its spans ("turns") as JSON; one version per batch of
  complete trajectories (wandb content-addresses versions, so a resend adds none). A trajectory
  waits while its root span is open in a live run; one whose root span was never written (the
  run was killed mid-trajectory) waits while the run is live and is reported once it has ended.
* artifacts -> ``wandb.Artifact(name, type, metadata)`` with the manifest's files, aliases plus
  ``step-<N>``; identical content is the same wandb version. A reference's files are checked
  (size, sha256) and added with ``policy="immutable"`` (read where they are, not copied into
  wandb's cache); one that vanished or changed is skipped. An alias moved later is replayed
  the way wandb moves one: the version's content logged again with that alias (wandb keeps one
  version per digest and gives it the alias). ``latest`` is wandb's own and goes to whatever
  was logged last, so after such a re-log the version that holds ``latest`` as replayed so far
  (kept in the cursor; else the newest) is logged once more, last.

What wandb cannot take is counted and reported (``SendResult.skip``), never dropped silently:
a point at a step the wandb run has already committed (logged late, after its step was
synced), a second value for one key at one step (wandb keeps the last), null values, sample
rows over wandb's 10 000-row table limit (an evenly spaced subset by ``sample_index`` is kept),
the spans of a trajectory without a root span once its run has ended
(:mod:`trackstore.sync.trajectories`).

Acknowledgement (exactly once): wandb-core buffers records and writes the run's ``.wandb``
transaction log only every ``x_transaction_log_flush_interval`` seconds (0.1 s here). After
logging a batch the adapter writes a marker (``summary["trackstore/batch"] = <batch id>``) and
returns only once the marker is in the file: the file is written in order, so the whole batch
is on disk. ``reconcile`` reads every transaction log of the run: a batch whose marker is there
is complete; otherwise exactly the steps and keys the logs hold are treated as delivered. The
last durable step is kept in ``cursor.remote["last_step"]``: offline mode ignores resume (each
session writes a new offline-run folder for the same id, with ``starting_step`` 0), so this
cursor, not the client, says where to continue. Online, the server's ``run.starting_step`` is
compared with it (see docs/sync-wandb.md for what a SIGKILL can lose before upload).

Client version: wandb >= 0.31 (:data:`MIN_WANDB`, the version the tests run; the barrier relies
on ``x_transaction_log_flush_interval`` and the tests read back with ``wandb leet``). An older
client is refused when the target is created, before anything is sent (a usage error, exit 2).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from trackstore.errors import PermanentError, RetryableError
from trackstore.store.layout import target_dir
from trackstore.store.redact import redact_text, redact_url
from trackstore.store.vocab import REPLAY_ORDER, Kind, RunStatus

from .adapter import (
    IMAGE_MISSING,
    STEPS,
    Adapter,
    Capabilities,
    MetricKeys,
    Opened,
    SendResult,
    StepBatch,
    TargetOptions,
    image_file,
    require_client,
)
from .http import classify, probe
from .keys import rename_reason, renamed, wandb_key
from .trajectories import ready_trajectories
from .wandb_tables import TURN_COLUMNS, history_table, table_rows, turn_rows

STEP_KINDS = (Kind.METRICS, Kind.HISTOGRAMS, Kind.SAMPLES, Kind.IMAGES)
MARKER = "trackstore/batch"
MAX_TABLE_ROWS = 10_000          # wandb.Table.MAX_ROWS for tables logged to history
MAX_BINS = 512                   # wandb.Histogram limit for np_histogram
FLUSH_INTERVAL = 0.1             # seconds between wandb-core writes of the transaction log
DEFAULT_BASE_URL = "https://api.wandb.ai"
#: the oldest wandb client this target runs with (what the tests run; pyproject's floor)
MIN_WANDB = (0, 31)

LATE = "point at a step wandb already committed (logged after that step was synced)"
SECOND = "second value for one key at one step (wandb keeps the last)"
NULL = "metric value is null"
OVER_TABLE = f"sample rows over wandb's {MAX_TABLE_ROWS}-row table limit (evenly spaced subset kept)"

_BAD_PROJECT = re.compile(r"[/\\#?%:]")
_ART_NAME = re.compile(r"[^A-Za-z0-9_.-]")
_TIMESPEC = re.compile(r"\d{8}_\d{6}")


def wandb_run_id(project: str, run_id: str) -> str:
    """The wandb run id of a trackstore run: stable, and free of the characters wandb forbids."""
    return "ts" + hashlib.sha1(f"{project}\0{run_id}".encode()).hexdigest()[:16]


def artifact_name(name: str) -> str:
    """Artifact names may hold letters, digits, ``-``, ``_`` and ``.`` only."""
    return _ART_NAME.sub("-", name)[:128] or "artifact"


def rebin(counts: list[float], edges: list[float], limit: int = MAX_BINS) -> tuple[list[float], list[float]]:
    """Merge adjacent bins (counts summed) until at most ``limit`` remain; totals are kept."""
    n = len(counts)
    if n <= limit:
        return counts, edges
    k = math.ceil(n / limit)
    new_counts = [sum(counts[i:i + k]) for i in range(0, n, k)]
    new_edges = [edges[i] for i in range(0, n, k)] + [edges[-1]]
    return new_counts, new_edges


def sample_down(rows: list[dict], limit: int = MAX_TABLE_ROWS) -> list[dict]:
    """The documented rule: sort by ``sample_index`` and keep ``limit`` evenly spaced rows."""
    if len(rows) <= limit:
        return rows
    rows = sorted(rows, key=lambda r: (r.get("sample_index") or 0, r["writer"], r["seq"]))
    n = len(rows)
    return [rows[(i * n) // limit] for i in range(limit)]


def _secret_free(text: str) -> str:
    key = os.environ.get("WANDB_API_KEY")
    if key:
        text = text.replace(key, "***")
    return redact_text(text)


def _seconds(ts) -> float:
    """A pyarrow/py timestamp as float seconds since the epoch."""
    return ts.timestamp() if hasattr(ts, "timestamp") else float(ts) / 1e6


class WandbAdapter(Adapter):
    name = "wandb"
    CAPABILITIES = Capabilities(
        kinds=REPLAY_ORDER,
        batch_sizes={"steps": 5000, Kind.SPANS: 200, Kind.ARTIFACTS: 20},
        # wandb takes one row per step: the engine sends these kinds together, whole steps
        merge_steps=STEP_KINDS,
        # a trajectory or an artifact version never straddles two batches
        group_columns={Kind.SPANS: "trace_id", Kind.ARTIFACTS: "digest"},
        whole_trajectories=True,
        reconcile_before_retry=False,  # send stages each batch id: a retry waits for it, never logs it twice
        max_jobs=1, why_max_jobs="wandb.init keeps one run per process")
    forced_mode: str | None = None

    def __init__(self, options: TargetOptions):
        super().__init__(options)
        require_client("wandb", MIN_WANDB, "wandb")
        mode = (self.forced_mode or options.mode or os.environ.get("WANDB_MODE") or "online").lower()
        self.mode = {"dryrun": "offline", "run": "online"}.get(mode, mode)
        if self.mode not in ("online", "offline"):
            raise PermanentError(f"wandb mode {mode!r} cannot sync; use online or offline")
        base = options.logdir or os.environ.get("WANDB_DIR") or str(target_dir(options.store_root or ".", "wandb"))
        self.root_dir = Path(base).expanduser().absolute()
        self.base_url = (options.uri or os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self.entity = options.entity or os.environ.get("WANDB_ENTITY") or None
        self.proxy = options.proxy or os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy") or None
        self._wb = None                    # the open wandb run
        self._reader = None                # LogReader of its transaction log
        self._markers: set[str] = set()
        self._last_step = -1
        self._planned_last = -1  # what a --dry-run judges late points by (prepare)
        self._info = None
        self._staged: dict[str, tuple] = {}  # batch id -> logged, awaiting the barrier (a retry only waits)
        self._open_notes: list[str] = []

    # ------------------------------------------------------------------ plumbing
    def destination(self) -> str:
        where = f"{self.entity or '(default entity)'}/{self.options.project or '(trackstore project)'}"
        if self.mode == "offline":
            return f"offline:{self.root_dir / 'wandb'} {where}"
        return f"{redact_url(self.base_url)}/{where}"

    @property
    def capabilities(self) -> Capabilities:
        """Offline, the run folders are written for ``wandb sync`` to upload later: staging."""
        return replace(self.CAPABILITIES, staging=self.mode == "offline")

    def upload_command(self, cursor) -> str | None:
        """``wandb sync <dir>/wandb``: wandb's sync uploads every offline run folder there that it
        has not uploaded yet (it marks the ones it did), the folders of one run in order."""
        import shlex

        return f"wandb sync {shlex.quote(str(self.root_dir / 'wandb'))}" if self.capabilities.staging else None

    def check_online(self) -> None:
        if self.mode == "offline":
            return
        probe(self.base_url + "/healthz", what=f"wandb at {redact_url(self.base_url)}", timeout=self.options.timeout,
              proxy=self.proxy)

    def _import(self):
        # quiet before the first import: our CLI output is trackstore's, not the client's
        os.environ.setdefault("WANDB_SILENT", "true")
        os.environ.setdefault("WANDB_CONSOLE", "off")
        import logging

        logging.getLogger("wandb").setLevel(logging.ERROR)
        import wandb

        return wandb

    def _settings(self, wandb):
        s: dict[str, Any] = dict(console="off", quiet=True, silent=True, x_disable_stats=True,
                                 x_disable_machine_info=True, disable_git=True, save_code=False,
                                 x_save_requirements=False, disable_job_creation=True,
                                 x_transaction_log_flush_interval=FLUSH_INTERVAL, mode=self.mode,
                                 init_timeout=max(90.0, self.options.timeout))
        if self.mode == "online":
            s.update(base_url=self.base_url, x_graphql_timeout_seconds=self.options.timeout)
            if self.proxy:
                s.update(https_proxy=self.proxy, http_proxy=self.proxy)
        return wandb.Settings(**s)

    def _wrap(self, exc: Exception, what: str) -> Exception:
        msg = _secret_free(f"wandb {what}: {exc}")
        text = str(exc).lower()
        if "previously created and deleted" in text or "409" in text:
            return PermanentError(msg + " (a deleted wandb run id stays reserved for days; restore the run or use "
                                  "another --remote-project)")
        return classify(exc, msg)

    # ------------------------------------------------------------------ runs
    def _finish_open(self, exit_code: int = 0) -> None:
        """Finish the open wandb run: its transaction log is complete when this returns."""
        wb, self._wb = self._wb, None
        if wb is not None:
            try:
                if MARKER in wb.summary.keys():
                    del wb.summary[MARKER]  # acknowledgement bookkeeping, not the user's summary
                wb.finish(exit_code=exit_code)
            except Exception as exc:
                raise self._wrap(exc, "finish") from exc

    def open_run(self, run, cursor) -> str:
        known = bool(cursor.remote.get("id"))
        self._finish_open()
        wandb = self._import()
        meta = run.meta
        project = self.options.project or run.project
        if len(project) > 128 or _BAD_PROJECT.search(project):
            raise PermanentError(f"{project!r} is not a valid wandb project name (max 128 characters, none of "
                                 f"/ \\ # ? % :); pass --remote-project")
        rid = wandb_run_id(run.project, run.run_id)
        self.root_dir.mkdir(parents=True, exist_ok=True)
        _avoid_same_second(self.root_dir / "wandb", rid)
        try:
            wb = wandb.init(project=project, entity=self.entity, id=rid, resume="allow", name=run.name,
                            notes=meta.get("notes") or None, tags=[str(t)[:64] for t in meta.get("tags") or []] or None,
                            group=meta.get("group") or None, job_type=meta.get("job_type") or None,
                            config=meta.get("config") or {}, dir=str(self.root_dir), settings=self._settings(wandb))
        except Exception as exc:
            raise self._wrap(exc, f"init of run {rid}") from exc
        from .wandb_log import LogReader

        self._wb = wb
        self._info = run
        run_dir = Path(wb.dir).parent
        self._reader = LogReader(run_dir / f"run-{rid}.wandb")
        self._markers = set()
        self._staged = {}
        dirs = [d for d in cursor.remote.get("dirs", []) if d != str(run_dir)] + [str(run_dir)]
        cursor.remote_id = rid
        cursor.remote.update(id=rid, project=project, entity=getattr(wb, "entity", None) or self.entity,
                             mode=self.mode, dirs=dirs[-1000:])
        self._open_notes = []
        durable = int(cursor.remote.get("last_step", -1))
        self._last_step = durable
        if self.mode == "online" and getattr(wb, "resumed", False):
            server = int(getattr(wb, "starting_step", 0) or 0) - 1
            if server < durable:
                self._open_notes.append(f"wandb holds steps up to {server} but steps up to {durable} were written to the "
                                    f"local transaction log; the rest was lost before upload: run `wandb sync "
                                    f"--include-online {run_dir.parent}` to upload it")
            self._last_step = max(durable, server)
        # offline logs are found through the cursor: a cursor without them cannot see earlier ones
        return Opened.FOUND if known else Opened.CREATED

    def sync_metadata(self, run, cursor) -> list[str]:
        wb = self._wb
        meta = run.meta
        notes, self._open_notes = self._open_notes, []
        try:
            wb.config.update(meta.get("config") or {}, allow_val_change=True)
            if meta.get("notes"):
                wb.notes = str(meta["notes"])
            tags = tuple(str(t)[:64] for t in meta.get("tags") or [])
            if tags and tuple(wb.tags or ()) != tags:
                wb.tags = tags
            if wb.name != run.name:
                wb.name = run.name
        except Exception as exc:
            raise self._wrap(exc, "config/tags") from exc
        if any(len(str(t)) > 64 for t in meta.get("tags") or []):
            notes.append("tags longer than 64 characters were cut for wandb")
        return notes

    # ------------------------------------------------------------------ acknowledgement
    def _barrier(self, batch_id: str) -> None:
        """Write the batch marker and wait until wandb-core has written it to the run's log."""
        self._wb.summary[MARKER] = batch_id
        deadline = time.monotonic() + max(self.options.timeout, 5.0)
        while batch_id not in self._markers:
            for rec in self._reader.records():
                if rec.WhichOneof("record_type") == "summary":
                    for item in rec.summary.update:
                        if list(item.nested_key or [item.key]) == [MARKER]:
                            self._markers.add(json.loads(item.value_json))
            if batch_id in self._markers:
                return
            if time.monotonic() > deadline:
                raise RetryableError(f"wandb-core did not write batch {batch_id} to {self._reader.path} within "
                                     f"{max(self.options.timeout, 5.0):.0f}s")
            time.sleep(FLUSH_INTERVAL / 2)

    # ------------------------------------------------------------------ records
    def send(self, kind: str, rows, cursor, batch_id: str) -> SendResult:
        if kind == STEPS:
            result = self._send_steps(rows, cursor, batch_id)
            for k in (Kind.METRICS, Kind.HISTOGRAMS):
                table = rows.tables.get(k)
                if table is not None and table.num_rows:
                    for key, wk in renamed("wandb", table.column("key").unique().to_pylist()).items():
                        result.skipped[rename_reason("wandb", key, wk)] = 0
            return result
        if kind == Kind.SPANS:
            return self._send_spans(rows, cursor, batch_id)
        if kind == Kind.ARTIFACTS:
            return self._send_artifacts(rows, cursor, batch_id)
        result = SendResult()
        result.skip(f"wandb cannot hold {kind}", rows.num_rows)
        return result

    def _send_steps(self, batch, cursor, batch_id: str) -> SendResult:
        """Log one step-merged batch, then wait until its marker is in the transaction log. A
        retry of the same batch id (a time-out of the barrier) only waits again."""
        if batch_id not in self._staged:
            result, todo = SendResult(), []
            for k, r in batch.rows():
                if r["step"] <= self._last_step:
                    result.skip(LATE, kind=k)
                else:
                    todo.append((k, r))
            for (k, reason), ids in self._log_steps(todo).items():
                result.skip(reason, len(ids), kind=k)
            self._staged[batch_id] = (result, max((r["step"] for _, r in todo), default=None))
        result, upto = self._staged[batch_id]
        if upto is not None:
            self._barrier(batch_id)
            self._last_step = max(self._last_step, upto)
            cursor.remote["last_step"] = self._last_step
        del self._staged[batch_id]
        return result

    def _log_steps(self, todo: list[tuple[str, dict]]) -> dict[tuple[str, str], list]:
        """One ``run.log`` per step, all kinds merged. Returns the rows wandb cannot hold."""
        wandb = self._import()
        skips: dict[tuple[str, str], list] = {}

        def skip(k, reason, r):
            skips.setdefault((k, reason), []).append((r["writer"], r["seq"]))

        by_step: dict[int, list[tuple[str, dict]]] = {}
        for k, r in todo:
            by_step.setdefault(r["step"], []).append((k, r))
        for step in sorted(by_step):
            items = sorted(by_step[step], key=lambda kr: (kr[1]["writer"], kr[1]["seq"]))
            row: dict[str, Any] = {}
            owner: dict[str, tuple[str, dict]] = {}
            samples: dict[str, list[dict]] = {}
            pictures: dict[str, list[dict]] = {}
            metric_ts = [r["ts"] for k, r in items if k == Kind.METRICS]
            wall = max(metric_ts or [r["ts"] for _, r in items])
            for k, r in items:
                if k == Kind.METRICS:
                    if r["value"] is None:
                        skip(k, NULL, r)
                        continue
                    key = wandb_key(r["key"])
                    value = r["value"]
                elif k == Kind.HISTOGRAMS:
                    key = wandb_key(r["key"])
                    counts, edges = rebin(list(r["counts"]), list(r["edges"]))
                    value = wandb.Histogram(np_histogram=(counts, edges))
                elif k == Kind.IMAGES:
                    if image_file(self._info.paths.dir, r) is None:
                        skip(k, IMAGE_MISSING, r)
                    else:
                        pictures.setdefault(wandb_key(r["key"]), []).append(r)
                    continue
                else:
                    samples.setdefault(str(r["split"] or "val"), []).append(r)
                    continue
                if key in owner:
                    skip(*owner[key][:1], SECOND, owner[key][1])
                owner[key] = (k, r)
                row[key] = value
            for key, irows in pictures.items():
                if key in owner:  # a metric or histogram of the same name at this step
                    for r in irows:
                        skip(Kind.IMAGES, SECOND, r)
                    continue
                row[key] = self._images(wandb, irows)
            for split, srows in samples.items():
                kept = sample_down(srows)
                if len(kept) < len(srows):
                    keep_ids = {(r["writer"], r["seq"]) for r in kept}
                    for r in srows:
                        if (r["writer"], r["seq"]) not in keep_ids:
                            skip("samples", OVER_TABLE, r)
                row[f"samples/{split}"] = _samples_table(wandb, kept)
            if not row:
                continue
            row["_timestamp"] = _seconds(wall)
            try:
                self._wb.log(row, step=int(step), commit=True)
            except Exception as exc:
                raise self._wrap(exc, f"log step {step}") from exc
        return skips

    def _images(self, wandb, rows: list[dict]):
        """A step's images of one key as ``wandb.Image(path)`` (wandb copies the file: the exact
        bytes), or a list of them in ``index`` order."""
        run_dir = self._info.paths.dir
        out = [wandb.Image(str(image_file(run_dir, r)), caption=r["caption"])
               for r in sorted(rows, key=lambda r: (r["index"], r["writer"], r["seq"]))]
        return out[0] if len(out) == 1 else out

    def _send_spans(self, rows, cursor, batch_id: str) -> SendResult:
        from trackstore.records.samples import decode_json as _loads

        wandb = self._import()
        result = SendResult()
        live = self._info is not None and self._info.status == RunStatus.RUNNING
        data, turn_data = [], []
        for trace_id, root, spans in ready_trajectories(rows, live, result):
            turn_data += turn_rows(trace_id, root, spans)
            turns = [{"span_id": s["span_id"], "parent_span_id": s["parent_span_id"], "name": s["name"],
                      "kind": s["kind"], "start_ns": s["start_ns"], "end_ns": s["end_ns"], "status": s["status"],
                      "error": s["error"], "inputs": _loads(s["inputs"]), "outputs": _loads(s["outputs"]),
                      "attributes": _loads(s["attributes"])} for s in spans]
            end = root["end_ns"] if root["end_ns"] is not None else max(s["start_ns"] for s in spans)
            data.append([trace_id, root["step"], root["sample_index"], root["rollout_n"], root["validate"],
                         root["reward"], root["name"], root["status"], root["start_ns"] / 1e9,
                         (end - root["start_ns"]) / 1e9, len(spans), json.dumps(turns, ensure_ascii=False, default=str)])
        if not data:
            return result
        table = wandb.Table(columns=["trace_id", "step", "sample_index", "rollout_n", "validate", "reward", "name",
                                     "status", "start_time", "duration_s", "n_spans", "turns"], data=data)
        art = wandb.Artifact(artifact_name(f"trajectories-{cursor.remote['id']}"), type="trajectories",
                             metadata={"trackstore.run_id": self._info.run_id if self._info else None,
                                       "traces": len(data)})
        art.add(table, "trajectories")
        art.add(wandb.Table(columns=TURN_COLUMNS, data=turn_data), "turns")  # one readable row per span
        try:
            self._wb.log_artifact(art)
        except Exception as exc:
            raise self._wrap(exc, "log trajectories") from exc
        self._barrier(batch_id)
        return result

    def _send_artifacts(self, rows, cursor, batch_id: str) -> SendResult:
        from .artifact_rows import runs_of

        result = SendResult()
        moved: set[str] = set()
        latest = cursor.remote.setdefault("latest_versions", {})  # artifact -> the version replayed holding latest
        for group in runs_of(rows.to_pylist()):
            if "latest" in (group.moves or group.first.get("aliases") or []):
                latest[group.name] = group.version
            if group.moves:  # an alias moved to a version sent before: log the same content again
                # with it; wandb keeps one version per digest and moves the alias (its own way)
                if self._log_stored_version(group.name, group.version, group.moves, result):
                    moved.add(group.name)
                continue
            files, first = group.files, group.first
            self._log_version(group.name, group.version, files, first["type"], first["digest"], first.get("step"),
                              _loads_obj(first.get("metadata")), list(first.get("aliases") or []), result)
        for name in sorted(moved):
            # wandb gives 'latest' to whatever was logged last, the re-logged version too: log the
            # version holding it in the store (else the newest) last, so wandb agrees
            self._log_stored_version(name, latest.get(name, self._newest_version(name)), [], result)
        self._barrier(batch_id)
        return result

    def _log_stored_version(self, name: str, version: int | None, aliases: list[str], result: SendResult) -> bool:
        from trackstore.records.artifacts import list_versions

        stored = {v.version: v for v in list_versions(self._info.paths.dir, name)}.get(version) \
            if version is not None else None
        if stored is None:
            result.skip("artifact version missing from the store", max(len(aliases), 1))
            return False
        files = [{"path": f.path, "logical_path": f.logical_path, "size": f.size, "sha256": f.sha256,
                  "storage": stored.storage} for f in stored.files]
        return self._log_version(name, stored.version, files, stored.type, stored.digest, stored.step,
                                 dict(stored.metadata), aliases, result, relog=True)

    def _newest_version(self, name: str) -> int | None:
        """The newest stored version of ``name`` (wandb's latest when no version was given it)."""
        from trackstore.records.artifacts import list_versions

        versions = [v.version for v in list_versions(self._info.paths.dir, name)]
        return max(versions) if versions else None

    def _log_version(self, name: str, version: int, files: list[dict], type_: str, digest: str, step, metadata: dict,
                     aliases: list[str], result: SendResult, relog: bool = False) -> bool:
        from .artifact_rows import local_file

        wandb = self._import()
        located = [(f, *local_file(self._info.paths.dir, f)) for f in files]
        why = next((reason for _f, _p, reason in located if reason), None)
        if why is not None:
            result.skip(why, len(aliases) if relog else len(files))
            return False
        metadata.update({"trackstore.name": name, "trackstore.version": version, "trackstore.digest": digest})
        if step is not None:
            metadata["trackstore.step"] = step
        art = wandb.Artifact(artifact_name(name), type=type_ or "artifact", metadata=metadata)
        for f, path, _ in located:
            # a reference is read where it is (never copied into wandb's cache): it was just checked
            art.add_file(str(path), name=f["logical_path"],
                         policy="immutable" if f.get("storage") == "reference" else "mutable")
        aliases = [a for a in aliases if a and a != "latest"]  # wandb gives latest to the newest itself
        if step is not None and not relog:
            aliases.append(f"step-{step}")
        try:
            self._wb.log_artifact(art, aliases=list(dict.fromkeys(aliases)) or None)
        except Exception as exc:
            raise self._wrap(exc, f"log artifact {name}") from exc
        return True

    # ------------------------------------------------------------------ reading back
    def _logs(self, cursor, wait: bool = False) -> list[Path]:
        """The run's transaction logs on this machine, oldest first (every session's folder)."""
        rid = cursor.remote.get("id")
        found = {Path(d) for d in cursor.remote.get("dirs", [])}
        found |= set((self.root_dir / "wandb").glob(f"*run-*-{rid}"))
        files = sorted((d / f"run-{rid}.wandb" for d in found if (d / f"run-{rid}.wandb").is_file()),
                       key=lambda p: _started(p.parent))
        current = self._reader.path if self._reader else None
        if wait:
            for f in files:
                if f != current:
                    _wait_quiet(f)
        return files

    def _contents(self, cursor, wait: bool = False):
        from .wandb_log import read_logs

        return read_logs(self._logs(cursor, wait), MARKER)

    def reconcile(self, kind: str, rows, cursor, batch_id: str):
        """Rows of an interrupted batch that no transaction log of the run holds."""
        import pyarrow as pa

        logs = self._contents(cursor, wait=True)
        self._last_step = max(self._last_step, logs.last_step)
        cursor.remote["last_step"] = self._last_step
        if batch_id in logs.markers:
            return StepBatch({k: t.slice(0, 0) for k, t in rows.tables.items()}) if kind == STEPS else rows.slice(0, 0)
        if kind != STEPS:
            return rows  # artifact versions are content-addressed: a resend adds no version
        return StepBatch({k: t.filter(pa.array([not _held(k, r, logs.history) for r in t.to_pylist()], pa.bool_()))
                          for k, t in rows.tables.items()})

    def finish_run(self, run, cursor, status: str) -> None:
        meta = run.meta
        summary = dict(meta.get("summary_user") or {})
        summary.update({"trackstore/status": status, "trackstore/run_id": run.run_id,
                        "trackstore/created_at": meta.get("created_at"), "trackstore/ended_at": meta.get("ended_at")})
        if meta.get("exit_code") is not None:
            summary["trackstore/exit_code"] = meta["exit_code"]
        if meta.get("error"):
            summary["trackstore/error"] = str(meta["error"])[:8000]
        try:
            self._wb.summary.update(summary)
        except Exception as exc:
            raise self._wrap(exc, "summary") from exc
        if status == RunStatus.RUNNING:
            return
        code = meta.get("exit_code")
        code = int(code) if code is not None else (0 if status == RunStatus.FINISHED else 1)
        if status != RunStatus.FINISHED and code == 0:
            code = 1
        self._finish_open(code)

    def verify(self, run, cursor) -> dict[str, int]:
        logs = self._contents(cursor)
        metrics = histograms = samples = images = 0
        for step, row in logs.history.items():
            for key, value in row.items():
                if key.startswith("_"):
                    continue
                if isinstance(value, dict):
                    if value.get("_type") == "histogram":
                        histograms += 1
                    elif value.get("_type") == "image-file":
                        images += 1
                    elif value.get("_type") == "images/separated":
                        images += int(value.get("count") or 0)
                    elif value.get("_type") == "table-file" and key.startswith("samples/") and (step, key) in logs.tables:
                        samples += table_rows(logs.tables[(step, key)])
                else:
                    metrics += 1
        return {"metrics": metrics, "histograms": histograms, "samples": samples, "images": images}

    def prepare(self, run, cursor, metric_keys: MetricKeys | None = None) -> None:
        """Before a run's rows are planned: the last step the cursor says wandb committed, by
        which :meth:`unsupported` judges late points as :meth:`send` does (online, a resumed
        run may hold more steps than the cursor knows: only the sync asks)."""
        self._planned_last = int(cursor.remote.get("last_step", -1))

    def unsupported(self, kind: str, rows) -> dict[str, int]:
        """What :meth:`send` will report for ``rows``, without sending (``--dry-run``)."""
        out: dict[str, int] = {}
        if not rows.num_rows:
            return out
        if kind in self.capabilities.merge_steps and self._planned_last >= 0:
            import pyarrow.compute as pc

            late = pc.less_equal(rows.column("step"), self._planned_last)
            n_late = int(pc.sum(pc.fill_null(late, False).cast("int64")).as_py() or 0)
            if n_late:
                out[LATE] = n_late
                rows = rows.filter(pc.invert(pc.fill_null(late, False)))
                if not rows.num_rows:
                    return out
        if kind == Kind.METRICS:
            nulls = rows.column("value").null_count
            if nulls:
                out[NULL] = nulls
            keys = rows.column("key").to_pylist()
            for k, wk in renamed("wandb", set(keys)).items():
                out[rename_reason("wandb", k, wk)] = 0
            steps = rows.column("step").to_pylist()
            pairs = list(zip(steps, keys))
            if len(set(pairs)) < len(pairs):
                out[SECOND] = len(pairs) - len(set(pairs))
        elif kind == Kind.HISTOGRAMS:
            wide = sum(1 for c in rows.column("counts").to_pylist() if len(c) > MAX_BINS)
            if wide:
                out[f"histograms over {MAX_BINS} bins re-binned (adjacent bins merged)"] = 0
        elif kind == Kind.SAMPLES:
            groups: dict[tuple, int] = {}
            for s, sp in zip(rows.column("step").to_pylist(), rows.column("split").to_pylist()):
                groups[(s, sp)] = groups.get((s, sp), 0) + 1
            over = sum(n - MAX_TABLE_ROWS for n in groups.values() if n > MAX_TABLE_ROWS)
            if over:
                out[OVER_TABLE] = over
        return out

    def close(self) -> None:
        try:
            self._finish_open()
        except (RetryableError, PermanentError):
            pass


class WandbOfflineAdapter(WandbAdapter):
    """``--to wandb-offline``: a standard offline run folder for ``wandb sync`` to upload later."""

    name = "wandb-offline"
    forced_mode = "offline"


def _held(kind: str, r: dict, history: dict[int, dict]) -> bool:
    row = history.get(r["step"])
    if row is None:
        return False
    if kind == Kind.SAMPLES:
        return f"samples/{r['split'] or 'val'}" in row
    return wandb_key(r["key"]) in row


def _samples_table(wandb, rows: list[dict]):
    cols = ["sample_index", "input", "output", "score", "extra"]
    data = [[r.get("sample_index"), r.get("input"), r.get("output"), r.get("score"), r.get("extra")] for r in rows]
    return history_table(wandb, cols, data)  # no samples/<split>.ncols/.nrows "metrics"


def _loads_obj(text: str | None) -> dict:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"metadata": text}
    return value if isinstance(value, dict) else {"metadata": value}


def _started(run_dir: Path) -> str:
    """The start time in a run folder's name (``offline-run-20261202_144003-<id>``), sortable."""
    m = _TIMESPEC.search(run_dir.name)
    return m.group(0) if m else run_dir.name


def _avoid_same_second(wandb_dir: Path, rid: str) -> None:
    """wandb names a session's folder by its start second; a second session of the same run in
    the same second would reuse the folder and truncate the first one's transaction log."""
    for _ in range(30):
        now = {time.strftime("%Y%m%d_%H%M%S", time.localtime()), time.strftime("%Y%m%d_%H%M%S", time.gmtime())}
        if not any(_started(d) in now for d in wandb_dir.glob(f"*run-*-{rid}")):
            return
        time.sleep(0.1)


def _wait_quiet(path: Path, quiet_s: float = 1.0, limit_s: float = 15.0) -> None:
    """Wait until a killed session's wandb-core has stopped writing ``path`` (size unchanged)."""
    deadline = time.monotonic() + limit_s
    last = None
    since = time.monotonic()
    while time.monotonic() < deadline:
        try:
            st = path.stat()
            cur = (st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            return
        if cur != last:
            last, since = cur, time.monotonic()
        elif time.monotonic() - since >= quiet_s or time.time() - st.st_mtime > quiet_s:
            return
        time.sleep(0.1)
