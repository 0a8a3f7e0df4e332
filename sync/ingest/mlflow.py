"""MLflow tracking stores as trackstore runs: ``trackstore ingest --from mlflow``.

What it reads, always through MLflow's own client (``mlflow.MlflowClient``) and, for the bulk
of a database store's points, through the tracking store's own SQL model:

* a database store: ``sqlite:///mlflow.db``, a path to an MLflow sqlite file (``.db``), or
  another SQLAlchemy URI MLflow takes (``postgresql://...``, ``mysql://...``);
* a file store: an ``mlruns`` folder (or a folder holding one), or a ``file:`` URI; MLflow 3
  reads these only with ``MLFLOW_ALLOW_FILE_STORE=true``, which is set while they are read.
  A folder holding ``mlflow.db`` (MLflow 3's default store, in the folder a script ran in)
  gives that database's runs too;
* a tracking server: ``http(s)://host:port`` (probed first: a server that does not answer is
  :class:`~trackstore.errors.TargetUnreachableError` at once, not MLflow's minutes of retries).

What it promises:

* ``discover`` lists every active run of every active experiment (deleted ones are left, as
  MLflow's UI leaves them), one :class:`Found` per run: ``source_id`` the MLflow run id,
  ``location`` the tracking URI (a sqlite path made absolute), label ``experiment/run name``,
  ``size`` the run's metric keys (``read`` reports progress in keys). It never creates
  anything: a file that is not an MLflow database, or a folder that is not a file store, gives
  ``[]`` (MLflow's own store classes would create tables or a default experiment there).
* The project is the experiment's name when it is a valid project name; otherwise a
  sanitised name (``/``, ``\\``, ``=``, ``%`` and control characters become ``_``, cut to the
  limits), and the original name is kept in ``source_meta["experiment_name"]``.
* Every metric point keeps its step, value (NaN as NaN; MLflow itself stores infinities as
  +-``sys.float_info.max``) and its millisecond timestamp (``ts_us = ms * 1000``). A database
  store's points come from one query over MLflow's ``SqlMetric`` model on the store's own
  SQLAlchemy engine (``SqlAlchemyStore``: about 18x faster than ``get_metric_history`` per key);
  a server's and a file store's from ``MlflowClient.get_metric_history`` per key (the client
  pages through a server's history). Summary = the run's latest metrics (``run.data.metrics``).
* Params -> config, as MLflow holds them (strings, flat names). Tags: ``mlflow.runName`` ->
  name, ``mlflow.note.content`` -> notes, ``mlflow.parentRunId`` -> group (the children of one
  parent run share it), other ``mlflow.*`` system tags -> ``source_meta["mlflow_tags"]``, every
  other tag -> a store tag ``"key=value"`` (the store's tags are labels; ``key=value`` keeps
  both and stays searchable). Tags a trackstore sync wrote (``trackstore.*``) give back the
  host, group, job type and tags they came from, and go to ``source_meta["trackstore_tags"]``.
* Status: FINISHED -> finished, FAILED -> failed, KILLED -> crashed, RUNNING and SCHEDULED ->
  running, with ``heartbeat_at`` = the end time if MLflow has one, else the latest point's
  time, else the start (the store calls it crashed once that is stale). ``start_time`` and
  ``end_time`` -> ``created_at`` and ``ended_at``.
* Traces (``MlflowClient.search_traces`` of the run, every page) -> spans: the trace id, span
  and parent ids, name, start and end in ns, status ``ok``/``error`` (``unfinished`` for a
  span without an end), the error text, inputs and outputs as JSON, the other attributes as a
  JSON object (``mlflow.spanType`` among them, and ``mlflow.events`` when the span has events).
  The span kind is the store's: LLM and CHAT_MODEL -> ``llm``, TOOL -> ``tool``, AGENT ->
  ``agent``, EVALUATOR -> ``reward``, any other type -> ``other`` (the type itself stays in the
  attributes). ``step``, ``sample_index``, ``rollout_n``, ``validate`` and the root's ``reward``
  come from the trace's ``trackstore.*`` tags (a trace trackstore sent) or a ``step`` attribute
  of its root span; otherwise ``None``. Trace assessments are counted as ``trace assessment``.
* Tables (``log_table``: the run tag ``mlflow.loggedArtifacts``) -> samples, one per row, read
  from the table's JSON (downloaded through the client for a server): split = the table's
  path without ``.json`` (``trackstore/samples/<split>/...`` -> ``<split>``); ``step`` and
  ``sample_index`` from those columns (else step 0, rows counted in order); input, output and
  score from the ``input``/``output``/``score`` columns (``inputs``, ``prompt``, ``question``;
  ``outputs``, ``response``, ``answer``); every other column in ``extra``; ``ts`` the run's
  start (a table has no time of its own).
* Artifacts: for a store whose artifact location is on this machine (sqlite and file stores
  as MLflow sets them up), each top-level artifact path becomes an artifact of that name
  (type ``model`` for a folder holding an ``MLmodel`` file, else ``file`` or ``folder``), and
  each MLflow 3 logged model of the run (``search_logged_models``) whose files are here becomes
  an artifact named after the model (type ``model``). Artifacts elsewhere (a server's, or an
  ``s3://`` artifact root) are not downloaded: ``read`` has no point at which a download could
  be cleaned up again, and they can be large. They are counted, ``remote artifact`` per
  top-level path and ``remote model`` per model. Images logged with ``log_image(key=, step=)``
  (``images/``) are counted as ``image``, and table files are samples, not artifacts. Dataset
  inputs, model inputs and outputs and the logged models are described in ``source_meta``
  (``datasets``, ``model_inputs``, ``model_outputs``, ``models``): the store keeps no dataset.
* Damage: a sqlite database another process holds locked (an open write transaction) is
  :class:`~trackstore.errors.LockHeldError` naming the database after :data:`LOCK_WAIT_S`
  seconds, never a hang on MLflow's 20 s busy timeout and engine retries. A run whose points,
  traces, tables or artifacts cannot be read keeps the rest, with each problem named (the
  store, the run, the key or file): a bulk query that fails falls back to MLflow's reader per
  key, so one unreadable key costs that key only. ``read`` raises only when the run itself
  cannot be read.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import unquote, urlsplit

from trackstore.errors import LockHeldError, TrackstoreError, UsageError
from trackstore.store.names import MAX_NAME_BYTES, MAX_NAME_CHARS, validate_project
from trackstore.upkeep.ingest import ExternalArtifact, ExternalRun, status_from

from . import Found

SOURCE = "mlflow"
LOCK_WAIT_S = 2.0  # how long a locked sqlite database is waited for before it is reported
PAGE = 1000  # experiments, runs and traces asked per request
_SQLITE_MAGIC = b"SQLite format 3\x00"
_MLFLOW_TABLES = {"experiments", "runs", "metrics", "params", "tags", "alembic_version"}
_DB_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
_FORBIDDEN = re.compile(r"[/\\=%\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_KINDS = {"LLM": "llm", "CHAT_MODEL": "llm", "TOOL": "tool", "AGENT": "agent", "EVALUATOR": "reward"}
_SPAN_DUPLICATES = ("mlflow.spanInputs", "mlflow.spanOutputs", "mlflow.traceRequestId")
_TRACE_FIELDS = ("step", "sample_index", "rollout_n", "validate", "reward")
_INPUT_COLUMNS = ("input", "inputs", "prompt", "question")
_OUTPUT_COLUMNS = ("output", "outputs", "response", "answer")
_RUN_ID = re.compile(r"[0-9a-f]{32}")
_SQL_ROW = [("key", object), ("step", "i8"), ("ts", "i8"), ("value", "f8"), ("nan", "?")]  # SqlMetric, as queried


@dataclass(frozen=True)
class _Store:
    """One MLflow tracking store: how MLflow is asked for it and how messages name it."""

    uri: str  # the tracking URI MlflowClient takes
    kind: str  # "sql", "file" or "http"
    label: str  # the database file, the folder or the URL
    db_path: Path | None = None  # a sqlite store's file
    folder: Path | None = None  # a file store's folder


@dataclass(frozen=True)
class _Handle:
    store: _Store
    experiment_id: str
    experiment_name: str


# ---------------------------------------------------------------------------- finding stores
def discover(location: str) -> list[Found]:
    """Every active run of the MLflow store at ``location`` (module docstring)."""
    found: list[Found] = []
    for store in _locate(str(location)):
        found += _discover_store(store)
    return found


def _discover_store(store: _Store) -> list[Found]:
    found: list[Found] = []
    with _reading(store):
        client = _client(store)
        try:
            for exp in _pages(lambda token: client.search_experiments(max_results=PAGE, page_token=token)):
                for run_id, name, size in _runs(client, store, exp.experiment_id):
                    found.append(Found(source=SOURCE, source_id=run_id, location=store.label,
                                       label=f"{exp.name}/{name or run_id}", size=size,
                                       handle=_Handle(store, exp.experiment_id, exp.name)))
        except Exception as exc:  # MLflow, SQLAlchemy and HTTP errors alike: say which store
            _raise_if_locked(store, exc)
            raise UsageError(f"cannot list the runs of MLflow store {store.label}: {_short(exc)}") from exc
    return found


def _runs(client, store: _Store, exp_id: str) -> list[tuple[str, str | None, int]]:
    """(run id, run name, metric keys) of an experiment's active runs.

    A file store's search reads every run's metric files, so one damaged file fails the search
    of its whole experiment: then the run folders are listed (their names only) and each run is
    asked for alone, so that a damaged run fails its own read, named, and the others come in."""
    try:
        return [(r.info.run_id, r.info.run_name, len(r.data.metrics)) for r in _pages(
            lambda token: client.search_runs([exp_id], max_results=PAGE, page_token=token))]
    except Exception:
        if store.folder is None or not (store.folder / exp_id).is_dir():
            raise
        runs = []
        for folder in sorted((store.folder / exp_id).iterdir()):
            if not (_RUN_ID.fullmatch(folder.name) and (folder / "meta.yaml").is_file()):
                continue
            try:
                run = client.get_run(folder.name)
            except Exception:  # this run's own read names what is wrong with it
                runs.append((folder.name, None, 0))
                continue
            if run.info.lifecycle_stage == "active":
                runs.append((folder.name, run.info.run_name, len(run.data.metrics)))
        return runs


def _locate(location: str) -> list[_Store]:
    """The stores at ``location`` (none if it holds no MLflow store); UsageError if it is missing.

    A folder may hold two: a file store (itself, or its ``mlruns``) and ``mlflow.db``, MLflow
    3's default database in the folder a script ran in."""
    scheme = urlsplit(location).scheme.lower() if "://" in location or location.startswith("file:") else ""
    if scheme in ("http", "https"):
        from trackstore.sync.http import probe

        url = location.rstrip("/")
        probe(f"{url}/health", what=f"MLflow server {_redact(url)}", timeout=10)
        return [_Store(uri=url, kind="http", label=_redact(url))]
    if scheme == "file":
        return _folder_stores(Path(unquote(urlsplit(location).path)), location)
    base = scheme.split("+", 1)[0]
    if base == "sqlite":
        rest = location.split("://", 1)[1]
        if not rest.startswith("/") or rest in ("/", "/:memory:"):
            raise UsageError(f"{location!r} names no sqlite file: use sqlite:///relative.db or sqlite:////abs/path.db")
        return _listed(_sqlite_store(Path(rest[1:]), location))
    if base in _DB_SCHEMES:
        return [_Store(uri=location, kind="sql", label=_redact(location))]
    if scheme:
        raise UsageError(f"{location!r}: MLflow ingest takes a sqlite:/// or database URI, an mlruns folder, a file: "
                         f"URI or an http(s):// server, not {scheme}://")
    path = Path(location)
    if not path.exists():
        raise UsageError(f"{location} does not exist")
    if path.is_dir():
        return _folder_stores(path, location)
    return _listed(_sqlite_store(path, location))


