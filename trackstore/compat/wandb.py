"""A wandb drop-in that writes to the local trackstore: ``import trackstore.compat.wandb as wandb``.

Opt-in only: nothing replaces the real ``wandb`` unless a script imports this module under that
name, or runs under ``trackstore run -- python train.py`` (which makes ``import wandb`` resolve
here for that command and its children). What the run records reaches wandb later through
``trackstore sync --to wandb``.

Covered, with wandb's meaning:

* ``init(project, name, config, tags, notes, group, job_type, id, resume, mode, dir, entity,
  settings, reinit, config_include_keys, config_exclude_keys)`` -> a :class:`Run` (also ``wandb.run``, ``wandb.config``, ``wandb.summary``).
  ``project``/``name`` default to ``$WANDB_PROJECT``/``$WANDB_NAME`` (``$TRACKSTORE_PROJECT``
  overrides the project); ``id`` + ``resume`` (``"allow"``, ``"must"``, ``"auto"``, ``True``)
  continue a stored run as a new attempt; ``mode="disabled"`` (or ``$WANDB_MODE=disabled``)
  records nothing; ``dir`` puts the store in ``<dir>/tsruns`` unless ``$TRACKSTORE_DIR`` is set;
  ``entity`` and ``settings`` are accepted and not used (nothing here talks to a server).
* ``log(data, step=None, commit=None)``: numbers, numpy/torch scalars, nested dicts,
  :class:`Histogram`, numpy arrays and tensors (as 32-bin histograms, as wandb does for large
  ones), :class:`Image` (a :class:`trackstore.Image`: a PNG/JPEG path keeps its bytes; arrays are
  normalised as wandb does; ``boxes``/``masks``/``classes`` are refused) and lists of them, and
  :class:`Table` (an ``Image`` in a cell is stored as a sample image). A table becomes samples named after its key: columns
  ``input``/``prompt``, ``output``/``completion``/``response`` and ``score``/``reward`` fill
  the sample fields, every other column is kept; re-logging a grown table (as verl and TRL do)
  stores only the rows not stored before under that key.
* ``finish(exit_code=None)``, ``run.config`` (dict and attribute access, ``update``),
  ``run.summary``, ``Artifact`` (``add_file``, ``add_dir``, ``new_file``) and
  ``log_artifact``, ``watch``/``unwatch`` (histograms of gradients/parameters),
  ``define_metric`` (recorded in the run config under ``_wandb_define_metric``; it does not
  change how steps are stored), ``Settings``, ``login`` (a no-op: no credentials are read or
  kept).

Anything else (``Audio``, ``Video``, ``Html``, ``Api``, ``use_artifact``, ``save``,
``alert``, ``sweep``...) raises :class:`NotSupportedError`, naming what to use instead.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import weakref
from argparse import Namespace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from ..errors import NotSupportedError as NotSupportedError  # wandb.NotSupportedError to scripts
from ..errors import UsageError
from ..records.histogram import Histogram as _TsHistogram
from ..records.images import Image as _TsImage

# The wandb API level this module imitates (code compares wandb.__version__ to pick code paths).
__version__ = "0.19.0"

_RESUME_VALUES = (None, False, True, "allow", "must", "auto", "never")
# init arguments that change nothing here (no server, no service process, no code upload)
_IGNORED_INIT_ARGS = {"settings", "reinit", "save_code", "anonymous", "magic", "allow_val_change", "force"}
# init arguments that are fine when off, and not covered when on
_OFF_ONLY_INIT_ARGS = {"sync_tensorboard", "monitor_gym", "tensorboard", "fork_from", "resume_from"}


class NotSupportedAttribute(NotSupportedError, AttributeError):
    """A module attribute the drop-in lacks (an AttributeError too, so ``hasattr`` keeps working)."""


def _unsupported(what: str, instead: str = "", cls: type = NotSupportedError) -> NotSupportedError:
    msg = f"wandb.{what} is not supported by trackstore's wandb drop-in"
    return cls(msg + (f"; {instead}" if instead else ""))


# ---------------------------------------------------------------------- media and helpers
class Settings:
    """Accepted for compatibility (``wandb.Settings(...)``); its values are not used."""

    def __init__(self, **kwargs: Any):
        self.__dict__.update(kwargs)


class Histogram:
    """``wandb.Histogram(sequence, num_bins=64)`` or ``wandb.Histogram(np_histogram=(counts, edges))``."""

    def __init__(self, sequence: Any = None, np_histogram: Sequence[Any] | None = None, num_bins: int = 64):
        if np_histogram is not None:
            counts, edges = np_histogram
            self._hist = _TsHistogram(counts=counts, edges=edges)
        else:
            self._hist = _TsHistogram(sequence, bins=num_bins)


class Image(_TsImage):
    """``wandb.Image(data_or_path, mode=None, caption=None, ...)``: a :class:`trackstore.Image`.

    A float array is normalised as wandb does: values in [0, 1] are scaled by 255, values in
    [-1, 1] are mapped to [0, 255], anything else (and an integer array) is clipped to
    [0, 255]; ``normalize=False`` only clips. A PNG or JPEG path keeps its exact bytes.
    ``boxes``, ``masks`` and ``classes`` raise :class:`NotSupportedError`.
    """

    __slots__ = ()

    def __init__(self, data_or_path: Any, mode: str | None = None, caption: str | None = None,
                 grouping: int | None = None, classes: Any = None, boxes: Any = None, masks: Any = None,
                 file_type: str | None = None, normalize: bool = True, **kwargs: Any):
        for what, given in (("boxes", boxes), ("masks", masks), ("classes", classes)):
            if given is not None:
                raise _unsupported(f"Image({what}=...)", "log the image alone; put boxes or masks in a sample row")
        if mode is not None and _is_pil_image(data_or_path) and data_or_path.mode != mode:
            data_or_path = data_or_path.convert(mode)
        elif not isinstance(data_or_path, (str, os.PathLike, bytes, _TsImage)) and not _is_pil_image(data_or_path):
            data_or_path = _wandb_pixels(data_or_path, normalize)
        super().__init__(data_or_path, caption=caption)


def _is_pil_image(obj: Any) -> bool:
    return type(obj).__module__.startswith("PIL.")


def _wandb_pixels(data: Any, normalize: bool) -> Any:
    """An array (or tensor) as wandb turns it into pixels: uint8 and bool as they are, floats
    in [0, 1] or [-1, 1] scaled (``normalize``), everything else clipped to [0, 255]."""
    detach = getattr(data, "detach", None)
    if callable(detach):
        data = detach().cpu().numpy()
    if not hasattr(data, "__array__"):
        return data  # trackstore.Image names what it cannot take
    import numpy as np

    a = np.asarray(data)
    if a.dtype == np.uint8 or a.dtype.kind == "b" or not a.size:
        return a
    if a.dtype.kind == "f" and normalize and np.isfinite(a).all():
        lo, hi = float(a.min()), float(a.max())
        if lo >= 0.0 and hi <= 1.0:
            return a
        if lo >= -1.0 and hi <= 1.0:
            return (a + 1.0) / 2.0
    if a.dtype.kind in "iuf":
        return np.clip(np.nan_to_num(a), 0, 255).astype(np.uint8)
    return a


class Table:
    """``wandb.Table(columns=..., data=...)`` / ``Table(dataframe=df)``, with ``add_data`` and ``data``."""

    def __init__(self, columns: Sequence[str] | None = None, data: Sequence[Sequence[Any]] | None = None,
                 rows: Sequence[Sequence[Any]] | None = None, dataframe: Any = None, log_mode: str | None = None,
                 **kwargs: Any):
        if dataframe is not None:
            columns = [str(c) for c in dataframe.columns]
            data = dataframe.values.tolist()
        data = list(data if data is not None else (rows or []))
        if columns is None:
            width = len(data[0]) if data else 0
            columns = [f"col{i + 1}" for i in range(width)]
        self.columns = list(columns)
        self.data: list[list[Any]] = []
        self.log_mode = log_mode
        for row in data:
            self.add_data(*row)

    def add_data(self, *row: Any) -> None:
        if len(row) != len(self.columns):
            raise UsageError(f"Table row has {len(row)} values for {len(self.columns)} columns")
        self.data.append(list(row))

    def add_column(self, name: str, data: Sequence[Any]) -> None:
        if self.data and len(data) != len(self.data):
            raise UsageError(f"column {name!r} has {len(data)} values for {len(self.data)} rows")
        self.columns.append(name)
        if not self.data:
            self.data = [[v] for v in data]
        else:
            for row, v in zip(self.data, data):
                row.append(v)

    def get_column(self, name: str) -> list[Any]:
        i = self.columns.index(name)
        return [row[i] for row in self.data]


_INPUT_COLS = ("input", "prompt", "question")
_OUTPUT_COLS = ("output", "completion", "response", "answer")
_SCORE_COLS = ("score", "reward")


def _table_rows(table: Table) -> list[dict]:
    rows = []
    for values in table.data:
        record = dict(zip(table.columns, values))
        row: dict[str, Any] = {}
        for field, candidates in (("input", _INPUT_COLS), ("output", _OUTPUT_COLS), ("score", _SCORE_COLS)):
            col = next((c for c in candidates if c in record), None)
            row[field] = record.pop(col) if col is not None else None
        row.update({k if k not in ("sample_index",) else "table_sample_index": v for k, v in record.items()})
        rows.append(row)
    return rows


class Artifact:
    """``wandb.Artifact(name, type, description=None, metadata=None)``, then ``run.log_artifact(a)``."""

    def __init__(self, name: str, type: str, description: str | None = None, metadata: Mapping[str, Any] | None = None,
                 **kwargs: Any):
        self.name = name
        self.type = type
        self.description = description
        self.metadata = dict(metadata or {})
        self._entries: list[tuple[str, Path]] = []
        self._tmp: Path | None = None

    def add_file(self, local_path: str | os.PathLike, name: str | None = None, **kwargs: Any) -> None:
        p = Path(local_path)
        if not p.is_file():
            raise UsageError(f"Artifact.add_file: {str(p)!r} is not a file")
        self._entries.append((name or p.name, p))

    def add_dir(self, local_path: str | os.PathLike, name: str | None = None, **kwargs: Any) -> None:
        p = Path(local_path)
        if not p.is_dir():
            raise UsageError(f"Artifact.add_dir: {str(p)!r} is not a folder")
        for f in sorted(p.rglob("*")):
            if f.is_file():
                rel = f.relative_to(p).as_posix()
                self._entries.append((f"{name}/{rel}" if name else rel, f))

    @contextlib.contextmanager
    def new_file(self, name: str, mode: str = "x", encoding: str | None = None) -> Iterator[Any]:
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="trackstore-artifact-"))
            # the files written here are copied into the store when logged; the folder goes
            # with the Artifact object instead of piling up in /tmp over a long training job
            weakref.finalize(self, shutil.rmtree, str(self._tmp), True)
        path = self._tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, mode.replace("x", "w"), encoding=encoding if "b" not in mode else None) as f:
            yield f
        self._entries.append((name, path))

    def add_reference(self, *args: Any, **kwargs: Any) -> None:
        raise _unsupported("Artifact.add_reference", "copy the files locally and use add_file/add_dir")

    def _staged(self) -> Path:
        """One folder holding the artifact's files under their names inside the artifact."""
        stage = Path(tempfile.mkdtemp(prefix="trackstore-artifact-"))
        for logical, src in self._entries:
            dest = stage / logical
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
        return stage


