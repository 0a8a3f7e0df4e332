"""Bring runs in from other trackers (installed as ``trackstore.sync.ingest``).

``trackstore ingest --from wandb|swanlab|mlflow|tensorboard SOURCE...`` and the functions
below read another tool's runs with that tool's own format libraries and write each as a run
of the store through :func:`trackstore.upkeep.ingest.write_external_run`, which owns what an
ingest promises (run ids derived from the source's ids, only new rows added on a second
ingest, nothing half-visible, nothing dropped silently).

One module per source, each with the same two functions:

* ``discover(location: str) -> list[Found]``: the runs at ``location`` (a folder, a file, an
  MLflow tracking URI), cheaply, without reading their records. A location that holds no run
  of this source gives ``[]``; one that does not exist raises
  :class:`~trackstore.errors.UsageError` naming it.
* ``read(found: Found, *, progress=None) -> ExternalRun``: the whole run. ``progress(n)`` is
  called with units of ``found.size`` (bytes, records...) as they are read. A damaged source
  gives what is readable, with each problem named in ``ExternalRun.problems``; it raises only
  when nothing of the run can be read.

A module may also define ``merge(a: Found, b: Found) -> Found``: one run found at two of the
locations given (a wandb run resumed into two folders named one by one) becomes one
:class:`Found`; without it, the first is kept (the same run named twice).

Sources are imported lazily: ``trackstore ingest --from wandb`` never imports mlflow.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from trackstore.errors import LockHeldError, RunNotFoundError, TrackstoreError, UsageError
from trackstore.upkeep.ingest import ExternalRun, IngestResult, write_external_run

SOURCES = ("wandb", "swanlab", "mlflow", "tensorboard")

__all__ = ["SOURCES", "Found", "IngestReport", "discover", "ingest", "ingest_wandb", "ingest_swanlab",
           "ingest_mlflow", "ingest_tensorboard", "ExternalRun", "IngestResult"]


@dataclass
class Found:
    """One run a source module found at a location, not read yet."""

    source: str  # one of SOURCES
    source_id: str  # the source's own id of the run (what the run id is derived from)
    location: str  # where it was found: a folder, file or URI (recorded in run.json)
    label: str  # how to name it to a person (a folder name, "experiment/run name")
    size: int = 0  # in the units read() reports progress in (0: unknown)
    handle: Any = None  # whatever the source module needs to read it


@dataclass
class IngestReport:
    """What one ``ingest`` call did: a result per run, and the runs that failed."""

    results: list[IngestResult] = field(default_factory=list)
    failed: list[tuple[Found, str]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True if every run was read whole and written (no failure, no problem reported)."""
        return not self.failed and not any(r.problems for r in self.results)


def source_module(source: str):
    if source not in SOURCES:
        raise UsageError(f"unknown source {source!r}: --from takes one of {', '.join(SOURCES)}")
    return importlib.import_module(f"{__name__}.{source}")


def discover(source: str, locations: Iterable[str]) -> list[Found]:
    """Every run of ``source`` at ``locations``, each found once (a folder named twice, or a
    run resumed over several folders, is one run)."""
    mod = source_module(source)
    merge = getattr(mod, "merge", None)
    found: dict[str, Found] = {}
    for loc in locations:
        items = mod.discover(str(loc))
        if not items:
            raise RunNotFoundError(f"no {source} runs found at {loc}")
        for f in items:
            prev = found.get(f.source_id)
            found[f.source_id] = f if prev is None else merge(prev, f) if merge is not None else prev
    return list(found.values())


def ingest(source: str, locations: Iterable[str] | str, *, root: str | Path | None = None,
           project: str | None = None, dry_run: bool = False,
           on_found: Callable[[list[Found]], None] | None = None,
           progress: Callable[[Found, int], None] | None = None,
           on_result: Callable[[IngestResult], None] | None = None) -> IngestReport:
    """Read every run of ``source`` at ``locations`` into the store at ``root``.

    ``project`` puts every run into that project instead of the source's own grouping (the
    wandb/SwanLab project, the MLflow experiment, ``tensorboard``). A run that cannot be read
    or written is recorded in the report's ``failed`` and the others go on; the store's
    maintenance lock held by another process (:class:`~trackstore.errors.LockHeldError`) stops
    the whole call.
    """
    from trackstore.store.layout import resolve_root
    from trackstore.store.names import validate_project

    if isinstance(locations, (str, Path)):
        locations = [str(locations)]
    if project is not None:
        validate_project(project)
    store = resolve_root(root)
    mod = source_module(source)
    runs = discover(source, locations)
    if on_found is not None:
        on_found(runs)
    report = IngestReport()
    for found in runs:
        tick = (lambda n, f=found: progress(f, n)) if progress is not None else None
        try:
            run: ExternalRun = mod.read(found, progress=tick)
            if project is not None:
                run.project = project
            result = write_external_run(store, run, dry_run=dry_run)
        except LockHeldError:
            raise  # gc, compact, import or another ingest holds the store: stop (exit 6), nothing half done
        except TrackstoreError as exc:
            report.failed.append((found, str(exc)))
            continue
        except (OSError, ValueError) as exc:
            report.failed.append((found, f"{type(exc).__name__}: {exc}"))
            continue
        report.results.append(result)
        if on_result is not None:
            on_result(result)
    return report


def ingest_wandb(*locations: str, root: str | Path | None = None, project: str | None = None,
                 dry_run: bool = False) -> IngestReport:
    """wandb offline runs (``wandb/offline-run-*`` folders, or a folder holding them)."""
    return ingest("wandb", locations, root=root, project=project, dry_run=dry_run)


def ingest_swanlab(*locations: str, root: str | Path | None = None, project: str | None = None,
                   dry_run: bool = False) -> IngestReport:
    """SwanLab logdirs (offline runs, and local mode's ``runs.swanlab`` folders)."""
    return ingest("swanlab", locations, root=root, project=project, dry_run=dry_run)


def ingest_mlflow(*locations: str, root: str | Path | None = None, project: str | None = None,
                  dry_run: bool = False) -> IngestReport:
    """MLflow tracking stores: a database URI (``sqlite:///mlflow.db``), an ``mlruns`` folder or
    a tracking server's ``http(s)://`` URI."""
    return ingest("mlflow", locations, root=root, project=project, dry_run=dry_run)


def ingest_tensorboard(*locations: str, root: str | Path | None = None, project: str | None = None,
                       dry_run: bool = False) -> IngestReport:
    """TensorBoard logdirs: every folder holding ``events.out.tfevents.*`` files is a run."""
    return ingest("tensorboard", locations, root=root, project=project, dry_run=dry_run)
