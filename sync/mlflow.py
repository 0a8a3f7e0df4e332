"""MLflow target: ``trackstore sync --to mlflow [--uri URI]``.

Where: ``--uri``, else ``$MLFLOW_TRACKING_URI``, else an embedded sqlite store under the
trackstore root (``<root>/_mlflow/mlflow.db``, artifacts in ``<root>/_mlflow/artifacts``), so
the demo and air-gapped users need no server.

Mapping (docs/sync.md has the full table):

* project -> experiment (created if missing, once per destination, with the experiment kind of
  model training; a deleted one is a permanent error: :mod:`.mlflow_experiments`); runs are
  looked up in every live experiment of the name. Where to see it:
  :func:`.mlflow_experiments.runs_page`.
* run -> one MLflow run found again by the tag ``trackstore.run_id`` (never created twice);
  name, notes (``mlflow.note.content``), user, source, git commit, tags (``<tag> = "true"``),
  original start time; end time and FINISHED/FAILED/KILLED for finished/failed/crashed.
* config -> params named as verl's MLflow logger names them (nested keys joined with ``/``,
  lists as ``list_len``/index, values as ``str``: :func:`trackstore.sync.keys.mlflow_params`);
  a run an earlier trackstore synced with ``.``-joined names keeps that naming
  (:meth:`MlflowAdapter._params`). Values longer than MLflow's 6000 characters are truncated
  (noted); params are write-once, so re-sync compares and skips; the whole config is also
  logged as ``trackstore/config.json``.
* metrics -> ``log_batch`` with the original step and timestamp (ms), at most 999 points plus
  one batch-marker tag per request. Keys MLflow rejects are renamed per run
  (:func:`trackstore.sync.keys.mlflow_names`: readable unless two keys meet, kept in the
  cursor's ``key_map`` so a key keeps its name on every sync) and the renaming is reported.
* samples -> MLflow tables (the Evaluation view), histograms -> step images the run's charts
  draw, plus their exact JSON (:mod:`trackstore.sync.mlflow_records`); a sample table is named
  by its step (the names kept in the cursor), a histogram file by its rows' ``(writer, seq)``,
  so a resend overwrites instead of duplicating.
* spans -> MLflow traces (one per trajectory) with original start/end times, linked to the run,
  tagged ``trackstore.trace_id``, ``step`` and ``sample_index``; searched before creation.
  A trajectory without a root span waits while the run is live, and is reported once it ended.
* artifacts -> ``log_artifact`` under ``trackstore/artifacts/<name>/v<version>/``; a version of
  type ``model`` (checkpoints) also becomes a registered model version with its aliases
  (:mod:`trackstore.sync.mlflow_models`).

Bookkeeping tags (the batch marker, the config digest) are named ``mlflow.trackstore.*``: MLflow's
UI does not list ``mlflow.``-prefixed tags on the run page, so they stay out of the user's way.

Exactly once for metrics: every ``log_batch`` carries the tag ``mlflow.trackstore.batch.metrics`` =
the batch id, stored by the server after the batch's metrics in the same request. An in-doubt
batch whose id is the run's tag is complete; otherwise each key's points at the batch's steps
are read back (:meth:`MlflowAdapter.reconcile`) and only absent points are resent.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

from trackstore.errors import PermanentError, RetryableError, UsageError
from trackstore.store.clock import parse_iso
from trackstore.store.layout import target_dir
from trackstore.store.redact import redact_text, redact_url
from trackstore.store.vocab import REPLAY_ORDER, Kind, RunStatus

from .adapter import (
    IMAGE_MISSING,
    Adapter,
    Capabilities,
    MetricKeys,
    Opened,
    SendResult,
    TargetOptions,
    require_client,
)
from .http import classify, destination_url, is_local_uri, probe, proxy_environment
from .keys import mlflow_dot_params, mlflow_key, mlflow_params, mlflow_run_names, rename_reason, renamed
from .mlflow_experiments import Experiments, runs_page
from .mlflow_models import ModelVersions
from .mlflow_points import HeldPoints, comparable

MIN_MLFLOW = (2, 16)  # the floor of the [mlflow] extra: what the sync tests run against
#: runs synced at once to an MLflow tracking server when --jobs is not given (measured)
SERVER_JOBS = 8

RUN_TAG = "trackstore.run_id"
PROJECT_TAG = "trackstore.project"
HIDDEN = "mlflow.trackstore."  # bookkeeping tags: not shown on MLflow's run page
BATCH_TAG = HIDDEN + "batch.{kind}"
LOCAL_UI = "http://127.0.0.1:5000"  # where ``mlflow ui`` serves by default
PARAM_NAMING_TAG = HIDDEN + "param_names"  # "/": the run's params are named as verl names them
MAX_KEY = 250
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
MLFLOW_STATUS = {RunStatus.FINISHED: "FINISHED", RunStatus.FAILED: "FAILED", RunStatus.CRASHED: "KILLED",
                 RunStatus.RUNNING: "RUNNING"}



def source_tags(meta: dict, *, blank: bool = False) -> dict[str, str]:
    """MLflow's ``mlflow.user`` and ``mlflow.source.*`` of the training run, from its
    ``run.json``: its command line, user and git commit and branch. The run's tags carry what
    is known; a trace's metadata (``blank=True``) also names what is not, as ``""`` (MLflow's own
    word for unknown), because MLflow fills it from the sync process, which is not the source."""
    git = meta.get("git") or {}
    known = {
        "mlflow.user": meta.get("user") or "",
        "mlflow.source.name": " ".join(meta.get("command") or [])[:MAX_TAG_VALUE],
        "mlflow.source.git.commit": git.get("commit") or "",
        "mlflow.source.git.branch": git.get("branch") or "",
        "mlflow.source.git.repoURL": "",  # trackstore does not record the remote
    }
    return known if blank else {k: v for k, v in known.items() if v}


def _param_value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)


def _ms(iso_value: str | None) -> int | None:
    t = parse_iso(iso_value)
    return None if t is None else int(t * 1000)


class MlflowAdapter(Adapter):
    name = "mlflow"
    CAPABILITIES = Capabilities(
        kinds=REPLAY_ORDER,
        batch_sizes={Kind.METRICS: 999, Kind.HISTOGRAMS: 200, Kind.SAMPLES: 500, Kind.SPANS: 200, Kind.ARTIFACTS: 20},
        # a trajectory, or an artifact version (registered as one model version), never straddles two batches
        group_columns={Kind.SPANS: "trace_id", Kind.ARTIFACTS: "digest"},
        wants_metric_keys=True,  # two keys that sanitize alike get distinct names: decided over all of them
        whole_trajectories=True,
        preimport=("mlflow", "mlflow.tracking", "mlflow.entities"))

    def __init__(self, options: TargetOptions):
        super().__init__(options)
        require_client("mlflow", MIN_MLFLOW, "MLflow")
        uri = options.uri or os.environ.get("MLFLOW_TRACKING_URI")
        self.embedded = uri is None  # the sqlite store under the trackstore root
        if uri is None:
            base = target_dir(options.store_root or ".", "mlflow")
            uri = f"sqlite:///{base / 'mlflow.db'}"
        self.uri = uri
        self._client = None
        self.experiments = Experiments(self)  # each project's live experiments at the destination
        self.models = ModelVersions(self)  # registered model versions made or found
        self._run_dir = Path(".")
        self.trace_source: dict[str, str] = {}  # the training run's source, for its traces (open_run)
        self._run_keys: MetricKeys | None = None  # every metric key of the run being synced (prepare)
        self._known_keys: dict[str, str] = {}
        self._remote = None  # the MLflow Run as read at the start of this run's sync
        self.held = HeldPoints(self)  # what MLflow holds of a key in a range of steps: read by reconcile

    @property
    def capabilities(self) -> Capabilities:
        """A tracking server takes :data:`SERVER_JOBS` runs at once by default (measured:
        docs/performance.md, ``benchmarks/sync_parallel.py``); a local store (sqlite, files) one:
        one writer at a time, and the work is CPU in this process. The file store creates an
        experiment by listing names and then writing a folder, so two syncs of one project at
        once would make two experiments of one name: a sync to it holds the whole destination."""
        server = self.uri.startswith(("http://", "https://", "databricks"))
        database = self.uri.startswith(("sqlite:", "postgresql", "mysql", "mssql"))
        return replace(self.CAPABILITIES, default_jobs=SERVER_JOBS if server else 1,
                       one_writer=None if server or database else "MLflow's file store takes one writer at a time")

    # ------------------------------------------------------------------ plumbing
    @property
    def client(self):
        if self._client is None:
            # Our engine retries with backoff; MLflow's own retry loop (7 tries, ~2 minutes)
            # would hide cuts and stall cron jobs. Timeouts come from --timeout.
            os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
            # air-gapped and weak-network users: MLflow's usage telemetry would phone home
            os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
            # MLflow prints "View run ... at ..." links on stdout; our stdout is for our output
            os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
            os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(int(max(1, self.options.timeout)))
            proxy_environment(self.options.proxy)  # MLflow's client has no proxy parameter
            if self.embedded:
                target_dir(self.options.store_root or ".", "mlflow").mkdir(parents=True, exist_ok=True)
            import logging

            for name in ("mlflow", "alembic"):  # keep cron output to what trackstore says
                logging.getLogger(name).setLevel(logging.WARNING)
            import mlflow
            from mlflow.tracking import MlflowClient

            # traces are exported through the process-wide tracking URI, not the client's: point
            # it at our destination (this process only syncs; it has no other MLflow state)
            mlflow.set_tracking_uri(self.uri)
            try:
                client = MlflowClient(tracking_uri=self.uri)
            except Exception as exc:
                if "MLFLOW_ALLOW_FILE_STORE" in str(exc):
                    raise UsageError(f"{self.destination()} is an MLflow file store, which MLflow {mlflow.__version__} "
                                     "opens only with MLFLOW_ALLOW_FILE_STORE=true; set it, or sync to a database "
                                     "(--uri sqlite:///path/mlflow.db) or a server") from None
                raise self._wrap(exc, "open the tracking store") from exc
            self._client = client
        return self._client

    def destination(self) -> str:
        return destination_url(redact_url(self.uri))

    def _wrap(self, exc: Exception, what: str) -> Exception:
        """An MLflow/requests error as retryable or permanent (:func:`.http.classify`), without
        secrets; a file store whose metadata a killed writer left empty is named."""
        msg = redact_text(f"{what}: {exc}")
        if isinstance(exc, (AttributeError, TypeError, KeyError)):
            broken = self._broken_file_store_files()
            if broken:
                return PermanentError(
                    f"{what}: MLflow's file store at {self.destination()} has unreadable metadata: "
                    f"{', '.join(broken)} (empty or not YAML). MLflow rewrites these files in place, so a "
                    "process killed while writing one leaves it empty. Restore the file from a backup, or "
                    "move that folder away and sync again; prefer a sqlite:/// store or a server, which "
                    "write atomically")
        return classify(exc, msg)

    def _broken_file_store_files(self, limit: int = 3) -> list[str]:
        """``meta.yaml`` files of a local MLflow file store that MLflow cannot parse."""
        if self.uri.startswith("sqlite:") or not is_local_uri(self.uri):
            return []
        from urllib.parse import unquote, urlparse

        import yaml  # MLflow's own dependency: the file store is YAML

        base = Path(unquote(urlparse(self.uri).path)) if self.uri.startswith("file:") else Path(self.uri)
        broken = []
        for meta in sorted(base.glob("*/meta.yaml")) + sorted(base.glob("*/*/meta.yaml")):
            try:
                ok = isinstance(yaml.safe_load(meta.read_text(encoding="utf-8")), dict)
            except Exception:
                ok = False
            if not ok:
                broken.append(str(meta))
                if len(broken) >= limit:
                    break
        return broken

    def call(self, what: str, fn, *args, **kw):
        """``fn(*args, **kw)``, its failure turned into the engine's retryable or permanent error."""
        try:
            return fn(*args, **kw)
        except (RetryableError, PermanentError):
            raise
        except Exception as exc:
            raise self._wrap(exc, what) from exc

    def view(self, cursor) -> list[str]:
        """The experiment's runs list (:func:`runs_page`): on the server, or, for a store read in
        place, in ``mlflow ui`` started on it (its default address)."""
        exp = cursor.remote.get("experiment_id")
        if not exp:
            return []
        if is_local_uri(self.uri):
            return [f"mlflow ui --backend-store-uri {shlex.quote(self.destination())}", runs_page(LOCAL_UI, exp)]
        return [runs_page(self.destination(), exp)]

    def check_online(self) -> None:
        if is_local_uri(self.uri):
            return
        probe(self.uri.rstrip("/") + "/health", what=f"MLflow at {self.destination()}", timeout=self.options.timeout,
              proxy=self.options.proxy)

    # ------------------------------------------------------------------ runs
    def open_run(self, run, cursor) -> str:
        from mlflow.entities import ViewType

        self._run_dir = run.paths.dir
        self._run_status = run.status
        self.trace_source = source_tags(run.meta, blank=True)  # the metadata of this run's traces
        exp_ids = self.experiments.ids(run.project)
        remote_id = cursor.remote.get("run_id")
        gone = False
        if remote_id:
            try:
                r = self.client.get_run(remote_id)
            except Exception as exc:
                if getattr(exc, "error_code", None) != "RESOURCE_DOES_NOT_EXIST":
                    raise self._wrap(exc, "get run") from exc
                r, gone = None, True
            if r is not None and r.info.lifecycle_stage == "deleted":
                raise PermanentError(f"MLflow run {remote_id} for {run.project}/{run.run_id} was deleted at "
                                     f"{self.destination()}; restore it (`mlflow runs restore --run-id {remote_id}`)")
            if r is not None:
                cursor.remote["experiment_id"] = r.info.experiment_id
                return Opened.FOUND
        # every experiment of the name: a run made in another copy is found, not made again
        found = self.call("search runs", self.client.search_runs, exp_ids,
                         filter_string=f"tags.`{RUN_TAG}` = '{run.run_id}'", run_view_type=ViewType.ALL,
                         max_results=5)
        if found:
            r = found[0]
            if r.info.lifecycle_stage == "deleted":
                raise PermanentError(f"MLflow run {r.info.run_id} for {run.project}/{run.run_id} was deleted at "
                                     f"{self.destination()}; restore it (`mlflow runs restore --run-id {r.info.run_id}`)")
            cursor.remote.update(run_id=r.info.run_id, experiment_id=r.info.experiment_id)
            cursor.remote_id = r.info.run_id
            return Opened.FOUND
        meta = run.meta
        tags = {RUN_TAG: run.run_id, PROJECT_TAG: run.project, "mlflow.runName": run.name}
        created = self.call("create run", self.client.create_run, exp_ids[0], start_time=_ms(meta.get("created_at")),
                           tags=tags, run_name=run.name)
        cursor.remote.update(run_id=created.info.run_id, experiment_id=exp_ids[0])
        cursor.remote_id = created.info.run_id
        # a cursor that pointed at a run MLflow no longer has (purged by `mlflow gc`, or a new
        # empty store at the same address): what it acknowledged is not there any more
        return Opened.REPLACED if gone else Opened.CREATED

    def sync_metadata(self, run, cursor) -> list[str]:
        from mlflow.entities import Param, RunTag

        notes: list[str] = []
        rid = cursor.remote["run_id"]
        current = self.call("get run", self.client.get_run, rid)
        self._remote = current  # finish_run compares against it: no needless writes
        have_params = current.data.params
        have_tags = current.data.tags
        meta = run.meta
        params = []
        for k, (key, v) in self._params(meta.get("config") or {}, have_params, have_tags).items():
            if len(v) > MAX_PARAM_VALUE:
                v = v[:MAX_PARAM_VALUE - 14] + "...[truncated]"
                notes.append(f"param {k!r} truncated to {MAX_PARAM_VALUE} characters (full config in trackstore/config.json)")
            if k in have_params:
                if have_params[k] != v:
                    notes.append(f"param {k!r} changed locally but MLflow params are write-once; kept {have_params[k][:40]!r}")
                continue
            if k != key:
                notes.append(f"config key {key!r} sent to MLflow as param {k!r}")
            params.append(Param(k, v))
        wanted = {
            "mlflow.runName": run.name,
            **source_tags(meta),
            "trackstore.host": meta.get("host") or "",
            "trackstore.tags": json.dumps(list(meta.get("tags") or []), ensure_ascii=False),
        }
        if meta.get("notes"):
            wanted["mlflow.note.content"] = str(meta["notes"])[:MAX_TAG_VALUE]
        for opt in ("group", "job_type"):
            if meta.get(opt):
                wanted[f"trackstore.{opt}"] = str(meta[opt])
        for t in meta.get("tags") or []:
            wanted[mlflow_key(t)] = "true"
        tags = [RunTag(k, v) for k, v in wanted.items() if have_tags.get(k) != v]
        for i in range(0, len(params), 100):
            # the naming goes with the first params, in their request: a run holding params
            # without it was synced with the older naming (see _params)
            naming = [RunTag(PARAM_NAMING_TAG, "/")] if i == 0 and not have_params else []
            self.call("log params", self.client.log_batch, rid, params=params[i:i + 100], tags=naming)
        if tags:
            self.call("set tags", self.client.log_batch, rid, tags=tags)
        config_json = json.dumps(meta.get("config") or {}, sort_keys=True, ensure_ascii=False)
        digest = hashlib.sha256(config_json.encode()).hexdigest()[:16]
        if have_tags.get(HIDDEN + "config_digest") != digest:
            self.call("log config", self.client.log_dict, rid, json.loads(config_json), "trackstore/config.json")
            self.call("set tag", self.client.set_tag, rid, HIDDEN + "config_digest", digest)
        return notes

    @staticmethod
    def _params(config: dict, have_params: dict[str, str], have_tags: dict[str, str]) -> dict[str, tuple[str, str]]:
        """``{param name: (config key, value)}`` of the run: verl's naming (``/``,
        :func:`~trackstore.sync.keys.mlflow_params`), or, for a run that holds params without the
        naming tag (synced by a trackstore that joined keys with ``.``), that older naming. MLflow
        params are write-once: one run keeps the naming it was first given rather than holding
        both. Decided by what the remote run holds, so a lost cursor decides alike."""
        if have_params and have_tags.get(PARAM_NAMING_TAG) != "/":
            return mlflow_dot_params(config)
        return mlflow_params(config)

    # ------------------------------------------------------------------ records
    def prepare(self, run, cursor, metric_keys: MetricKeys | None = None) -> None:
        # what the key names depend on (every metric key of the run, the names already given),
        # the same for send() and for --dry-run's unsupported(), which sees neither
        self._run_keys = metric_keys
        self._known_keys = dict(cursor.remote.get("key_map") or {})

    def _key_names(self, cursor, keys) -> dict[str, str]:
        """The cursor's ``key_map``, extended (and kept in the cursor) when ``keys`` holds a new key."""
        mapping = cursor.remote.setdefault("key_map", {})
        if not mapping.keys() >= set(keys):
            mapping.update(mlflow_run_names(keys, mapping, self._run_keys() if self._run_keys else None))
        return mapping

    def send(self, kind: str, rows, cursor, batch_id: str) -> SendResult:
        rid = cursor.remote["run_id"]
        if kind == Kind.METRICS:
            return self._send_metrics(rid, rows, cursor, batch_id)
        if kind in (Kind.SAMPLES, Kind.HISTOGRAMS):
            return self._send_table_files(rid, kind, rows, cursor)
        if kind == Kind.ARTIFACTS:
            return self._send_artifacts(rid, rows, cursor)
        if kind == Kind.IMAGES:
            return self._send_images(rid, rows)
        if kind == Kind.SPANS:
            from .mlflow_traces import send_traces

            return send_traces(self, rows, cursor)
        result = SendResult()
        result.skip(f"mlflow cannot hold {kind}", rows.num_rows)
        return result

    def _send_metrics(self, rid: str, rows, cursor, batch_id: str) -> SendResult:
        from mlflow.entities import Metric, RunTag

        result = SendResult()
        keys = rows.column("key").to_pylist()
        values = rows.column("value").to_pylist()
        steps = rows.column("step").to_pylist()
        ts = rows.column("ts").cast("int64").to_pylist()  # microseconds
        mapping = self._key_names(cursor, keys)
        metrics = []
        for k, v, s, t in zip(keys, values, steps, ts):
            mk = mapping[k]
            if mk != k:  # the points are sent, under another name: the summary says which
                result.skipped[rename_reason("MLflow", k, mk)] = 0
            if v is None:
                result.skip("metric value is null", 1)
                continue
            metrics.append(Metric(mk, v, t // 1000, s))
        tag = RunTag(BATCH_TAG.format(kind="metrics"), batch_id)
        try:
            self.call("log metrics", self.client.log_batch, rid, metrics=metrics, tags=[tag])
        except BaseException:
            self.held.forget(rid, (m.key for m in metrics))  # these points may or may not be there now
            raise
        self.held.sent(rid, metrics)
        return result

    def _send_table_files(self, rid: str, kind: str, rows, cursor) -> SendResult:
        from .mlflow_records import send_records

        return send_records(self, rid, kind, rows, cursor)

    def _send_artifacts(self, rid: str, rows, cursor) -> SendResult:
        return self.models.send(rid, self._run_dir, rows)

    def _send_images(self, rid: str, rows) -> SendResult:
        """Images as MLflow step images (:func:`.mlflow_records.step_image_files`): named by the
        row, so a resend overwrites and adds nothing."""
        import tempfile

        from .mlflow_records import LOGGED_IMAGES, step_image_files

        result = SendResult()
        with tempfile.TemporaryDirectory(prefix="trackstore-images-") as tmp:
            files, missing = step_image_files(rows, self._run_dir, Path(tmp))
            for local, art_dir in files:
                self.call("log image", self.client.log_artifact, rid, local, art_dir)
        if missing:
            result.skip(IMAGE_MISSING, len(missing))
        if files:
            self.call("mark images", self.client.set_tag, rid, LOGGED_IMAGES, "True")
        return result

    def reconcile(self, kind: str, rows, cursor, batch_id: str):
        """Return the rows of an in-doubt batch that MLflow does not hold yet.

        A batch whose id is the run's batch tag arrived whole (one ``get_run``). Otherwise each
        key's points are read for the batch's steps only (:class:`.mlflow_points.HeldPoints`),
        so a reconcile costs about what the batch costs, whatever the length of the run's
        history; what it read is kept for the retries of this batch.
        """
        import pyarrow as pa

        rid = cursor.remote["run_id"]
        if kind != Kind.METRICS:
            # artifact files and traces are addressed by name / trace tag: resending them is a
            # no-op overwrite (files) or skipped after a search (traces)
            return rows
        run = self.call("get run", self.client.get_run, rid)
        if run.data.tags.get(BATCH_TAG.format(kind="metrics")) == batch_id:
            return rows.slice(0, 0)
        keys = rows.column("key").to_pylist()
        steps = rows.column("step").to_pylist()
        mapping = self._key_names(cursor, keys)
        spans: dict[str, tuple[int, int]] = {}
        for k, s in zip(keys, steps):
            lo, hi = spans.get(k, (s, s))
            spans[k] = (min(lo, s), max(hi, s))
        have = {k: self.held.points(rid, mapping[k], lo, hi) for k, (lo, hi) in spans.items()}
        values = rows.column("value").to_pylist()
        ts = rows.column("ts").cast("int64").to_pylist()
        keep = [(s, t // 1000, comparable(v)) not in have[k] for k, v, s, t in zip(keys, values, steps, ts)]
        return rows.filter(pa.array(keep))

    def finish_run(self, run, cursor, status: str) -> None:
        """Summary tags and the end status, each sent only if MLflow does not hold it already.

        Skipping what is already there saves requests on every re-check, and with MLflow's file
        store it avoids rewriting the run's ``meta.yaml``, which MLflow does in place: a process
        killed mid-write leaves it empty and the run unreadable.
        """
        from mlflow.entities import RunTag

        rid = cursor.remote["run_id"]
        remote = self._remote if self._remote is not None and self._remote.info.run_id == rid else None
        have = remote.data.tags if remote is not None else {}
        user_summary = run.meta.get("summary_user") or {}
        wanted = {mlflow_key(f"trackstore.summary.{k}"): _param_value(v)[:MAX_TAG_VALUE]
                  for k, v in user_summary.items()}
        wanted["trackstore.status"] = status
        if run.meta.get("exit_code") is not None:
            wanted["trackstore.exit_code"] = str(run.meta["exit_code"])
        if run.meta.get("error"):
            wanted["trackstore.error"] = str(run.meta["error"])[:MAX_TAG_VALUE]
        tags = [RunTag(k, v) for k, v in wanted.items() if have.get(k) != v]
        for i in range(0, len(tags), 100):
            self.call("set summary tags", self.client.log_batch, rid, tags=tags[i:i + 100])
        if status == RunStatus.RUNNING:
            if remote is None or remote.info.status != "RUNNING":
                self.call("reopen run", self.client.update_run, rid, status="RUNNING")
            return
        end = _ms(run.meta.get("ended_at") or run.meta.get("updated_at"))
        if remote is not None and remote.info.status == MLFLOW_STATUS[status] and remote.info.end_time == end:
            return
        self.call("end run", self.client.set_terminated, rid, status=MLFLOW_STATUS[status], end_time=end)

    def verify(self, run, cursor) -> dict[str, int]:
        rid = cursor.remote["run_id"]
        from .mlflow_traces import count_traces

        mapping = cursor.remote.get("key_map") or {}
        total = 0
        for mk in set(mapping.values()):
            total += len(self.call("get metric history", self.client.get_metric_history, rid, mk))
        return {"metrics": total, "traces": count_traces(self, cursor)}

    def unsupported(self, kind: str, rows) -> dict[str, int]:
        out: dict[str, int] = {}
        if kind == Kind.METRICS and rows.num_rows:
            import pyarrow.compute as pc

            nulls = rows.column("value").null_count
            if nulls:
                out["metric value is null"] = nulls
            infs = pc.sum(pc.is_inf(rows.column("value")).cast("int64")).as_py() or 0
            if infs:
                out["infinite values are stored by MLflow as +/-1.8e308 (kept, lossy)"] = infs
            keys = pc.unique(rows.column("key")).to_pylist()
            names = mlflow_run_names(keys, self._known_keys, self._run_keys() if self._run_keys else None)
            for k, mk in renamed("mlflow", keys, names).items():
                out[rename_reason("MLflow", k, mk)] = 0
        return out
