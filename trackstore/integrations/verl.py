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
  they defer to verl's originals unchanged. That part lives in
  :mod:`trackstore.integrations.verl_trace`.

Checkpoints: with ``+trainer.trackstore_log_model=true`` (or ``$TRACKSTORE_LOG_CHECKPOINTS=1``)
each checkpoint verl completes under ``trainer.default_local_dir`` becomes a version of the
run's model artifact, by reference (:class:`CheckpointWatch`).

Which run: project and experiment name become the run's project and name; the whole Hydra
config (verl passes ``OmegaConf.to_container(config, resolve=True)``) becomes the run config.
``$TRACKSTORE_RUN_ID`` pins the run id (and continues that run as a new attempt if it exists).
Rollout traces are written by the agent-loop worker processes, not by the process that owns
``Tracking``: a worker joins the run of the same project and experiment name that is running in
the store (or ``$TRACKSTORE_RUN_ID``) as an extra writer (``trackstore.init(..., join=True)``),
and flushes its spans to disk when the last trajectory of a batch ends (Ray ends workers
without running exit handlers, so nothing may wait in memory for the end of the job); see
:mod:`trackstore.integrations.verl_runs`. Logging never stops training: a value
trackstore cannot store is skipped with one warning per key, and trace/sample trouble is logged
as a warning.