def _listed(store: _Store | None) -> list[_Store]:
    return [] if store is None else [store]


def _sqlite_store(path: Path, location: str) -> _Store | None:
    if not path.exists():
        raise UsageError(f"MLflow database {path} does not exist ({location})")
    if not path.is_file():
        raise UsageError(f"{location}: {path} is not a file")
    path = path.resolve()
    with open(path, "rb") as f:
        if f.read(len(_SQLITE_MAGIC)) != _SQLITE_MAGIC:
            return None  # not a sqlite database
    store = _Store(uri=f"sqlite:///{path}", kind="sql", label=f"sqlite:///{path}", db_path=path)
    return store if _mlflow_tables(store) else None


def _mlflow_tables(store: _Store) -> bool:
    """True if the sqlite file holds MLflow's tables. Read-only, waiting at most LOCK_WAIT_S: a
    database locked by another process is LockHeldError naming it."""
    assert store.db_path is not None
    try:
        con = sqlite3.connect(f"{store.db_path.as_uri()}?mode=ro", uri=True, timeout=LOCK_WAIT_S)
    except sqlite3.Error as exc:
        raise UsageError(f"MLflow database {store.db_path} cannot be opened: {exc}") from exc
    try:
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if _MLFLOW_TABLES <= names:
            con.execute("SELECT count(*) FROM experiments").fetchone()  # the tables, not just the schema
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise _locked(store) from exc
        raise UsageError(f"MLflow database {store.db_path} cannot be read: {exc}") from exc
    except sqlite3.DatabaseError:
        return False  # "file is not a database": a file that only starts like one
    finally:
        con.close()
    return _MLFLOW_TABLES <= names