# ---------------------------------------------------------------------- the run
class Run:
    """What ``wandb.init`` returns; wraps a :class:`trackstore.Run` (``None`` when disabled)."""

    def __init__(self, run: Any, *, project: str, name: str | None, config: Mapping[str, Any] | None = None):
        self._run = run
        self._project = project
        self._name = name
        self._table_rows: dict[str, set] = {}
        self._defined: dict[str, dict] = {}
        self.config = run.config if run is not None else _DisabledDict(config or {})
        self.summary = run.summary if run is not None else _DisabledDict()

    # identity
    @property
    def id(self) -> str:
        return self._run.id if self._run is not None else "disabled"

    @property
    def name(self) -> str | None:
        return self._run.name if self._run is not None else self._name

    @property
    def project(self) -> str:
        return self._project

    @property
    def dir(self) -> str:
        return str(self._run.dir) if self._run is not None else tempfile.gettempdir()

    @property
    def step(self) -> int:
        return self._run.step if self._run is not None else 0

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(self._run.tags) if self._run is not None else ()

    @property
    def disabled(self) -> bool:
        return self._run is None

    entity = None
    url = None

    @property
    def path(self) -> str:
        return f"{self._project}/{self.id}"

    @property
    def trackstore_run(self) -> Any:
        """The underlying :class:`trackstore.Run` (``None`` in disabled mode)."""
        return self._run

    def __repr__(self) -> str:
        return f"<trackstore wandb drop-in Run {self.path}>"

    # logging
    def log(self, data: Mapping[str, Any], step: int | None = None, commit: bool | None = None, **kwargs: Any) -> None:
        if self._run is None:
            return
        if not isinstance(data, Mapping):
            raise UsageError(f"wandb.log expects a dict, got {type(data).__name__}")
        step_now = self._run.step if step is None else step
        plain: dict[str, Any] = {}
        for key, value in data.items():
            if isinstance(value, Table):
                self._log_table(str(key), value, step_now)
            elif isinstance(value, Histogram):
                plain[key] = value._hist
            elif getattr(value, "ndim", 0) >= 1 and callable(getattr(value, "tolist", None)):
                plain[key] = _TsHistogram(value, bins=32)  # wandb turns arrays/tensors into 32-bin histograms
            elif type(value).__module__.startswith("wandb") or type(value).__name__ in _MEDIA:
                raise _unsupported(type(value).__name__, "log numbers, Histogram, Image or Table")
            else:
                plain[key] = value
        self._run.log(plain, step=step, commit=commit is not False)

    def _log_table(self, key: str, table: Table, step: int) -> None:
        seen = self._table_rows.setdefault(key, set())
        fresh = []
        for values, row in zip(table.data, _table_rows(table)):
            fingerprint = repr(values)
            if fingerprint not in seen:
                seen.add(fingerprint)
                fresh.append(row)
        if fresh:
            self._run.log_samples(fresh, step=step, split=key)

    def finish(self, exit_code: int | None = None, quiet: bool | None = None) -> None:
        global run, config, summary
        if self._run is not None:
            self._run.finish(exit_code)
        if run is self:
            run, config, summary = None, _PreInit("config"), _PreInit("summary")

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.finish(exit_code=0 if exc_type is None else 1)

    def log_artifact(self, artifact_or_path: Artifact | str | os.PathLike, name: str | None = None,
                     type: str | None = None, aliases: Iterable[str] | None = None, **kwargs: Any) -> Any:
        if self._run is None:
            return None
        if isinstance(artifact_or_path, Artifact):
            art = artifact_or_path
            stage = art._staged()
            try:
                meta = dict(art.metadata)
                if art.description:
                    meta.setdefault("description", art.description)
                return self._run.log_artifact(stage, name=name or art.name, type=type or art.type,
                                              aliases=aliases, metadata=meta)
            finally:
                shutil.rmtree(stage, ignore_errors=True)
        return self._run.log_artifact(artifact_or_path, name=name, type=type or "unspecified", aliases=aliases)

    def define_metric(self, name: str, step_metric: str | None = None, step_sync: bool | None = None,
                      hidden: bool | None = None, summary: str | None = None, goal: str | None = None,
                      **kwargs: Any) -> dict:
        spec = {k: v for k, v in dict(step_metric=step_metric, step_sync=step_sync, hidden=hidden, summary=summary,
                                       goal=goal).items() if v is not None}
        self._defined[name] = spec
        if self._run is not None:
            self._run.config["_wandb_define_metric"] = dict(self._defined)
        return spec

    def watch(self, models: Any, criterion: Any = None, log: str | None = "gradients", log_freq: int = 1000,
              idx: int | None = None, log_graph: bool = False) -> Any:
        if self._run is None or log is None:
            return None
        if log_graph:
            raise _unsupported("watch(log_graph=True)", "graphs are not stored; leave log_graph off")
        from ..integrations.watch import watch as ts_watch

        handles = [ts_watch(m, log=log, every=log_freq, run=self._run)
                   for m in (models if isinstance(models, (list, tuple)) else [models])]
        return handles[0] if len(handles) == 1 else handles

    def unwatch(self, models: Any = None) -> None:
        from ..integrations.watch import unwatch as ts_unwatch

        for m in models if isinstance(models, (list, tuple)) else [models]:
            if m is not None:
                ts_unwatch(m)

    def save(self, *args: Any, **kwargs: Any) -> None:
        raise _unsupported("save", "use run.log_artifact(path) to keep files with the run")

    def use_artifact(self, *args: Any, **kwargs: Any) -> None:
        raise _unsupported("use_artifact", "artifacts are read from the store folder: trackstore show RUN")

    def alert(self, *args: Any, **kwargs: Any) -> None:
        raise _unsupported("alert")


