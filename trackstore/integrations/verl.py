"""verl integration: ``trainer.logger='["console","trackstore"]'`` and trace backend ``trackstore``.

How it gets in: trackstore registers an entry point in verl's plugin group ``verl.plugins``
(``pyproject.toml``). verl >= 0.9.0 loads that group at ``import verl`` in *every* process it
starts (the launcher, the Ray ``TaskRunner``, every ``AgentLoopWorker``), which imports
:mod:`trackstore.integrations.verl_plugin`, which calls :func:`install`. Nothing else is needed:
with trackstore installed, adding ``"trackstore"`` to ``trainer.logger`` works.

What :func:`install` changes in verl, in place and idempotently (a second call is a no-op), and
nothing more:

* ``verl.utils.tracking.Tracking``: ``"trackstore"`` is appended to ``supported_backend`` (so
  verl's own assertion accepts it); ``__init__`` is wrapped to add
  ``self.logger["trackstore"] = VerlLogger(project_name, experiment_name, config)`` after verl's
  own setup; ``finish(exit_code)`` is wrapped to finish the trackstore run too (verl's
  ``__del__`` calls ``finish``, so the garbage-collection path of the legacy trainer is covered;
  for verl builds without ``finish`` the ``__del__`` itself is wrapped).
* ``ValidationGenerationsLogger.log(loggers, samples, step)``: when ``"trackstore"`` is among
  the loggers, the ``(input, output, score)`` tuples are stored as samples (split ``val``).
* ``verl.utils.rollout_trace``: ``RolloutTraceConfig.init`` accepts ``backend="trackstore"``;
  ``rollout_trace_attr`` opens one trace per trajectory (step, sample_index, rollout_n,
  validate); ``rollout_trace_op`` records each decorated call as a span under it, with inputs,
  outputs (decoded text added when ``token2text`` is on), timing and errors. Both names are
  replaced in the module before verl's agent-loop modules import them; with any other backend
  they defer to verl's originals unchanged.

Which run: project and experiment name become the run's project and name; the whole Hydra
config (verl passes ``OmegaConf.to_container(config, resolve=True)``) becomes the run config.
``$TRACKSTORE_RUN_ID`` pins the run id (and continues that run as a new attempt if it exists).
Rollout traces are written by the agent-loop worker processes, not by the process that owns
``Tracking``: a worker joins the run of the same project and experiment name that is running in
the store (or ``$TRACKSTORE_RUN_ID``) as an extra writer, and flushes its spans to disk when the
last trajectory of a batch ends (Ray ends workers without running exit handlers, so nothing
may wait in memory for the end of the job). Logging never stops training: a value
trackstore cannot store is skipped with one warning per key, and trace/sample trouble is logged
as a warning.

Supported: verl 0.9.0 and 0.9.1 (the first releases with the ``verl.plugins`` group; tested
with 0.9.1). On older verl (0.6-0.8) there is no plugin hook: call :func:`install` yourself in
every process (metrics and samples then work; the trace backend needs verl >= 0.8.0, and
``token2text`` verl >= 0.9.0).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import logging
import os
import threading
import time
import weakref
from typing import Any, Iterator, Mapping

BACKEND = "trackstore"
ENV_RUN_ID = "TRACKSTORE_RUN_ID"
_MARK = "__trackstore_patched__"

log = logging.getLogger("trackstore.verl")

_lock = threading.RLock()
# Runs opened in this process, by (project, experiment name): the driver's own run, or the run a
# worker joined for its traces. Samples and traces of the same names go to the same run.
_runs: dict[tuple[str, str], Any] = {}
# The runs of _runs this process joined or made for traces (never the run Tracking owns).
_worker_runs: "weakref.WeakSet[Any]" = weakref.WeakSet()


# ---------------------------------------------------------------------- install
def install() -> bool:
    """Patch verl in this process so the ``trackstore`` logger and trace backend exist.

    Idempotent. Returns False (and imports nothing) when verl is not installed.
    """
    import importlib.util

    if importlib.util.find_spec("verl") is None:
        return False
    with _lock:
        from verl.utils import tracking

        _patch_tracking(tracking.Tracking)
        vgl = getattr(tracking, "ValidationGenerationsLogger", None)
        if vgl is not None:
            _patch_validation(vgl)
        try:
            from verl.utils import rollout_trace
        except ImportError:  # very old verl: no rollout tracing at all
            return True
        _patch_rollout_trace(rollout_trace)
    return True


def _marked(fn: Any) -> bool:
    return bool(getattr(fn, _MARK, False))


def _mark(fn: Any, original: Any) -> Any:
    setattr(fn, _MARK, True)
    fn.__trackstore_original__ = original
    return fn


# ---------------------------------------------------------------------- Tracking
def _patch_tracking(Tracking: type) -> None:
    if BACKEND not in Tracking.supported_backend:
        Tracking.supported_backend.append(BACKEND)

    if not _marked(Tracking.__init__):
        original_init = Tracking.__init__

        @functools.wraps(original_init)
        def __init__(self, project_name, experiment_name, default_backend="console", config=None, *args, **kwargs):
            original_init(self, project_name, experiment_name, default_backend, config, *args, **kwargs)
            backends = [default_backend] if isinstance(default_backend, str) else list(default_backend or ())
            if BACKEND in backends:
                self.logger[BACKEND] = VerlLogger(project_name, experiment_name, config)

        Tracking.__init__ = _mark(__init__, original_init)

    original_finish = getattr(Tracking, "finish", None)
    if original_finish is not None:
        if not _marked(original_finish):

            @functools.wraps(original_finish)
            def finish(self, exit_code: int = 0, *args, **kwargs):
                try:
                    return original_finish(self, exit_code, *args, **kwargs)
                finally:
                    adapter = (getattr(self, "logger", None) or {}).get(BACKEND)
                    if adapter is not None:
                        adapter.finish(exit_code)

            Tracking.finish = _mark(finish, original_finish)
    else:  # verl < 0.9: backends are only finished from __del__
        original_del = getattr(Tracking, "__del__", None)
        if not _marked(original_del):

            def __del__(self):
                try:
                    if original_del is not None:
                        original_del(self)
                finally:
                    adapter = (getattr(self, "logger", None) or {}).get(BACKEND)
                    if adapter is not None:
                        adapter.finish(0)

            Tracking.__del__ = _mark(__del__, original_del)


def _plain_config(config: Any) -> dict:
    if config is None:
        return {}
    if type(config).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        config = OmegaConf.to_container(config, resolve=True)
    return dict(config) if isinstance(config, Mapping) else {"config": config}


class VerlLogger:
    """What lands in ``Tracking.logger["trackstore"]``: verl calls ``log(data=..., step=...)``.

    ``log`` never mutates ``data`` (verl hands the same dict to every backend) and never raises
    for a value it cannot store: that key is skipped, with one warning per key.
    """

    def __init__(self, project_name: str, experiment_name: str, config: Any = None):
        import trackstore

        run_id = os.environ.get(ENV_RUN_ID) or None
        self.run = trackstore.init(project=project_name, name=experiment_name, config=_plain_config(config),
                                   run_id=run_id, resume=run_id is not None, tags=["verl"])
        self._skip: set[str] = set()
        self._finished = False
        with _lock:
            _runs[(project_name, experiment_name)] = self.run

    def log(self, data: Mapping[str, Any], step: int) -> None:
        if self._finished:
            return
        if self._skip and not self._skip.isdisjoint(data):
            data = {k: v for k, v in data.items() if k not in self._skip}
        try:
            self.run.log(data, step=step)
        except ValueError:
            self._log_one_by_one(data, step)

    def _log_one_by_one(self, data: Mapping[str, Any], step: int) -> None:
        good = {}
        for key, value in data.items():
            try:
                self.run.log({key: value}, step=step, commit=False)
                good[key] = value
            except ValueError as exc:
                self._skip.add(key)
                log.warning("trackstore: not storing verl metric %r: %s", key, exc)
        # The probe calls above already stored the good values; only advance the counter.
        self.run.log({}, step=step)

    def finish(self, exit_code: int | None = 0) -> None:
        if self._finished:
            return
        self._finished = True
        try:
            self.run.finish(exit_code)
        except Exception as exc:  # finishing must not turn a successful training into a failure
            log.warning("trackstore: finishing run %s: %s", self.run.id, exc)


# ---------------------------------------------------------------------- run lookup for other writers
def _run_for(project: str | None, experiment: str | None) -> Any:
    """The run samples or traces of (project, experiment) go to in this process (opened once)."""
    key = (project or "verl", experiment or "")
    with _lock:
        run = _runs.get(key)
        if run is not None and not run.finished:
            return run
        run = _join_or_create(*key)
        _runs[key] = run
        return run


def _join_or_create(project: str, experiment: str) -> Any:
    """Join the run the driver opened (by ``$TRACKSTORE_RUN_ID``, else the newest running run of
    that project and name) as an extra writer; create a run when there is none.

    A joined run is finished by this process at exit with status ``finished``, which never
    overrides the status the owning process records; it is not failed by this process's SIGTERM
    (Ray stops its workers that way at the end of every job). Between batches this writer is
    recorded as ended (see :func:`_mark_idle`), so a worker that Ray stops without running its
    exit handlers does not make the run look crashed.
    """
    import atexit

    import trackstore
    from trackstore import catalog
    from trackstore import run as run_module

    run_id = os.environ.get(ENV_RUN_ID) or None
    if run_id is None:
        running = [r for r in catalog.list_runs(project=project, status="running") if not experiment or r.name == experiment]
        if running:
            run_id = running[-1].run_id
    if run_id is None:
        run = trackstore.init(project=project, name=experiment or None, tags=["verl"])
    else:
        run = trackstore.init(project=project, run_id=run_id, resume=True)
        run_module._live_runs.discard(run)  # this process is not the run's owner: see the docstring
        atexit.register(_finish_joined, run)
    _worker_runs.add(run)
    return run


def _mark_idle(run: Any, idle: bool) -> None:
    """Record this worker's writer as ended while it has no trajectory open, running again when
    the next batch starts.

    Readers call a run whose writers all died without ending ``crashed``; Ray stops its workers
    with a signal at the end of a job and their exit handlers do not run, so a worker's writer
    would never end. Its data is on disk at that point (the batch's flush), so "ended" is the
    truth. Uses the run's writer record (``Run._writer_info``), as the heartbeat does.
    """
    from trackstore import meta

    info = run._writer_info
    if idle:
        info.update(status="finished", ended_at=meta.iso(time.time()))
    else:
        info.update(status="running", ended_at=None)
    meta.write_writer_file(run.paths, info, durable=idle)


class _Activity:
    """Counts the trajectories (and sample batches) being written in this process.

    When the count falls to zero (a worker's batch is done) the buffered records go to disk now:
    Ray ends worker processes without running their exit handlers, so whatever is still buffered
    when the job ends would otherwise be lost; this happens once per batch. A worker's writer is
    then recorded as ended until the next batch (:func:`_mark_idle`).
    """

    def __init__(self) -> None:
        self._n = 0
        self._lock = threading.Lock()

    def begin(self, run: Any) -> None:
        with self._lock:
            if self._n == 0 and run in _worker_runs:
                try:
                    _mark_idle(run, False)
                except OSError as exc:  # the heartbeat rewrites the writer file anyway
                    log.warning("trackstore: writer file: %s", exc)
            self._n += 1

    def end(self, run: Any, flush: bool) -> None:
        with self._lock:
            self._n -= 1
            if self._n:
                return
            try:
                if flush:
                    run.flush()
                if run in _worker_runs and not run.finished:
                    _mark_idle(run, True)
            except Exception as exc:
                log.warning("trackstore: flushing rollout traces: %s", exc)


_activity = _Activity()


def _finish_joined(run: Any) -> None:
    try:
        run.finish(status="finished")
    except Exception as exc:
        log.warning("trackstore: finishing joined run %s: %s", run.id, exc)


# ---------------------------------------------------------------------- validation generations
def _patch_validation(ValidationGenerationsLogger: type) -> None:
    original_log = ValidationGenerationsLogger.log
    if _marked(original_log):
        return

    @functools.wraps(original_log)
    def log_(self, loggers, samples, step, *args, **kwargs):
        result = original_log(self, loggers, samples, step, *args, **kwargs)
        if BACKEND in list(loggers or ()):
            try:
                run = _run_for(getattr(self, "project_name", None), getattr(self, "experiment_name", None))
                _activity.begin(run)
                try:
                    run.log_samples(list(samples), step=step, split="val")
                finally:
                    _activity.end(run, flush=True)
            except Exception as exc:
                log.warning("trackstore: validation generations at step %s not stored: %s", step, exc)
        return result

    ValidationGenerationsLogger.log = _mark(log_, original_log)


# ---------------------------------------------------------------------- rollout traces
# The trajectory (trackstore trace) the current asyncio task is inside, and its innermost span.
_current_trace: contextvars.ContextVar[Any] = contextvars.ContextVar("trackstore_verl_trace", default=None)


class TraceClient:
    """``RolloutTraceConfig.client`` for backend ``trackstore``: opens trajectories lazily."""

    def __init__(self, project_name: str | None, experiment_name: str | None):
        self.project_name = project_name
        self.experiment_name = experiment_name

    @property
    def run(self) -> Any:
        return _run_for(self.project_name, self.experiment_name)

    @contextlib.contextmanager
    def trajectory(self, name: str, attributes: Mapping[str, Any]) -> Iterator[Any]:
        fields, extra = _trace_fields(attributes)
        try:
            run = self.run
            _activity.begin(run)
        except Exception as exc:
            log.warning("trackstore: rollout trace not recorded: %s", exc)
            yield None
            return
        try:
            tr = run.trace(name=name, **fields, **extra)
            tr.__enter__()
        except Exception as exc:
            log.warning("trackstore: rollout trace not recorded: %s", exc)
            tr = None
        if tr is None:
            try:
                yield None
            finally:
                _activity.end(run, flush=False)
            return
        token = _current_trace.set(tr)
        exc_info: tuple = (None, None, None)
        try:
            yield tr
        except BaseException as exc:
            exc_info = (type(exc), exc, exc.__traceback__)
            raise
        finally:
            _current_trace.reset(token)
            try:
                tr.__exit__(*exc_info)
            except Exception as exc:
                log.warning("trackstore: closing rollout trace: %s", exc)
            _activity.end(run, flush=True)


def _trace_fields(attributes: Mapping[str, Any]) -> tuple[dict, dict]:
    """Split verl's trace attributes into trackstore's trace fields and extra attributes."""
    fields: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key in ("step", "sample_index", "rollout_n"):
        value = attributes.get(key)
        if value is None:
            continue
        try:
            fields[key] = int(value.item() if hasattr(value, "item") else value)
        except (TypeError, ValueError):
            extra[f"verl_{key}"] = str(value)  # e.g. a uuid sample index from extra_info.index
    if "validate" in attributes:
        extra["validate"] = bool(attributes["validate"])
    for key, value in attributes.items():
        if key not in ("step", "sample_index", "rollout_n", "validate") and value is not None:
            extra[key] = value if isinstance(value, (str, int, float, bool)) else str(value)
    return fields, extra


# What the trace patch uses of verl.utils.rollout_trace (present since verl 0.8.0).
_TRACE_NEEDS = ("RolloutTraceConfig", "rollout_trace_attr", "rollout_trace_op", "_trace_enabled",
                "_current_trace_attributes")


def _patch_rollout_trace(rt: Any) -> None:
    missing = [n for n in _TRACE_NEEDS if not hasattr(rt, n)]
    if missing:  # an older verl: metrics and samples work, the trace backend is not offered
        log.info("trackstore: verl's rollout_trace lacks %s; the trackstore trace backend is off", missing)
        return
    config_cls = rt.RolloutTraceConfig
    original_init = config_cls.init.__func__
    if not _marked(original_init):

        def init(cls, project_name, experiment_name, backend, token2text=False, max_samples_per_step_per_worker=None):
            if backend != BACKEND:
                return original_init(cls, project_name, experiment_name, backend, token2text,
                                     max_samples_per_step_per_worker)
            config = cls.get_instance()
            if config._initialized:
                return None
            config.backend = BACKEND
            config.token2text = token2text
            config.project_name = project_name
            config.experiment_name = experiment_name
            config.max_samples_per_step_per_worker = max_samples_per_step_per_worker
            config.client = TraceClient(project_name, experiment_name)
            config._initialized = True
            return None

        functools.update_wrapper(init, original_init)
        config_cls.init = classmethod(_mark(init, original_init))

    if not _marked(rt.rollout_trace_attr):
        original_attr = rt.rollout_trace_attr

        @contextlib.contextmanager
        def rollout_trace_attr(sample_index=None, step=None, rollout_n=None, name="rollout_trace", validate=False,
                               trace: bool = True):
            # verl's original sets its own context (and does nothing else for this backend).
            with original_attr(sample_index=sample_index, step=step, rollout_n=rollout_n, name=name,
                               validate=validate, trace=trace):
                client = config_cls.get_client()
                if not trace or config_cls.get_backend() != BACKEND or not isinstance(client, TraceClient):
                    yield
                    return
                attributes = rt._current_trace_attributes()
                with client.trajectory(name, attributes):
                    yield

        functools.update_wrapper(rollout_trace_attr, original_attr)
        _rebind(rt, "rollout_trace_attr", original_attr, _mark(rollout_trace_attr, original_attr))

    if not _marked(rt.rollout_trace_op):
        original_op = rt.rollout_trace_op

        def rollout_trace_op(func):
            verl_wrapped = original_op(func)
            sig = inspect.signature(func)

            def active() -> bool:
                return config_cls.get_backend() == BACKEND and rt._trace_enabled.get()

            def inputs_of(self, args, kwargs) -> dict:
                bound = sig.bind(self, *args, **kwargs)
                bound.apply_defaults()
                inputs = dict(bound.arguments)
                inputs.pop("self", None)
                return inputs

            if inspect.iscoroutinefunction(func):

                @functools.wraps(func)
                async def async_wrapper(self, *args, **kwargs):
                    if not active():
                        return await verl_wrapped(self, *args, **kwargs)
                    inputs = inputs_of(self, args, kwargs)
                    with _op_span(func.__qualname__, inputs) as record:
                        result = await func(self, *args, **kwargs)
                        record(await _with_text(rt, config_cls, self, inputs, result))
                    return result

                return _mark(async_wrapper, verl_wrapped)

            @functools.wraps(func)
            def wrapper(self, *args, **kwargs):
                if not active():
                    return verl_wrapped(self, *args, **kwargs)
                with _op_span(func.__qualname__, inputs_of(self, args, kwargs)) as record:
                    result = func(self, *args, **kwargs)
                    record(result)
                return result

            return _mark(wrapper, verl_wrapped)

        functools.update_wrapper(rollout_trace_op, original_op)
        _rebind(rt, "rollout_trace_op", original_op, _mark(rollout_trace_op, original_op))


async def _with_text(rt: Any, config_cls: Any, instance: Any, inputs: Mapping[str, Any], result: Any) -> Any:
    """``result`` with verl's token2text fields added (``prompt_text``, ``response_text``) when
    ``token2text`` is on; ``result`` itself if it is off, unavailable (verl < 0.9) or fails."""
    add = getattr(rt, "_add_token2text", None)
    if add is None or not config_cls.enable_token2text():
        return result
    try:
        return await add(instance, inputs, result)
    except Exception as exc:
        log.warning("trackstore: token2text for a span failed: %s", exc)
        return result


def _rebind(module: Any, name: str, original: Any, replacement: Any) -> None:
    """Replace ``module.name`` and every already-imported ``from module import name`` binding."""
    import sys

    setattr(module, name, replacement)
    for mod in list(sys.modules.values()):
        if mod is not None and mod is not module and getattr(mod, "__dict__", {}).get(name) is original:
            try:
                setattr(mod, name, replacement)
            except Exception:
                pass


@contextlib.contextmanager
def _op_span(name: str, inputs: Mapping[str, Any]) -> Iterator[Any]:
    """A span for one traced call, inside the current trajectory (or a trace of its own).

    Yields ``record(outputs)``. An exception of the traced call is recorded on the span and
    re-raised unchanged; trouble recording the span is only logged.
    """
    tr = _current_trace.get()
    owned = None
    outputs: list = []
    try:
        if tr is None:  # a traced call outside any trajectory (e.g. a direct generate call)
            client = _verl_client()
            if client is None:
                raise RuntimeError("no trace client")
            attrs = _verl_attributes()
            fields, extra = _trace_fields(attrs)
            owned = tr = client.run.trace(name=name, **fields, **extra)
            tr.__enter__()
        span_cm = tr.span(name, kind=_span_kind(name), inputs=dict(inputs))
        span = span_cm.__enter__()
    except Exception as exc:
        log.warning("trackstore: span %s not recorded: %s", name, exc)
        yield lambda _outputs: None
        return
    exc_info: tuple = (None, None, None)
    try:
        yield outputs.append
    except BaseException as exc:
        exc_info = (type(exc), exc, exc.__traceback__)
        raise
    finally:
        try:
            if outputs and exc_info[0] is None:
                _set_outputs(span, outputs[-1])
            span_cm.__exit__(*exc_info)
            if owned is not None:
                owned.__exit__(*exc_info)
        except Exception as exc:
            log.warning("trackstore: closing span %s: %s", name, exc)


def _verl_client() -> Any:
    from verl.utils.rollout_trace import RolloutTraceConfig

    client = RolloutTraceConfig.get_client()
    return client if isinstance(client, TraceClient) else None


def _verl_attributes() -> dict:
    from verl.utils import rollout_trace

    return rollout_trace._current_trace_attributes()


def _span_kind(qualname: str) -> str:
    """A coarse span kind from verl's op name: ``llm`` for generation, ``tool`` for tools."""
    lowered = qualname.lower()
    if "generate" in lowered:
        return "llm"
    if "tool" in lowered or "execute" in lowered:
        return "tool"
    if lowered.endswith(".run"):
        return "agent"
    return "other"


def _set_outputs(span: Any, value: Any) -> None:
    setter = getattr(span, "set_outputs", None)
    if callable(setter):
        setter(value)
    else:
        span.outputs = value
