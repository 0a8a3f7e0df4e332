"""Hugging Face Transformers (and TRL) integration: ``Trainer(..., callbacks=[TrackstoreCallback()])``.

What lands in the store, from the main process only (``state.is_world_process_zero``):

* config: the model config merged with ``TrainingArguments.to_dict()`` (training arguments win
  on a clash), as Transformers' own wandb callback builds it;
* every ``on_log`` dict at step ``state.global_step``, keys renamed as Transformers' built-in
  trackers do (``loss`` -> ``train/loss``, ``eval_loss`` -> ``eval/loss``, ``test_x`` ->
  ``test/x``); evaluation metrics arrive this way too. The end-of-training totals
  (``train_runtime``, ``train_loss``, ``total_flos``...) go to the run summary, not to a step.
  Values that are not numbers (TRL logs ``None`` for an all-NaN metric) are skipped;
* TRL completions: with ``GRPOConfig(log_completions=True)`` TRL writes
  ``<output_dir>/completions/completions_<step>.parquet`` on the main process; each new file
  becomes samples (split ``train``): prompt -> input, completion -> output, the
  reward as score when there is one reward column, every other column (rewards of several
  reward functions, advantage) kept in the sample's extra fields;
* checkpoints (``log_checkpoints=True`` or ``$TRACKSTORE_LOG_CHECKPOINTS=1``, the counterpart of
  ``WANDB_LOG_MODEL=checkpoint``): at each ``on_save`` the folder the Trainer just wrote,
  ``<output_dir>/checkpoint-<global_step>``, becomes the next version of the run's model artifact
  by reference (:meth:`trackstore.Run.log_checkpoint`: aliases ``latest`` and ``step-N``, the
  metrics logged at that step as metadata; hashed off the training thread), and when
  ``load_best_model_at_end`` is on, ``best`` moves to the version of ``state.best_model_checkpoint``;
* the run is finished at ``on_train_end`` (status ``finished``); a later ``evaluate()`` continues
  the same run as a new attempt, stores its metrics and finishes it again, so nothing is lost.

The callback never raises into training for logging trouble: a failure is logged as a warning.
Transformers is imported only by this module (``TrainerCallback`` is its base class).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from transformers import TrainerCallback

log = logging.getLogger("trackstore.transformers")

SUMMARY_KEYS = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss", "total_flos")
ENV_PROJECT = "TRACKSTORE_PROJECT"
ENV_LOG_CHECKPOINTS = "TRACKSTORE_LOG_CHECKPOINTS"
CHECKPOINT_PREFIX = "checkpoint"  # transformers.trainer_utils.PREFIX_CHECKPOINT_DIR
COMPLETIONS_DIR = "completions"


def rewrite_keys(logs: Mapping[str, Any]) -> dict[str, Any]:
    """Transformers' naming: ``eval_x`` -> ``eval/x``, ``test_x`` -> ``test/x``, else ``train/x``."""
    out = {}
    for key, value in logs.items():
        if key.startswith("eval_"):
            out["eval/" + key[5:]] = value
        elif key.startswith("test_"):
            out["test/" + key[5:]] = value
        else:
            out["train/" + key] = value
    return out


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, (int, float)):
        return True
    item = getattr(value, "item", None)
    return callable(item) and getattr(value, "ndim", 0) == 0


