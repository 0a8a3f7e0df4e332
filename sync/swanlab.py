"""SwanLab target: ``trackstore sync --to swanlab [--mode cloud|offline|local] [--host URL]``.

Where: SwanLab cloud by default (``--mode`` or ``$SWANLAB_MODE``; ``online`` and ``cloud`` are
the same), logged in from ``$SWANLAB_API_KEY`` (read by the SwanLab client itself, never by
trackstore, never printed or stored); a self-hosted server with ``--host`` or
``$SWANLAB_API_HOST``; workspace ``--entity``. ``offline`` and ``local`` write SwanLab's own run
folders under ``--logdir``, ``$SWANLAB_LOG_DIR`` or ``<root>/_swanlab``, for ``swanlab sync``.

Mapping (the full table, with what is lost: docs/sync.md § SwanLab):

* run -> one experiment whose id is ``sha1("<project>/<run_id>")[:21]``, opened with
  ``resume="allow"``: every sync continues the same experiment. Name, description (notes),
  tags, group, job type and config travel with ``swanlab.init``, the config flattened with
  readable values; the run's times, status, exit code, host, tags and summary go into
  ``trackstore.*`` config keys (SwanLab has no summary and always stamps the experiment's own
  start/end with "now"). See :mod:`trackstore.sync.swanlab_view`.
* ``--mode local`` needs SwanLab's dashboard package (swanboard, one exact version): refused
  before anything is written when it is missing or another version. Each project's runs go to
  ``<logdir>/<project>`` (the dashboard database holds one project).
* metrics -> one ``log`` per (step, original timestamp) merging every key of that step. SwanLab
  keeps the *first* value of a (key, step) and only appends per key: a second value, or a late
  value for a step at or below the key's last step, is not sent and is counted as skipped.
* original point times: kept through SwanLab's internal event path (the same per-point
  ``timestamp`` its own offline files and ``swanlab sync`` carry), only for client versions
  this module was verified with (:data:`TIMESTAMP_VERIFIED`); any other version falls back to
  the public ``log`` (times = "now") and says so in the sync notes.
* samples -> a list of ``swanlab.Text`` per (split, step) under ``samples/<split>``.
* spans -> one ``swanlab.Text`` per trajectory (an indented rendering of its span tree) per step
  under ``trajectories``; trajectories still running in a live run are deferred; spans without
  a step are reported (SwanLab media need one).
* histograms -> ``swanlab.ECharts(echarts.Bar)`` of the precomputed bins at their steps
  (SwanLab 0.10 has no histogram type).
* artifacts -> ``run.save(file, base_path=<run dir>, policy="now")`` as
  ``artifacts/<name>/v<version>/files/<path in the artifact>`` (the file's path in the store);
  a reference (a checkpoint left where the trainer wrote it), after its size and sha256 are
  checked, as ``<its folder's name>/<path in the artifact>`` (``global_step_100/actor/...``; a
  single file as ``<its folder's name>/<file>``).
  SwanLab has no artifact versions, types or aliases: alias moves are skipped and counted.

Exactly once. SwanLab's client does not make data durable before the session closes (its
offline store is never flushed before ``finish``; after a SIGKILL the file can be empty), so a
row handed to the client is not yet a row the target holds. The adapter declares
``confirms_on_close``: the engine keeps the cursor as it was when the session began until
:meth:`SwanlabAdapter.close_run` returns, which it does only once SwanLab confirms the rows
(offline/local: the closed session file, read back, holds every value handed over; cloud: the
uploader drained). After a session that never got there, the engine goes back to that cursor
and hands this adapter the rows again through ``reconcile``; such a row (and every row of an
in-doubt batch) passes SwanLab's rules and is then checked against what the target holds
before it is logged: in offline/local mode exactly, by reading every earlier session folder of
the experiment with SwanLab's own reader; in cloud mode by SwanLab itself, which drops (key,
step) pairs at or below the server's last step on resume (its per-key summary is counted
asynchronously: resuming seconds after a cut can still append a duplicate; the adapter waits
:data:`CLOUD_SETTLE_S` after the last send before re-sending, see docs/sync-swanlab.md).

Client version: swanlab >= 0.10.3 (:data:`MIN_SWANLAB`, the version the tests run): the reader of
its run files, its ``Settings`` and ``finish(state=...)`` are those of the 0.10 SDK. An older
client is refused when the target is created, before anything is sent (a usage error, exit 2).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from trackstore.errors import PermanentError, RetryableError, UsageError
from trackstore.store.layout import target_dir
from trackstore.store.ranges import RangeSet
from trackstore.store.redact import redact_text, redact_url
from trackstore.store.vocab import REPLAY_ORDER, Kind, RunStatus

from .adapter import Adapter, Capabilities, MetricKeys, Opened, SendResult, TargetOptions, require_client
from .http import classify, probe, proxy_environment
from .keys import rename_reason, swanlab_key
from .swanlab_files import Held, count_points, read_session_file, read_session_files
from .swanlab_media import histogram_chart, present_images, sample_items, swanlab_images, trajectory_items
from .swanlab_view import project_logdir, readable_config, require_swanboard

__all__ = ["SwanlabAdapter", "experiment_id", "swanlab_key", "count_points", "read_session_files"]

#: client versions whose internal event path was verified to keep per-point timestamps
TIMESTAMP_VERIFIED = ("0.10.",)
MODES = {"cloud": "online", "online": "online", "offline": "offline", "local": "local"}
DEFAULT_HOST = "https://api.swanlab.cn"
#: the oldest swanlab client this target runs with (what the tests run; pyproject's floor)
MIN_SWANLAB = (0, 10, 3)
FINISH_STATE = {RunStatus.FINISHED: "success", RunStatus.FAILED: "crashed", RunStatus.CRASHED: "aborted"}
MAX_KEY = 512
MAX_STEP = 2 ** 48
#: seconds SwanLab cloud may need to count a cut session's steps before a resume sees them
CLOUD_SETTLE_S = 15.0

SKIP_SECOND = "a second value for a (key, step) SwanLab already holds (SwanLab keeps the first)"
SKIP_OLD = "a late value at or below the key's last step at SwanLab (SwanLab is append-only per key)"
SKIP_NULL = "metric value is null"
HIST_LOCAL = ("histograms are kept as ECharts bar charts in the run files, which SwanLab's local dashboard "
              "(swanboard) does not draw; SwanLab cloud draws them after `swanlab sync`")
SKIP_KEY = "key is empty after SwanLab's trimming of leading/trailing '.', '/' and spaces"
SKIP_NO_STEP = "trajectory without a step (SwanLab media need one)"
SKIP_STEP = "step outside SwanLab's range 0..2**48"
SKIP_MISSING = "artifact file missing from the store"
SKIP_ALIAS = "SwanLab has no artifact aliases"
SKIP_TYPE = "key already used at SwanLab for another type (a scalar and a chart or text cannot share a key)"


def experiment_id(project: str, run_id: str) -> str:
    """The SwanLab experiment id of a trackstore run: 21 chars of [0-9a-f], stable for ever."""
    return hashlib.sha1(f"{project}/{run_id}".encode()).hexdigest()[:21]




class SwanlabAdapter(Adapter):
    name = "swanlab"
    CAPABILITIES = Capabilities(
        kinds=REPLAY_ORDER,
        batch_sizes={Kind.METRICS: 10000, Kind.HISTOGRAMS: 500, Kind.SAMPLES: 1000, Kind.SPANS: 2000, Kind.ARTIFACTS: 50},
        # SwanLab takes one value per (key, step): a step must never straddle two batches
        group_columns={Kind.METRICS: "step", Kind.HISTOGRAMS: "step", Kind.SAMPLES: "step", Kind.SPANS: "step",
                       Kind.IMAGES: "step"},
        confirms_on_close=True,  # rows are durable once the session's finish is confirmed
        max_jobs=1, why_max_jobs="swanlab.init keeps one run per process")

    def __init__(self, options: TargetOptions):
        super().__init__(options)
        require_client("swanlab", MIN_SWANLAB, "SwanLab")
        raw = (options.mode or os.environ.get("SWANLAB_MODE") or "cloud").strip().lower()
        if raw not in MODES:
            raise UsageError(f"--mode for swanlab must be cloud, offline or local, not {raw!r}")
        self.mode = MODES[raw]
        if self.mode == "local":
            require_swanboard()  # else SwanLab writes no dashboard database, silently
        self.host = options.uri or os.environ.get("SWANLAB_API_HOST")
        default_dir = target_dir(options.store_root or ".", "swanlab")
        self.logdir = Path(options.logdir or os.environ.get("SWANLAB_LOG_DIR") or default_dir).absolute()
        self._run = None            # the open swanlab Run (one per process at a time)
        self._cursor = None         # the cursor of the run whose session is open
        self._info = None
        self._log_fn = None
        self._held: Held | None = None
        self._doubt: dict[str, RangeSet] = {}   # rows of an in-doubt batch (this session only)
        self._problem: str | None = None        # why this session's rows are not confirmed
        self._notes: list[str] = []
        self._values = 0            # values handed to SwanLab in this session
        self._plan: tuple | None = None  # (run, scratch key state) of a --dry-run: see prepare()
        self._folders: dict[str, list[str]] = {}  # experiment id -> session folders this process wrote

    # ------------------------------------------------------------------ plumbing
    def destination(self) -> str:
        if self.mode == "online":
            where = redact_url((self.host or DEFAULT_HOST).rstrip("/"))
        else:
            where = f"{self.mode}:{self.logdir}"
        return f"{where}/{self.options.entity}" if self.options.entity else where

    @property
    def capabilities(self) -> Capabilities:
        """offline and local write SwanLab's run folders on this machine, for ``swanlab sync``:
        staging."""
        return replace(self.CAPABILITIES, staging=self.mode != "online")

    def upload_command(self, cursor) -> str | None:
        """``swanlab sync --id EXP FOLDER`` for each session folder this process wrote for the
        run (SwanLab's sync makes a new experiment unless given its id, and takes one folder per
        ``--id``)."""
        import shlex

        exp = cursor.remote.get("id")
        if not self.capabilities.staging or not exp:
            return None
        folders = self._folders.get(exp) or []
        return " && ".join(f"swanlab sync --id {shlex.quote(exp)} {shlex.quote(f)}" for f in folders) or None

    def check_online(self) -> None:
        if self.mode != "online":
            return
        probe((self.host or DEFAULT_HOST).rstrip("/"), what=f"SwanLab at {self.destination()}",
              timeout=self.options.timeout, proxy=self.options.proxy)

    def _settings(self):
        from swanlab import Settings

        # no terminal capture (trackstore's own output is not the run's), no probes: the
        # machine doing the sync is not the machine that trained
        kw: dict[str, Any] = dict(
            interactive=False,
            terminal=Settings.Terminal(proxy_type="none"),
            probe=Settings.Probe(hardware=False, runtime=False, requirements=False, conda=False, git=False,
                                 swanlab=False, monitor=False),
        )
        if self.host:
            kw["api_host"] = self.host
        return Settings(**kw)

    @staticmethod
    def _quiet() -> None:
        """SwanLab prints banners and warnings with its own rich console: keep cron output to
        what trackstore says (SwanLab still writes its debug log in the run folder)."""
        try:
            from swanlab.sdk.internal.pkg import console

            console.c.quiet = True
        except Exception:
            pass

    def _wrap(self, exc: Exception, what: str) -> Exception:
        return classify(exc, redact_text(f"swanlab {what}: {exc}"))

    # ------------------------------------------------------------------ sessions
    def open_run(self, run, cursor) -> str:
        known = bool(cursor.remote.get("id"))
        if self._run is not None:
            self.close()
        self._quiet()
        import swanlab

        meta = run.meta
        exp = experiment_id(run.project, run.run_id)
        project = self.options.project or run.project
        logdir = project_logdir(self.logdir, project, self.mode)
        logdir.mkdir(parents=True, exist_ok=True)  # cloud mode keeps SwanLab's local copy here too
        self._settle(cursor)
        proxy_environment(self.options.proxy)  # SwanLab's client has no proxy parameter
        try:
            self._run = swanlab.init(
                project=project, workspace=self.options.entity, name=run.name,
                description=str(meta.get("notes") or "") or None, tags=[str(t) for t in meta.get("tags") or []] or None,
                group=meta.get("group"), job_type=meta.get("job_type"), config=self._config(run, run.status),
                id=exp, resume="allow", mode=self.mode, log_dir=str(logdir), settings=self._settings(),
                reinit=True)
        except Exception as exc:
            self._run = None
            raise self._wrap(exc, "init") from exc
        self._cursor, self._info = cursor, run
        if self.capabilities.staging:
            self._folders.setdefault(exp, []).append(str(Path(self._run.dir)))
        cursor.remote_id = exp
        cursor.remote.update(id=exp, project=project, mode=self.mode)
        self._doubt = {}
        self._problem = None
        self._values = 0
        self._held = None
        self._log_fn = self._event_logger()
        if self._log_fn is None:
            self._notes.append(f"original point times not kept: swanlab {swanlab.__version__} is not a client "
                               f"version trackstore verified its timestamp path with; points carry sync time")
        return Opened.FOUND if known else Opened.CREATED

    def _settle(self, cursor) -> None:
        """Cloud only: before re-sending rows of a cut session, give the server time to count
        the steps it received (its per-key summary is updated asynchronously; a resume that
        reads a stale summary would append duplicates instead of dropping them)."""
        if self.mode != "online" or not (cursor.recheck or cursor.in_doubt):
            return
        import time

        from trackstore.store.clock import parse_iso

        wait = (parse_iso(cursor.last_send_at) or 0) + CLOUD_SETTLE_S - time.time()
        if wait > 0:
            time.sleep(min(wait, CLOUD_SETTLE_S))

    def _config(self, run, status: str) -> dict:
        meta = run.meta
        extra = {"run_id": run.run_id, "project": run.project, "status": status, "created_at": meta.get("created_at"),
                 "ended_at": meta.get("ended_at"), "exit_code": meta.get("exit_code"), "host": meta.get("host"),
                 "user": meta.get("user"), "git_commit": (meta.get("git") or {}).get("commit"),
                 "summary": meta.get("summary_user") or {}}
        extra["tags"] = ", ".join(str(t) for t in meta.get("tags") or []) or None
        return readable_config(meta.get("config") or {}, extra)

    def _event_logger(self):
        """``log(data, step, ts_us)`` keeping the original time, or None to use the public API.

        SwanLab's public ``log`` stamps "now"; its internal ``MetricLogEvent`` carries the time
        its offline files and ``swanlab sync`` use. This path is used only with verified client
        versions and when every internal it needs is where it was verified."""
        import swanlab

        if not str(getattr(swanlab, "__version__", "")).startswith(TIMESTAMP_VERIFIED):
            return None
        try:
            from google.protobuf.timestamp_pb2 import Timestamp
            from swanlab.sdk.internal.bus import MetricLogEvent
            from swanlab.sdk.internal.run import fmt

            run = self._run
            emitter, ctx, lock = run._components.emitter, run._ctx, run._api_lock
            validate, flatten, next_step = fmt.safe_validate_log_data, fmt.flatten_dict, ctx.next_step
            MetricLogEvent(data={}, step=0, timestamp=Timestamp())  # the event still has this shape
            if not (callable(emitter.emit) and callable(next_step)):
                return None
        except Exception:
            return None

        def log(data: dict, step: int, ts_us: int) -> None:
            with lock:
                flat = flatten(validate(data))
                ts = Timestamp()
                ts.FromMicroseconds(int(ts_us))
                emitter.emit(MetricLogEvent(data=flat, step=next_step(step), timestamp=ts))

        return log

    def _log(self, data: dict, step: int, ts_us: int) -> None:
        if not data:
            return
        if self._log_fn is not None:
            self._log_fn(data, step, ts_us)
        else:
            self._run.log(data, step=step)
        self._values += len(data)

    def _close_session(self, state: str = "success", error: str | None = None) -> None:
        """Finish the SwanLab session; raise PermanentError unless SwanLab confirms every value
        it was handed is durable. SwanLab's ``finish`` reports trouble only on its console, so
        this checks: offline/local, the closed file is read back and must hold every value
        handed over; cloud, the uploader must have drained. Unconfirmed, the engine keeps the
        session's rows to be checked and re-sent by the next sync."""
        run = self._run
        self._run = None
        if run is None:
            return
        try:
            run.finish(state=state, error=error)
        except Exception as exc:
            raise self._wrap(exc, "finish") from exc
        problem = self._unconfirmed(run)
        if problem is not None:
            self._problem = f"{problem}; the next sync checks this session's rows and re-sends what is missing"
            raise PermanentError(self._problem)

    def _unconfirmed(self, run) -> str | None:
        if self.mode == "online":
            core = getattr(run, "_core", None)
            if core is not None and getattr(core, "_transport", None) is not None:
                return "SwanLab's uploader did not deliver every record (see the debug log in the SwanLab run folder)"
            return None
        written = sum(1 for rec in read_session_file(Path(run.dir) / f"run-{run.id}.swanlab")
                      if rec.WhichOneof("record_type") in ("scalar", "media"))
        if written < self._values:
            return (f"SwanLab wrote {written} of the {self._values} values of this session to {run.dir} "
                    f"(see its debug/debug.log)")
        return None

    def close_run(self, cursor) -> None:
        """Close the session (if ``finish_run`` or ``verify`` did not); raise unless SwanLab
        confirmed every value this session was handed."""
        self._close_session()
        if self._problem is not None:
            raise PermanentError(self._problem)

    def close(self) -> None:
        try:
            self._close_session()
        except Exception:
            pass  # unconfirmed: the engine's cursor keeps the session, the next sync re-checks its rows

    # ------------------------------------------------------------------ target truth
    def _held_index(self) -> Held | None:
        """(key, step) pairs earlier sessions wrote (offline/local); None in cloud mode, where
        SwanLab's own resume guard drops what the server holds."""
        if self.mode == "online":
            return None
        if self._held is None:
            exp = self._cursor.remote["id"]
            current = Path(self._run.dir) if self._run is not None else None
            self._held = Held(project_logdir(self.logdir, self._cursor.remote["project"], self.mode), exp, current)
        return self._held

    def reconcile(self, kind: str, rows, cursor, batch_id: str):
        """The rows of an in-doubt batch, all of them: the batch is sent again as it was, and
        ``send`` checks each row that passes SwanLab's rules against what the target holds, so
        duplicates and late values are counted exactly as the interrupted send counted them."""
        ids = RangeSet()
        ids.add_table(rows)
        self._doubt.setdefault(kind, RangeSet()).update(ids)
        return rows

    # ------------------------------------------------------------------ records
    def prepare(self, run, cursor, metric_keys: MetricKeys | None = None) -> None:
        """Before a run's rows are planned: a scratch copy of the key state SwanLab's rules read
        (``key_max``, ``media_keys`` in ``cursor.remote``), which :meth:`unsupported` plays the
        batches of a ``--dry-run`` through, as :meth:`send` does on the cursor's own."""
        import copy

        state = {k: copy.deepcopy(cursor.remote.get(k)) for k in ("key_max", "media_keys") if k in cursor.remote}
        self._plan = (run, state)

    def send(self, kind: str, rows, cursor, batch_id: str) -> SendResult:
        state = self._cursor.remote
        if kind == Kind.METRICS:
            result, points = self._plan_metrics(rows, state, self._info, sending=True)
            try:
                for (s, t), data in points.items():
                    self._log(data, s, t)
            except Exception as exc:
                raise self._wrap(exc, "log") from exc
            return result
        if kind in (Kind.SAMPLES, Kind.HISTOGRAMS, Kind.SPANS, Kind.IMAGES):
            result, groups = self._plan_media(kind, rows, state, self._info, sending=True)
            self._log_media(kind, groups)
            return result
        if kind == Kind.ARTIFACTS:
            return self._send_artifacts(rows)
        result = SendResult()
        result.skip(f"swanlab cannot hold {kind}", rows.num_rows)
        return result

    def _doubtful(self, kind: str, row: dict) -> bool:
        """A row of a batch the engine reconciled (in doubt, or handed to a session that never
        confirmed): SwanLab's rules apply, then what the target holds is not logged again."""
        return (row["writer"], row["seq"]) in self._doubt.get(kind, ())

    def _admit(self, state: dict, key: str, step: int, doubt: bool, seen: set, result: SendResult, n: int = 1,
               media: bool = False) -> bool:
        """Whether a value for (key, step) is to be logged now, by SwanLab's rules and the key
        state (``state``: the cursor's ``remote``, or a dry run's scratch copy, updated here).
        Rejections are counted in ``result``; a value the target already holds is neither
        logged nor counted."""
        if not 0 <= step <= MAX_STEP:
            result.skip(SKIP_STEP, n)
            return False
        key_max = state.setdefault("key_max", {})
        media_keys = state.setdefault("media_keys", [])
        if key in key_max and (key in media_keys) != media:
            result.skip(SKIP_TYPE, n)  # SwanLab would drop it without a word
            return False
        if (key, step) in seen:
            result.skip(SKIP_SECOND, n)
            return False
        seen.add((key, step))
        if media and key not in key_max:
            media_keys.append(key)
        if key_max.get(key, -1) >= step:
            result.skip(SKIP_OLD, n)
            return False
        key_max[key] = max(key_max.get(key, -1), step)
        if doubt:
            held = self._held_index()
            if held is not None and (key, step) in held.points:
                return False
        return True

    def _plan_metrics(self, rows, state: dict, run, *, sending: bool):
        """What one batch of metrics becomes: ``(result, points)``, the skips counted and the
        values to log per (step, timestamp in microseconds), in replay order. The one decision
        for :meth:`send` and for ``--dry-run`` (``sending=False``: nothing is in doubt)."""
        result = SendResult()
        keys = rows.column("key").to_pylist()
        values = rows.column("value").to_pylist()
        steps = rows.column("step").to_pylist()
        ts = rows.column("ts").cast("int64").to_pylist()  # microseconds
        writers = rows.column("writer").to_pylist()
        seqs = rows.column("seq").to_pylist()
        doubtful = self._doubt.get("metrics", ()) if sending else ()
        doubt = [(w, q) in doubtful for w, q in zip(writers, seqs)]
        order = sorted(range(rows.num_rows), key=lambda i: (steps[i], i))
        seen: set = set()
        points: dict[tuple[int, int], dict] = {}  # (step, ts_us) -> {key: value}, in replay order
        for i in order:
            if values[i] is None:
                result.skip(SKIP_NULL)
                continue
            sk = swanlab_key(keys[i])
            if sk != keys[i]:
                result.skipped[rename_reason("SwanLab", keys[i], sk)] = 0
            if not sk:
                result.skip(SKIP_KEY)
                continue
            if not self._admit(state, sk, steps[i], doubt[i], seen, result):
                continue
            points.setdefault((steps[i], ts[i]), {})[sk] = values[i]
        return result, points

    def _plan_media(self, kind: str, rows, state: dict, run, *, sending: bool):
        """Samples, histograms and trajectories: one media value per (key, step). ``(result,
        groups)``: the skips and deferred rows, and the admitted ``(key, step, rows)`` groups."""
        result = SendResult()
        data = rows.to_pylist()
        if kind == Kind.SPANS:
            groups, deferred = self._trajectory_groups(data, result, live=run is not None and run.status == RunStatus.RUNNING)
            result.defer(deferred)
        else:
            groups = {}
            if kind == Kind.IMAGES:
                data = present_images(data, run, result)
            for i, r in enumerate(data):
                key = f"samples/{r.get('split') or 'val'}" if kind == Kind.SAMPLES else r["key"]
                # a histogram is one chart: each row is its own value; samples of a step form one list
                gid = (int(r["step"]), swanlab_key(key), i if kind == Kind.HISTOGRAMS else 0)
                groups.setdefault(gid, []).append(r)
        seen: set = set()
        admitted = []
        for gid in sorted(groups, key=lambda g: g[0]):
            group = groups[gid]
            step, key = gid[0], gid[1]
            if not key:
                result.skip(SKIP_KEY, len(group))
                continue
            doubt = sending and self._doubtful(kind, group[0])
            if self._admit(state, key, step, doubt, seen, result, len(group), media=True):
                admitted.append((key, step, group))
        if kind == Kind.HISTOGRAMS and self.mode == "local" and data:
            result.skipped[HIST_LOCAL] = 0
        return result, admitted

    def _log_media(self, kind: str, groups: list) -> None:
        import swanlab

        try:
            for key, step, group in groups:
                first = group[0]
                if kind == Kind.SAMPLES:
                    value = [swanlab.Text(text, caption=caption) for caption, text in sample_items(group)]
                elif kind == Kind.HISTOGRAMS:
                    value = histogram_chart(first)
                elif kind == Kind.IMAGES:
                    value = swanlab_images(swanlab, self._info.paths.dir, group)
                else:
                    value = [swanlab.Text(text, caption=caption) for caption, text in trajectory_items(group)]
                self._log({key: value}, step, int(first["ts"].timestamp() * 1_000_000))
        except (RetryableError, PermanentError):
            raise
        except Exception as exc:
            raise self._wrap(exc, f"log {kind}") from exc

    def _trajectory_groups(self, data: list[dict], result: SendResult, *, live: bool):
        """Spans grouped by step; a step whose trajectories are still running in a live run is
        deferred whole (SwanLab takes one value per step, so it must be complete when sent)."""
        by_step: dict[int, list[int]] = {}
        for i, r in enumerate(data):
            if r.get("step") is None:
                result.skip(SKIP_NO_STEP)
                continue
            by_step.setdefault(int(r["step"]), []).append(i)
        groups: dict[tuple, list[dict]] = {}
        deferred: list[int] = []
        for step, idx in by_step.items():
            rows = [data[i] for i in idx]
            finals = {(r["trace_id"], r["span_id"]) for r in rows if r["status"] != "unfinished"}
            open_spans = [r for r in rows if r["status"] == "unfinished" and (r["trace_id"], r["span_id"]) not in finals]
            if live and open_spans:
                deferred.extend(idx)
                continue
            groups[(step, "trajectories", 0)] = rows
        return groups, deferred

    def _send_artifacts(self, rows) -> SendResult:
        from .artifact_rows import is_alias_move, local_file

        result = SendResult()
        run_dir = Path(self._info.paths.dir)
        for r in rows.to_pylist():
            if is_alias_move(r):
                result.skip(SKIP_ALIAS)  # SwanLab has files, not artifact versions
                continue
            local, why = local_file(run_dir, r)
            if local is None:
                result.skip(why or SKIP_MISSING)
                continue
            # a copy keeps its path in the store; a reference is saved under its own folder's
            # name (SwanLab names a file by its path below base_path)
            base = run_dir if r.get("storage") != "reference" else _reference_base(local, r["logical_path"])
            name = local.relative_to(base).as_posix()
            if self._doubtful("artifacts", r):
                held = self._held_index()
                if held is not None and name in held.saves:
                    continue
            try:
                self._run.save(str(local), base_path=str(base), policy="now")
            except Exception as exc:
                raise self._wrap(exc, "save") from exc
        return result

    # ------------------------------------------------------------------ end of run
    def sync_metadata(self, run, cursor) -> list[str]:
        notes, self._notes = self._notes, []
        return notes

    def finish_run(self, run, cursor, status: str) -> None:
        try:
            self._run.config.update({k: v for k, v in self._config(run, status).items() if k.startswith("trackstore.")})
        except Exception as exc:
            raise self._wrap(exc, "config") from exc
        if status == RunStatus.RUNNING:
            return  # a resumed run: the session closes at the end of this sync, still "running" in config
        error = None
        if status != RunStatus.FINISHED:
            parts = [f"trackstore status {status}"]
            if run.meta.get("exit_code") is not None:
                parts.append(f"exit_code={run.meta['exit_code']}")
            if run.meta.get("error"):
                parts.append(str(run.meta["error"]))
            error = "; ".join(parts)
        self._close_session(FINISH_STATE[status], error)

    def verify(self, run, cursor) -> dict[str, int]:
        """Counts read back from SwanLab's own files (offline/local). Cloud mode has no
        read-back of the server here, which is an error rather than a false "verified"."""
        if self.mode == "online":
            raise PermanentError("--verify reads back SwanLab's run files, which only --mode offline/local write; "
                                 "in cloud mode check the experiment in SwanLab instead (the data was sent)")
        if self._run is not None:
            self._close_session()
        logdir = project_logdir(self.logdir, self.options.project or run.project, self.mode)
        return count_points(logdir, experiment_id(run.project, run.run_id))

    def unsupported(self, kind: str, rows) -> dict[str, int]:
        """What :meth:`send` will report for this batch, without sending (``--dry-run``): the
        same plan, played on the scratch key state :meth:`prepare` copied from the cursor. The
        engine hands a dry run's batches in the sync's order, so second and late values for a
        (key, step) are predicted too."""
        run, state = self._plan if self._plan is not None else (None, {})
        if kind == Kind.METRICS:
            result, _points = self._plan_metrics(rows, state, run, sending=False)
        elif kind in (Kind.SAMPLES, Kind.HISTOGRAMS, Kind.SPANS, Kind.IMAGES):
            result, _groups = self._plan_media(kind, rows, state, run, sending=False)
        elif kind == Kind.ARTIFACTS:
            result = SendResult()
            run_dir = Path(run.paths.dir) if run is not None else None
            for r in rows.to_pylist():
                if run_dir is not None and not (run_dir / r["path"]).is_file():
                    result.skip(SKIP_MISSING)
        else:
            result = SendResult()
            result.skip(f"swanlab cannot hold {kind}", rows.num_rows)
        return dict(result.skipped)


def _reference_base(path: Path, logical_path: str) -> Path:
    """The folder a referenced file is saved relative to: one above the artifact's own root, so
    the saved name starts with the referenced folder's name (a single file: its folder's)."""
    base = path.parent
    for _ in logical_path.split("/"):
        base = base.parent
    return base
