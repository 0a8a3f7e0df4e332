"""PyTorch Lightning integration: ``Trainer(logger=TrackstoreLogger(project="p"))``.

A :class:`lightning.pytorch.loggers.Logger` (``pytorch_lightning``'s when only that package is
installed). Promises:

* Only global rank 0 writes (``rank_zero_only`` on every write, ``experiment`` is a dummy on
  other ranks), so a multi-GPU job makes one run, not one per rank.
* ``save()`` is cheap. Lightning calls it after *every* ``log_metrics``; trackstore's writer
  already buffers in memory and flushes on its own timer (and at finish, exit or SIGTERM), so
  there is nothing to do on the training thread.
* ``log_hyperparams`` (from ``save_hyperparameters()``) merges into the run config;
  ``log_metrics`` stores each value at Lightning's ``step``; ``finalize("success")`` finishes
  the run, ``finalize("failed")`` marks it failed.
* ``save_dir`` is ``None``, so checkpoints stay under the Trainer's ``default_root_dir`` and
  never land inside the store; ``log_dir`` is the run folder; ``name`` is the run name and
  ``version`` the run id.
* Checkpoints (``log_checkpoints=True`` or ``$TRACKSTORE_LOG_CHECKPOINTS=1``, like
  ``WandbLogger(log_model="all")``): at each ``after_save_checkpoint`` every checkpoint file
  the ``ModelCheckpoint`` callback holds and not logged yet becomes the next version of the
  run's model artifact by reference (:meth:`trackstore.Run.log_checkpoint`: aliases ``latest``
  and ``step-N``, the metrics the callback saw as metadata, hashed off the training thread),
  and ``best`` moves to the version of ``best_model_path``.
"""

from __future__ import annotations

import os
from argparse import Namespace
from typing import Any, Iterable, Mapping

from ..store.vocab import RunStatus

try:
    from lightning.fabric.utilities.rank_zero import rank_zero_only
    from lightning.pytorch.loggers import Logger
    from lightning.pytorch.loggers.logger import rank_zero_experiment
except ImportError:  # the standalone pytorch_lightning package
    from pytorch_lightning.loggers import Logger
    from pytorch_lightning.loggers.logger import rank_zero_experiment
    from pytorch_lightning.utilities.rank_zero import rank_zero_only

_STATUS = {"success": RunStatus.FINISHED, "finished": RunStatus.FINISHED, "failed": RunStatus.FAILED}


class TrackstoreLogger(Logger):
    """Log a Lightning run to trackstore. The run starts at the first write on rank 0.

    ``project`` (default ``$TRACKSTORE_PROJECT`` or ``"lightning"``), ``name``, ``config``,
    ``tags`` and ``root`` are passed to :func:`trackstore.init`; ``run_id`` with
    ``resume=True`` continues an existing run as a new attempt.
    """

    def __init__(self, project: str | None = None, name: str | None = None, *, config: Mapping[str, Any] | None = None,
                 tags: Iterable[str] | None = None, root: str | os.PathLike | None = None, run_id: str | None = None,
                 resume: bool = False, log_checkpoints: bool | None = None):
        super().__init__()
        self._log_checkpoints = log_checkpoints if log_checkpoints is not None else \
            os.environ.get("TRACKSTORE_LOG_CHECKPOINTS", "").lower() in ("1", "true", "yes")
        self._checkpoints: dict[str, Any] = {}  # checkpoint file -> its version's future
        self._best: str | None = None
        self._project = project or os.environ.get("TRACKSTORE_PROJECT") or "lightning"
        self._name = name
        self._config = dict(config or {})
        self._tags = list(tags) if tags is not None else ["lightning"]
        self._root = root
        self._run_id = run_id
        self._resume = resume
        self._run: Any = None

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        """The :class:`trackstore.Run` (started on first access)."""
        if self._run is None:
            import trackstore

            self._run = trackstore.init(project=self._project, name=self._name, config=self._config,
                                        tags=self._tags, root=self._root, run_id=self._run_id, resume=self._resume)
            self._run_id = self._run.id
        return self._run

    @property
    def name(self) -> str:
        return self._name or (self._run.name if self._run is not None else self._project)

    @property
    def version(self) -> str:
        return self._run_id or (self.experiment.id if rank_zero_only.rank == 0 else "")

    @property
    def save_dir(self) -> None:
        return None

    @property
    def log_dir(self) -> str | None:
        return str(self._run.dir) if self._run is not None else None

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        if isinstance(params, Namespace):
            params = vars(params)
        self.experiment.config.update({str(k): v for k, v in dict(params or {}).items()})

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self.experiment.log(dict(metrics), step=step)

    @rank_zero_only
    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        if not self._log_checkpoints:
            return
        try:
            self._log_saved(checkpoint_callback)
        except Exception as exc:  # never into training
            import logging

            logging.getLogger("trackstore.lightning").warning("trackstore: checkpoint not logged: %s", exc)

    def _log_saved(self, callback: Any) -> None:
        run = self.experiment
        paths = dict.fromkeys([*getattr(callback, "best_k_models", {}), getattr(callback, "last_model_path", ""),
                               getattr(callback, "best_model_path", "")])
        for path in paths:
            if not path or path in self._checkpoints or not os.path.isfile(path):
                continue
            # the trainer's global step when ModelCheckpoint saved (its own record of it), else
            # the step logged last
            step = getattr(callback, "_last_global_step_saved", None)
            if not isinstance(step, int) or step < 0:
                step = max(run.step - 1, 0)
            metrics = _metrics(getattr(callback, "best_k_models", {}), path, callback)
            self._checkpoints[path] = run.log_checkpoint(path, step=step, metrics=metrics)
        best = getattr(callback, "best_model_path", "")
        if best and best in self._checkpoints and best != self._best:
            self._best = best
            self._checkpoints[best].add_done_callback(lambda f: _alias_best(run, f))

    def save(self) -> None:
        """Nothing to do: trackstore's writer flushes on its own timer (see the module docstring)."""

    @rank_zero_only
    def finalize(self, status: str) -> None:
        if self._run is None or self._run.finished:
            return
        self._run.finish(status=_STATUS.get(status, RunStatus.FINISHED),
                         error=None if status != RunStatus.FAILED else "Lightning reported the fit as failed")


def _metrics(best_k: Mapping[str, Any], path: str, callback: Any) -> dict[str, float] | None:
    """The monitored value of checkpoint ``path`` (``ModelCheckpoint.best_k_models``), by its name."""
    monitor = getattr(callback, "monitor", None)
    if monitor is None or path not in best_k:
        return None
    value = best_k[path]
    try:
        return {str(monitor): float(value)}
    except (TypeError, ValueError):
        return None


def _alias_best(run: Any, future: Any) -> None:
    version = future.result()
    if version is not None and not run.finished:
        run.alias_artifact(version.name, version.version, "best")