class TrackstoreCallback(TrainerCallback):
    """Log a Transformers/TRL ``Trainer`` run to trackstore.

    ``project`` defaults to ``$TRACKSTORE_PROJECT``, else ``"huggingface"``; ``name`` to
    ``args.run_name``, else the last part of ``args.output_dir``. ``root`` is the store root
    (default ``$TRACKSTORE_DIR`` or ``./tsruns``). ``log_completions=False`` ignores TRL's
    completion files.
    """

    def __init__(self, project: str | None = None, name: str | None = None, *, root: str | os.PathLike | None = None,
                 tags: Iterable[str] | None = None, log_completions: bool = True, log_checkpoints: bool | None = None):
        self.log_checkpoints = log_checkpoints if log_checkpoints is not None else \
            os.environ.get(ENV_LOG_CHECKPOINTS, "").lower() in ("1", "true", "yes")
        self._step_metrics: tuple[int, dict] = (-1, {})
        self._checkpoints: dict[str, Any] = {}  # checkpoint folder -> its version's future
        self._best: str | None = None
        self.project = project
        self.name = name
        self.root = root
        self.tags = list(tags) if tags is not None else ["transformers"]
        self.log_completions = log_completions
        self.run: Any = None
        self._run_id: str | None = None
        self._seen_files: set[str] = set()
        self._train_ended = False
        self._warned: set[str] = set()

    # ------------------------------------------------------------------ run lifecycle
    def _ensure_run(self, args: Any, state: Any, model: Any = None) -> Any:
        import trackstore

        if self.run is not None and not self.run.finished:
            return self.run
        if self._run_id is not None:  # logging after on_train_end (e.g. trainer.evaluate())
            self.run = trackstore.init(project=self.run.project, run_id=self._run_id, resume=True, root=self.root)
            return self.run
        config: dict[str, Any] = {}
        model_config = getattr(model, "config", None)
        if model_config is not None:
            config.update(model_config if isinstance(model_config, dict) else model_config.to_dict())
        config.update(args.to_dict())
        name = self.name or getattr(args, "run_name", None) or Path(args.output_dir or "run").name
        project = self.project or os.environ.get(ENV_PROJECT) or "huggingface"
        self.run = trackstore.init(project=project, name=name, config=config, tags=self.tags, root=self.root)
        self._run_id = self.run.id
        return self.run

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not state.is_world_process_zero:
            return
        self._train_ended = False
        self._guard("starting the run", self._ensure_run, args, state, model)

    def on_log(self, args, state, control, model=None, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        self._guard("logging", self._log, args, state, model, logs)

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero or not self.log_checkpoints:
            return
        self._guard("logging the checkpoint", self._log_checkpoint, args, state)

    def on_train_end(self, args, state, control, **kwargs):
        if not state.is_world_process_zero or self.run is None or self.run.finished:
            return
        self._guard("reading TRL completions", self._ingest_completions, args)
        self._guard("finishing the run", self.run.finish)
        self._train_ended = True

    # ------------------------------------------------------------------ the work
    def _log(self, args: Any, state: Any, model: Any, logs: Mapping[str, Any]) -> None:
        run = self._ensure_run(args, state, model)
        for key in SUMMARY_KEYS:
            if key in logs and _is_number(logs[key]):
                run.summary[key] = logs[key]
        metrics = {}
        for key, value in rewrite_keys({k: v for k, v in logs.items() if k not in SUMMARY_KEYS}).items():
            if value is None:
                continue
            if not _is_number(value):
                self._warn_once(key, f"not storing {key!r}: a {type(value).__name__}, not a number")
                continue
            metrics[key] = value
        if metrics:
            run.log(metrics, step=state.global_step)
            step, held = self._step_metrics
            self._step_metrics = (state.global_step, {**held, **metrics} if step == state.global_step else dict(metrics))
        self._ingest_completions(args)
        if self._train_ended:  # an evaluate() after training: store it and end the attempt again
            run.finish()

    def _log_checkpoint(self, args: Any, state: Any) -> None:
        run = self._ensure_run(args, state)
        folder = Path(args.output_dir or ".") / f"{CHECKPOINT_PREFIX}-{state.global_step}"
        if folder.is_dir() and str(folder) not in self._checkpoints:
            step, held = self._step_metrics
            self._checkpoints[str(folder)] = run.log_checkpoint(folder, step=state.global_step,
                                                                metrics=held if step == state.global_step else None)
        best = getattr(state, "best_model_checkpoint", None)
        if best and str(Path(best)) in self._checkpoints and best != self._best:
            self._best = best
            # once hashed (never wait on the training thread): versions hash in the order they
            # were logged, so moves of best land in the order they were made
            self._checkpoints[str(Path(best))].add_done_callback(lambda f: self._guard("moving 'best'", _alias_best, run, f))

    def _ingest_completions(self, args: Any) -> None:
        """Store each TRL completions file not stored yet (TRL writes it right after ``on_log``)."""
        if not self.log_completions or self.run is None:
            return
        folder = Path(args.output_dir or ".") / COMPLETIONS_DIR
        if not folder.is_dir():
            return
        for path in sorted(folder.glob("completions_*.parquet")):
            if path.name in self._seen_files:
                continue
            self._seen_files.add(path.name)
            self._store_completions(path)

    def _store_completions(self, path: Path) -> None:
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        records = table.to_pylist()
        if not records:
            return
        columns = [c for c in table.column_names if not c.startswith("__index")]
        fixed = {"step", "prompt", "completion", "advantage", "image"}
        numeric = [c for c in columns if c not in fixed and all(_is_number(r[c]) or r[c] is None for r in records)]
        score_col = numeric[0] if len(numeric) == 1 else None
        step = int(records[0].get("step") or path.stem.rsplit("_", 1)[-1])
        rows = []
        for r in records:
            row = {k: r[k] for k in columns if k not in ("step", "prompt", "completion") and k != score_col}
            row.update(input=r.get("prompt"), output=r.get("completion"),
                       score=r.get(score_col) if score_col else None)
            if score_col:
                row["reward_name"] = score_col
            rows.append(row)
        self.run.log_samples(rows, step=step, split="train")

    # ------------------------------------------------------------------ never hurt training
    def _guard(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            self._warn_once(what, f"{what}: {exc}")
            return None

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("trackstore: %s", message)


def _alias_best(run: Any, future: Any) -> None:
    version = future.result()
    if version is not None and not run.finished:
        run.alias_artifact(version.name, version.version, "best")


def register_report_to(name: str = "trackstore") -> None:
    """Make ``TrainingArguments(report_to=["trackstore"])`` work, by adding this callback to
    Transformers' ``INTEGRATION_TO_CALLBACK`` table (not a public Transformers API: the explicit
    ``callbacks=[TrackstoreCallback()]`` is the supported way)."""
    from transformers.integrations import integration_utils

    integration_utils.INTEGRATION_TO_CALLBACK[name] = TrackstoreCallback