def _folder_stores(folder: Path, location: str) -> list[_Store]:
    """The file store at ``folder`` or at ``folder/mlruns``, and ``folder/mlflow.db``."""
    if not folder.exists():
        raise UsageError(f"{location} does not exist")
    if not folder.is_dir():
        raise UsageError(f"{location} is not a folder (an MLflow file store is an mlruns folder)")
    stores = []
    for candidate in (folder, folder / "mlruns"):
        if _is_file_store(candidate):
            path = candidate.resolve()
            stores.append(_Store(uri=path.as_uri(), kind="file", label=path.as_uri(), folder=path))
            break
    if (folder / "mlflow.db").is_file():
        stores += _listed(_sqlite_store(folder / "mlflow.db", location))
    return stores


def _is_file_store(folder: Path) -> bool:
    if not folder.is_dir():
        return False
    if (folder / ".trash").is_dir():
        return True
    try:
        return any((child / "meta.yaml").is_file() for child in folder.iterdir()
                   if child.is_dir() and child.name.isdigit())
    except OSError:
        return False


@contextlib.contextmanager
def _reading(store: _Store) -> Iterator[None]:
    """While a store is read: its lock checked first (sqlite), and MLflow 3's refusal of file
    stores lifted for a file store (the variable is restored after)."""
    if store.db_path is not None:
        _mlflow_tables(store)
    if store.kind != "file":
        yield
        return
    before = os.environ.get("MLFLOW_ALLOW_FILE_STORE")
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)
        else:
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = before