Supported: verl 0.9.0 and 0.9.1 (the first releases with the ``verl.plugins`` group; tested
with 0.9.1). On older verl (0.6-0.8) there is no plugin hook: call :func:`install` yourself in
every process (metrics and samples then work; the trace backend needs verl >= 0.8.0, and
``token2text`` verl >= 0.9.0).
"""

from __future__ import annotations

import functools
import numbers
import os
import threading
from typing import Any, Mapping

from .verl_runs import BACKEND, ENV_RUN_ID, activity, log, mark, marked, register_run, run_for

_lock = threading.RLock()  # one install at a time


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
        from . import verl_trace

        verl_trace.patch(rollout_trace)
    return True


# ---------------------------------------------------------------------- Tracking
def _patch_tracking(Tracking: Any) -> None:
    if BACKEND not in Tracking.supported_backend:
        Tracking.supported_backend.append(BACKEND)

    if not marked(Tracking.__init__):
        original_init = Tracking.__init__

        @functools.wraps(original_init)
        def __init__(self, project_name, experiment_name, default_backend="console", config=None, *args, **kwargs):
            original_init(self, project_name, experiment_name, default_backend, config, *args, **kwargs)
            backends = [default_backend] if isinstance(default_backend, str) else list(default_backend or ())
            if BACKEND in backends:
                self.logger[BACKEND] = VerlLogger(project_name, experiment_name, config)

        Tracking.__init__ = mark(__init__, original_init)

    original_finish = getattr(Tracking, "finish", None)
    if original_finish is not None:
        if not marked(original_finish):

            @functools.wraps(original_finish)
            def finish(self, exit_code: int = 0, *args, **kwargs):
                try:
                    return original_finish(self, exit_code, *args, **kwargs)
                finally:
                    adapter = (getattr(self, "logger", None) or {}).get(BACKEND)
                    if adapter is not None:
                        adapter.finish(exit_code)

            Tracking.finish = mark(finish, original_finish)
    else:  # verl < 0.9: backends are only finished from __del__
        original_del = getattr(Tracking, "__del__", None)
        if not marked(original_del):

            def __del__(self):
                try:
                    if original_del is not None:
                        original_del(self)
                finally:
                    adapter = (getattr(self, "logger", None) or {}).get(BACKEND)
                    if adapter is not None:
                        adapter.finish(0)

            Tracking.__del__ = mark(__del__, original_del)


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
        plain = _plain_config(config)
        self.run = trackstore.init(project=project_name, name=experiment_name, config=plain,
                                   run_id=run_id, resume=run_id is not None, tags=["verl"])
        self._skip: set[str] = set()
        self._finished = False
        self.checkpoints = CheckpointWatch.from_config(plain)
        register_run(project_name, experiment_name, self.run)

    def log(self, data: Mapping[str, Any], step: int) -> None:
        if self._finished:
            return
        if self._skip and not self._skip.isdisjoint(data):
            data = {k: v for k, v in data.items() if k not in self._skip}
        try:
            self.run.log(data, step=step)
        except ValueError:
            self._log_one_by_one(data, step)
        if self.checkpoints is not None:
            self.checkpoints.poll(self.run, data, step)

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


# ---------------------------------------------------------------------- checkpoints
ENV_LOG_CHECKPOINTS = "TRACKSTORE_LOG_CHECKPOINTS"
TRACKER_FILE = "latest_checkpointed_iteration.txt"  # verl writes it once a checkpoint is complete


class CheckpointWatch:
    """verl's checkpoints as versions of the run's model artifact, by reference.

    On with ``+trainer.trackstore_log_model=true`` (the counterpart of ``wandb_log_model``) or
    ``$TRACKSTORE_LOG_CHECKPOINTS=1``. verl saves ``<default_local_dir>/global_step_N/`` and
    then writes ``latest_checkpointed_iteration.txt`` (its marker that the checkpoint is
    complete), before it logs that step's metrics. At each ``log`` the marker is ``stat``-ed (a
    few microseconds); when it names a step not logged yet, ``global_step_N`` becomes the next
    version of ``model-<run id>`` (:meth:`trackstore.Run.log_checkpoint`: aliases ``latest`` and
    ``step-N``, the metrics logged at N as metadata, hashed off the training thread). With
    ``async_save`` verl writes no marker, and no checkpoint is logged.
    """

    def __init__(self, folder: str):
        self.folder = folder
        self.marker = os.path.join(folder, TRACKER_FILE)
        self._seen_mtime: int | None = None
        self._logged: set[int] = set()

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> CheckpointWatch | None:
        section = config.get("trainer")
        trainer: Mapping[str, Any] = section if isinstance(section, Mapping) else {}
        on = trainer.get("trackstore_log_model") or os.environ.get(ENV_LOG_CHECKPOINTS, "").lower() in ("1", "true", "yes")
        folder = trainer.get("default_local_dir")
        if not on or not folder:
            return None
        return cls(str(folder))

    def poll(self, run: Any, data: Mapping[str, Any], step: int) -> None:
        try:
            mtime = os.stat(self.marker).st_mtime_ns
        except OSError:
            return  # no checkpoint saved yet
        if mtime == self._seen_mtime:
            return
        self._seen_mtime = mtime
        try:
            with open(self.marker, encoding="utf-8") as f:
                saved = int(f.read().strip())
        except (OSError, ValueError):
            return
        folder = os.path.join(self.folder, f"global_step_{saved}")
        if saved in self._logged or not os.path.isdir(folder):
            return
        self._logged.add(saved)
        metrics = {k: float(v) for k, v in data.items() if isinstance(v, numbers.Real) and not isinstance(v, bool)} \
            if saved == step else None
        try:
            run.log_checkpoint(folder, step=saved, metrics=metrics)
        except Exception as exc:  # never into training
            log.warning("trackstore: checkpoint %s not logged: %s", folder, exc)


# ---------------------------------------------------------------------- validation generations
def _patch_validation(ValidationGenerationsLogger: Any) -> None:
    original_log = ValidationGenerationsLogger.log
    if marked(original_log):
        return

    @functools.wraps(original_log)
    def log_(self, loggers, samples, step, *args, **kwargs):
        result = original_log(self, loggers, samples, step, *args, **kwargs)
        if BACKEND in list(loggers or ()):
            try:
                run = run_for(getattr(self, "project_name", None), getattr(self, "experiment_name", None))
                activity.begin(run)
                try:
                    run.log_samples(list(samples), step=step, split="val")
                finally:
                    activity.end(run, flush=True)
            except Exception as exc:
                log.warning("trackstore: validation generations at step %s not stored: %s", step, exc)
        return result

    ValidationGenerationsLogger.log = mark(log_, original_log)