_MEDIA = {"Audio", "Video", "Html", "Object3D", "Molecule", "Plotly", "Graph", "Bokeh"}


class _DisabledDict(dict):
    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **{k: v for k, v in kwargs.items() if k != "allow_val_change"})

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class _PreInit:
    """``wandb.config``/``wandb.summary`` before ``init``: a clear error, as wandb gives."""

    def __init__(self, what: str):
        self._what = what

    def __getattr__(self, name: str) -> Any:
        raise UsageError(f"call wandb.init() before using wandb.{self._what}")

    def __getitem__(self, key: str) -> Any:
        raise UsageError(f"call wandb.init() before using wandb.{self._what}")

    def __setitem__(self, key: str, value: Any) -> None:
        raise UsageError(f"call wandb.init() before using wandb.{self._what}")

    def __bool__(self) -> bool:
        return False


run: Run | None = None
config: Any = _PreInit("config")
summary: Any = _PreInit("summary")


# ---------------------------------------------------------------------- module API
def init(project: str | None = None, name: str | None = None, config: Any = None, tags: Sequence[str] | None = None,
         notes: str | None = None, group: str | None = None, job_type: str | None = None, id: str | None = None,
         resume: Any = None, mode: str | None = None, dir: str | os.PathLike | None = None, entity: str | None = None,
         **kwargs: Any) -> Run:
    """Start a run in the local store (see the module docstring for what each argument does)."""
    import trackstore

    global run
    exclude = kwargs.pop("config_exclude_keys", None)
    include = kwargs.pop("config_include_keys", None)
    unknown = {k for k in kwargs if k not in _IGNORED_INIT_ARGS and not (k in _OFF_ONLY_INIT_ARGS and not kwargs[k])}
    if unknown:
        raise _unsupported(f"init({', '.join(sorted(unknown))}=...)")
    if resume not in _RESUME_VALUES:
        raise UsageError(f"wandb.init(resume=...) must be one of allow, must, auto, never, True, False; got {resume!r}")
    mode = mode or os.environ.get("WANDB_MODE") or "offline"
    if mode not in ("online", "offline", "disabled", "dryrun", "run"):
        raise UsageError(f"wandb.init(mode=...) must be online, offline or disabled; got {mode!r}")
    if run is not None and not run.disabled and not run._run.finished:
        run.finish()  # wandb >= 0.19 finishes the previous run on a new init
    project = os.environ.get("TRACKSTORE_PROJECT") or project or os.environ.get("WANDB_PROJECT") or "uncategorized"
    name = name or os.environ.get("WANDB_NAME") or None
    id = id or os.environ.get("WANDB_RUN_ID") or None
    if isinstance(config, Namespace):
        config = vars(config)
    elif config is not None and not isinstance(config, Mapping):
        raise UsageError(f"wandb.init(config=...) must be a dict or argparse.Namespace, got {type(config).__name__}")
    if config is not None and (include or exclude):
        config = {k: v for k, v in config.items()
                  if (include is None or k in include) and (exclude is None or k not in exclude)}
    if mode == "disabled":
        run = Run(None, project=project, name=name, config=config)
    else:
        root = None
        if not os.environ.get("TRACKSTORE_DIR") and dir is not None:
            root = Path(dir) / "tsruns"
        exists = id is not None and _run_exists(root, project, id)
        if resume == "must" and not exists:
            raise UsageError(f"wandb.init(resume='must'): no run {id!r} in project {project!r}")
        if resume == "never" and exists:
            raise UsageError(f"wandb.init(resume='never'): run {id!r} already exists in project {project!r}")
        wants_resume = resume not in (None, False, "never") and id is not None
        ts_run = trackstore.init(project=project, name=name, config=config, tags=tags, notes=notes, root=root,
                                 run_id=id, resume=wants_resume, group=group, job_type=job_type)
        run = Run(ts_run, project=project, name=name)
    _bind_module(run)
    return run