def _client(store: _Store):
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # no usage reports from an ingest
    from mlflow import MlflowClient

    try:
        return MlflowClient(tracking_uri=store.uri)
    except Exception as exc:  # an out-of-date schema, a driver missing, a folder MLflow refuses
        _raise_if_locked(store, exc)
        raise UsageError(f"MLflow cannot open the store {store.label}: {_short(exc)}") from exc


def _pages(fetch: Callable[[str | None], Any]) -> Iterator[Any]:
    """Every item of a paged MLflow listing."""
    token = None
    while True:
        page = fetch(token)
        yield from page
        token = getattr(page, "token", None)
        if not token:
            return


def _locked(store: _Store) -> LockHeldError:
    return LockHeldError(f"MLflow database {store.db_path or store.label} is locked by another process (an open "
                         f"write transaction; waited {LOCK_WAIT_S:g} s): nothing read from it; ingest again once "
                         "that process is done")


def _raise_if_locked(store: _Store, exc: BaseException) -> None:
    if store.kind == "sql" and "database is locked" in str(exc):
        raise _locked(store) from exc


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _redact(uri: str) -> str:
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    return uri.replace(f":{parts.password}@", ":***@", 1)


def project_name(experiment: str) -> str:
    """The project an experiment's runs go to: its name, or that name made valid."""
    try:
        return validate_project(experiment)
    except TrackstoreError:
        pass
    name = _FORBIDDEN.sub("_", str(experiment)).strip().lstrip(".") or SOURCE
    while len(name) > MAX_NAME_CHARS or len(name.encode("utf-8")) > MAX_NAME_BYTES:
        name = name[:-1]
    return validate_project(name.rstrip() or SOURCE)


# ---------------------------------------------------------------------------- reading a run
def read(found: Found, *, progress: Callable[[int], None] | None = None) -> ExternalRun:
    """The whole MLflow run ``found`` (module docstring)."""
    handle: _Handle | None = found.handle
    if handle is not None:
        store = handle.store
    else:
        stores = _locate(found.location)
        if not stores:
            raise UsageError(f"{found.location} holds no MLflow store")
        store = next((s for s in stores if s.label == found.location), stores[0])
    with _reading(store):
        client = _client(store)
        try:
            run = client.get_run(found.source_id)
            exp_id = handle.experiment_id if handle else run.info.experiment_id
            exp_name = handle.experiment_name if handle else client.get_experiment(exp_id).name
        except Exception as exc:
            _raise_if_locked(store, exc)
            where = _damaged_file(client, store, found.source_id) or store.label
            raise UsageError(f"MLflow run {found.source_id} in {where} cannot be read: {_short(exc)}") from exc
        out = ExternalRun(source=SOURCE, source_id=run.info.run_id, location=store.label,
                          project=project_name(exp_name))
        _metadata(out, run, exp_name)
        latest = None
        for part, step in (("metric history", lambda: _metrics(out, client, store, run, progress)),
                           ("traces", lambda: _traces(out, client, exp_id, run.info.run_id)),
                           ("tables", lambda: _tables(out, client, store, run)),
                           ("artifacts", lambda: _artifacts(out, client, store, run)),
                           ("logged models", lambda: _models(out, client, store, exp_id, run.info.run_id))):
            try:
                got = step()
            except LockHeldError:
                raise
            except Exception as exc:  # whatever MLflow raises on a damaged part: the other parts still count
                _raise_if_locked(store, exc)
                out.problems.append(f"{part} of MLflow run {run.info.run_id} in {store.label} could not be read: "
                                    f"{_short(exc)}")
                continue
            if part == "metric history":
                latest = got
        _status(out, run, latest)
    return out


def _damaged_file(client, store: _Store, run_id: str) -> str | None:
    """The metric file of a file-store run that MLflow's reader fails on, if one does."""
    if store.folder is None:
        return None
    for metrics in store.folder.glob(f"*/{run_id}/metrics"):
        for file in sorted(p for p in metrics.rglob("*") if p.is_file()):
            try:
                client.get_metric_history(run_id, file.relative_to(metrics).as_posix())
            except Exception:
                return str(file)
    return None


def _metadata(out: ExternalRun, run, exp_name: str) -> None:
    info, data = run.info, run.data
    tags = dict(data.tags)
    out.name = info.run_name or tags.get("mlflow.runName") or None
    out.created_at = info.start_time / 1000 if info.start_time is not None else None
    out.ended_at = info.end_time / 1000 if info.end_time is not None else None
    out.config = dict(data.params)
    out.summary = dict(data.metrics)
    out.notes = tags.pop("mlflow.note.content", None)
    out.group = tags.get("mlflow.parentRunId")
    tags.pop("mlflow.runName", None)
    system = {k: v for k, v in tags.items() if k.startswith("mlflow.")}
    mine = {k: v for k, v in tags.items() if k.startswith("trackstore.")}
    user = {k: v for k, v in tags.items() if k not in system and k not in mine}
    if mine:
        _trackstore_tags(out, mine, user)
    out.tags += [f"{k}={v}" for k, v in sorted(user.items())]
    meta: dict[str, Any] = {"experiment_id": info.experiment_id, "experiment_name": exp_name,
                            "run_id": info.run_id, "status": info.status, "user": info.user_id,
                            "artifact_uri": info.artifact_uri, "lifecycle_stage": info.lifecycle_stage}
    if system:
        meta["mlflow_tags"] = dict(sorted(system.items()))
    if mine:
        meta["trackstore_tags"] = dict(sorted(mine.items()))
    inputs, outputs = getattr(run, "inputs", None), getattr(run, "outputs", None)
    datasets = [_dataset(d) for d in (getattr(inputs, "dataset_inputs", None) or [])]
    if datasets:
        meta["datasets"] = datasets
    for key, items in (("model_inputs", getattr(inputs, "model_inputs", None)),
                       ("model_outputs", getattr(outputs, "model_outputs", None))):
        if items:
            meta[key] = [{k: getattr(m, k) for k in ("model_id", "step") if hasattr(m, k)} for m in items]
    out.source_meta = meta


def _trackstore_tags(out: ExternalRun, mine: dict[str, str], user: dict[str, str]) -> None:
    """What a trackstore sync to MLflow wrote, given back: host, group, job type, tags."""
    from trackstore.sync.keys import mlflow_key

    out.host = mine.get("trackstore.host") or None
    out.group = mine.get("trackstore.group") or out.group
    out.job_type = mine.get("trackstore.job_type") or None
    try:
        listed = json.loads(mine.get("trackstore.tags") or "[]")
    except ValueError:
        listed = []
    if isinstance(listed, list):
        out.tags += [str(t) for t in listed]
        for t in listed:  # the sync's "<tag>": "true" copies, for MLflow's filter box
            if user.get(mlflow_key(str(t))) == "true":
                del user[mlflow_key(str(t))]