def _run_exists(root: Path | None, project: str, run_id: str) -> bool:
    from ..store.layout import resolve_root, run_paths

    return run_paths(resolve_root(root), project, run_id).run_file.exists()


def _bind_module(r: Run) -> None:
    global config, summary
    config, summary = r.config, r.summary


def _need_run(what: str) -> Run:
    if run is None:
        raise UsageError(f"call wandb.init() before wandb.{what}()")
    return run


def log(data: Mapping[str, Any], step: int | None = None, commit: bool | None = None, **kwargs: Any) -> None:
    _need_run("log").log(data, step=step, commit=commit)


def finish(exit_code: int | None = None, quiet: bool | None = None) -> None:
    if run is not None:
        run.finish(exit_code=exit_code)


def log_artifact(artifact_or_path: Any, name: str | None = None, type: str | None = None,
                 aliases: Iterable[str] | None = None, **kwargs: Any) -> Any:
    return _need_run("log_artifact").log_artifact(artifact_or_path, name=name, type=type, aliases=aliases)


def define_metric(name: str, step_metric: str | None = None, **kwargs: Any) -> dict:
    return _need_run("define_metric").define_metric(name, step_metric=step_metric, **kwargs)


def watch(models: Any, criterion: Any = None, log: str | None = "gradients", log_freq: int = 1000, idx: int | None = None,
          log_graph: bool = False) -> Any:
    return _need_run("watch").watch(models, criterion, log=log, log_freq=log_freq, idx=idx, log_graph=log_graph)


def unwatch(models: Any = None) -> None:
    _need_run("unwatch").unwatch(models)


def login(*args: Any, **kwargs: Any) -> bool:
    """A no-op: the drop-in never talks to a server and never reads or stores an API key."""
    return True


def setup(*args: Any, **kwargs: Any) -> None:
    """A no-op (``wandb.setup()`` prepares wandb's service process; there is none here)."""


def termlog(msg: str = "", *args: Any, **kwargs: Any) -> None:
    import sys

    sys.stderr.write(f"wandb: {msg}\n")


termwarn = termerror = termlog


def __getattr__(attr: str) -> Any:
    if attr.startswith("__"):
        raise AttributeError(attr)
    if attr in _MEDIA:
        raise _unsupported(attr, "log numbers, Histogram, Image or Table", NotSupportedAttribute)
    raise _unsupported(attr, "", NotSupportedAttribute)