def _dataset(d) -> dict:
    ds = d.dataset
    out = {"name": ds.name, "digest": ds.digest, "source_type": ds.source_type, "source": ds.source}
    for tag in d.tags or []:
        if tag.key == "mlflow.data.context":
            out["context"] = tag.value
    return out


def _status(out: ExternalRun, run, latest_ms: int | None) -> None:
    status = status_from(run.info.status)
    out.status = status
    if status == "running":
        info = run.info
        beat = info.end_time or latest_ms or info.start_time
        out.heartbeat_at = beat / 1000 if beat else None
        out.ended_at = None


# ---------------------------------------------------------------------------- metrics
def _metrics(out: ExternalRun, client, store: _Store, run, progress) -> int | None:
    """Every point of the run; returns the latest point's time (ms), None without points."""
    keys = sorted(run.data.metrics)
    if not keys:
        return None
    latest = None
    if store.kind == "sql":
        try:
            latest = _sql_points(out, store, run.info.run_id)
        except LockHeldError:
            raise
        except Exception as exc:  # a row the arrays cannot hold: MLflow's reader, key by key, says which
            _raise_if_locked(store, exc)
            out.problems.append(f"the metric table of MLflow run {run.info.run_id} in {store.label} could not be read "
                                f"in one query ({_short(exc)}); read key by key instead")
        else:
            if progress is not None:
                progress(len(keys))
            return latest
    for key in keys:
        try:
            history = client.get_metric_history(run.info.run_id, key)
            steps = [int(m.step) for m in history]
            values = [float(m.value) for m in history]
            ts = [int(m.timestamp) * 1000 for m in history]
        except LockHeldError:
            raise
        except Exception as exc:
            _raise_if_locked(store, exc)
            out.problems.append(f"metric {key!r} of MLflow run {run.info.run_id} in {_metric_file(store, run, key)} "
                                f"could not be read: {_short(exc)}")
        else:
            out.add_points(steps, [key] * len(steps), values, ts)
            if ts:
                latest = max(latest or 0, max(ts) // 1000)
        if progress is not None:
            progress(1)
    return latest


def _metric_file(store: _Store, run, key: str) -> str:
    if store.kind == "file" and store.folder is not None:
        return str(store.folder / run.info.experiment_id / run.info.run_id / "metrics" / key)
    return store.label


def _sql_points(out: ExternalRun, store: _Store, run_id: str) -> int | None:
    """All of a run's points in one query on the tracking store's own engine and model.

    The query is built from MLflow's ``SqlMetric`` model and run by SQLAlchemy; its rows are
    taken as the driver's plain tuples (``CursorResult.cursor``) straight into one structured
    numpy array, which is what makes a million points cost about a second rather than three
    (a SQLAlchemy ``Row`` per point, then ``zip``). NaN is MLflow's ``is_nan`` column, as
    ``SqlMetric.to_mlflow_entity`` reads it."""
    import numpy as np
    import pyarrow as pa
    import sqlalchemy as sa
    from mlflow.store.tracking.dbmodels.models import SqlMetric

    engine = _sql_store(store).engine
    m = SqlMetric.__table__.c
    query = sa.select(m.key, m.step, m.timestamp, m.value, m.is_nan).where(m.run_uuid == run_id)
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql(f"PRAGMA busy_timeout = {int(LOCK_WAIT_S * 1000)}")
        result = conn.execute(query)
        rows = result.cursor.fetchall() if getattr(result, "cursor", None) is not None else result.all()
    if not rows:
        return None
    table = np.array(rows, dtype=_SQL_ROW)
    values = table["value"]
    values[table["nan"]] = np.nan
    out.add_points(pa.array(table["step"]), pa.array(table["key"], pa.string()), pa.array(values),
                   pa.array(table["ts"] * 1000))
    return int(table["ts"].max())


_SQL_STORES: dict[str, Any] = {}


def _sql_store(store: _Store):
    """MLflow's ``SqlAlchemyStore`` of the database (its engine is shared with the client's)."""
    if store.uri not in _SQL_STORES:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        root = (store.db_path.parent if store.db_path else Path(tempfile.gettempdir())) / "mlruns"
        _SQL_STORES[store.uri] = SqlAlchemyStore(store.uri, str(root))
    return _SQL_STORES[store.uri]


# ---------------------------------------------------------------------------- traces
def _traces(out: ExternalRun, client, exp_id: str, run_id: str) -> None:
    for trace in _pages(lambda token: client.search_traces(locations=[exp_id], run_id=run_id, max_results=100,
                                                           page_token=token)):
        info = trace.info
        assessments = getattr(info, "assessments", None) or []
        if assessments:
            out.skip("trace assessment", len(assessments))
        spans = list(trace.data.spans)
        root = next((s for s in spans if s.parent_id is None), spans[0] if spans else None)
        fields = _trace_fields(info.tags or {}, root)
        for s in spans:
            out.add_span(_span_row(info.trace_id, s, fields, s is root))


def _trace_fields(tags: dict, root) -> dict:
    """step, sample_index, rollout_n, validate, reward of a trace: its trackstore.* tags, or a
    ``step`` attribute of its root span."""
    out: dict[str, Any] = dict.fromkeys(_TRACE_FIELDS)
    for name in _TRACE_FIELDS:
        text = tags.get(f"trackstore.{name}")
        if text is None:
            continue
        with contextlib.suppress(ValueError):
            out[name] = (text == "True" if name == "validate" else float(text) if name == "reward" else int(text))
    if out["step"] is None and root is not None:
        attrs = root.attributes or {}
        step = attrs.get("step", attrs.get("trackstore.step"))
        if isinstance(step, int) and not isinstance(step, bool):
            out["step"] = step
        elif isinstance(step, str) and step.lstrip("-").isdigit():
            out["step"] = int(step)
    return out


def _span_row(trace_id: str, s, fields: dict, is_root: bool) -> dict:
    from trackstore.records.samples import encode_json
    from trackstore.records.trace import SPAN_KINDS

    attrs = {k: v for k, v in (s.attributes or {}).items() if k not in _SPAN_DUPLICATES}
    events = list(getattr(s, "events", None) or [])
    if events:
        attrs["mlflow.events"] = [{"name": e.name, "timestamp": e.timestamp, "attributes": dict(e.attributes or {})}
                                  for e in events]
    kind = attrs.get("trackstore.kind")
    if kind not in SPAN_KINDS:
        kind = _KINDS.get(str(s.span_type or "").upper(), "other")
    end = s.end_time_ns
    code = str(getattr(s.status, "status_code", "") or "").upper().rsplit(".", 1)[-1]
    if end is None or attrs.get("trackstore.status") == "unfinished":
        status = "unfinished"
    else:
        status = "error" if code == "ERROR" else "ok"
    error = None
    if status == "error":
        error = attrs.get("trackstore.error") or getattr(s.status, "description", None) or next(
            (str(e.attributes.get("exception.message")) for e in events
             if e.name == "exception" and e.attributes and e.attributes.get("exception.message")), None) or "error"
    inputs, outputs = s.inputs, s.outputs
    return {
        "trace_id": trace_id, "span_id": s.span_id, "parent_span_id": s.parent_id, "name": s.name or "",
        "kind": kind, "step": fields["step"], "sample_index": fields["sample_index"],
        "rollout_n": fields["rollout_n"], "validate": fields["validate"],
        "reward": fields["reward"] if is_root else None,
        "start_ns": int(s.start_time_ns), "end_ns": None if end is None or status == "unfinished" else int(end),
        "status": status, "error": error,
        "inputs": None if inputs is None else encode_json(inputs),
        "outputs": None if outputs is None else encode_json(outputs),
        "attributes": encode_json(attrs) if attrs else None,
        "ts": int(end if end is not None else s.start_time_ns) // 1000,
    }


# ---------------------------------------------------------------------------- tables, artifacts
def _logged_tables(run) -> list[str]:
    try:
        listed = json.loads(run.data.tags.get("mlflow.loggedArtifacts") or "[]")
    except ValueError:
        return []
    return [e["path"] for e in listed if isinstance(e, dict) and e.get("type") == "table"
            and isinstance(e.get("path"), str)] if isinstance(listed, list) else []


def _tables(out: ExternalRun, client, store: _Store, run) -> None:
    paths = _logged_tables(run)
    if not paths:
        return
    ts_us = int(run.info.start_time or 0) * 1000
    local = _local_artifacts(run.info.artifact_uri)
    with tempfile.TemporaryDirectory(prefix="trackstore-mlflow-") as tmp:
        for path in paths:
            try:
                if local is not None:
                    file = local / path
                else:
                    file = Path(client.download_artifacts(run.info.run_id, path, dst_path=tmp))
                table = json.loads(file.read_text(encoding="utf-8"))
                columns, data = list(table["columns"]), list(table["data"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                out.problems.append(f"table {path!r} of MLflow run {run.info.run_id} "
                                    f"({local / path if local else store.label}) could not be read: {_short(exc)}")
                continue
            _table_rows(out, path, columns, data, ts_us)


def _table_rows(out: ExternalRun, path: str, columns: list, data: list, ts_us: int) -> None:
    parts = path.split("/")
    split = parts[2] if len(parts) > 3 and parts[:2] == ["trackstore", "samples"] else path.removesuffix(".json")
    for row in data:
        cells = dict(zip((str(c) for c in columns), row))
        step = cells.pop("step", None)
        index = cells.pop("sample_index", None)
        input_col = next((c for c in _INPUT_COLUMNS if c in cells), None)
        output_col = next((c for c in _OUTPUT_COLUMNS if c in cells), None)
        score = cells.get("score")
        if isinstance(score, (int, float)) and not isinstance(score, bool):
            cells.pop("score")
        else:
            score = None
        out.add_sample(step if _is_int(step) else 0,
                       cells.pop(input_col) if input_col else None, cells.pop(output_col) if output_col else None,
                       score=score, split=split, sample_index=index if _is_int(index) else None,
                       extra=cells or None, ts_us=ts_us)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer()


def _local_artifacts(uri: str | None) -> Path | None:
    """The folder of an artifact URI on this machine; None for one elsewhere."""
    if not uri:
        return None
    parts = urlsplit(uri)
    if parts.scheme == "file":
        return Path(unquote(parts.path))
    if parts.scheme == "" or (len(parts.scheme) == 1 and os.name == "nt"):
        return Path(uri)
    return None


def _artifacts(out: ExternalRun, client, store: _Store, run) -> None:
    rid = run.info.run_id
    local = _local_artifacts(run.info.artifact_uri)
    if local is not None and not local.is_dir():
        return  # MLflow makes the folder when the first artifact is logged: none were
    tables = set(_logged_tables(run))
    images = run.data.tags.get("mlflow.loggedImages")
    for entry in client.list_artifacts(rid):
        if entry.is_dir and entry.path == "images" and images:
            n = sum(1 for f in client.list_artifacts(rid, "images") if not f.is_dir and "+compressed" not in f.path)
            out.skip("image", n)
            continue
        if entry.path in tables:
            continue  # its rows are samples
        if local is None:
            out.skip("remote artifact")
            continue
        path = local / entry.path
        if not path.exists():
            out.problems.append(f"artifact {entry.path!r} of MLflow run {rid} is listed but {path} is missing")
            continue
        kind = "model" if (path / "MLmodel").is_file() else "folder" if path.is_dir() else "file"
        out.artifacts.append(ExternalArtifact(path=path, name=_artifact_name(entry.path), type=kind,
                                              metadata={"mlflow_artifact_path": entry.path}))


def _models(out: ExternalRun, client, store: _Store, exp_id: str, run_id: str) -> None:
    """MLflow 3 logged models of the run: described in source_meta, their files as artifacts."""
    models = list(_pages(lambda token: client.search_logged_models(
        experiment_ids=[exp_id], filter_string=f"source_run_id = '{run_id}'", max_results=100, page_token=token)))
    if not models:
        return
    taken = {a.name for a in out.artifacts}
    described = []
    for m in models:
        described.append({"model_id": m.model_id, "name": m.name, "artifact_location": m.artifact_location,
                          "model_type": m.model_type, "status": str(m.status)})
        local = _local_artifacts(m.artifact_location)
        if local is None:
            out.skip("remote model")
            continue
        if not local.is_dir() or not any(local.iterdir()):
            continue  # a model whose files were never uploaded
        name = _artifact_name(m.name or m.model_id)
        if name in taken:
            name = _artifact_name(f"{name}-{m.model_id}")
        taken.add(name)
        out.artifacts.append(ExternalArtifact(path=local, name=name, type="model",
                                              metadata={"mlflow_model_id": m.model_id}))
    out.source_meta["models"] = described


def _artifact_name(path: str) -> str:
    """An artifact name the store takes (no separators, no leading ``.`` or ``_``)."""
    name = _FORBIDDEN.sub("_", path).strip().lstrip("._") or "artifact"
    while len(name) > MAX_NAME_CHARS or len(name.encode("utf-8")) > MAX_NAME_BYTES:
        name = name[:-1]
    return name.rstrip() or "artifact"
