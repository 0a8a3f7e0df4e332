"""A trackstore project's experiment at an MLflow destination: found, or created once.

A store that does not enforce unique names (MLflow's file store) can hold several copies of a
name when two clients created it at once. So :class:`Experiments` creates an experiment once
per destination: looked up, and only under the adapter's
:meth:`~trackstore.sync.adapter.Adapter.exclusive` looked up again and created; and looked up
once more after creating, for a sync of another store that created it at the same moment:
every sync then agrees on the oldest copy, and an empty copy this sync made is retired. Runs
are looked up in every copy (``MlflowAdapter.open_run``), so one that went to another copy is
found, never made twice. A name held only by deleted experiments is a permanent error (MLflow
keeps their names reserved).

An experiment trackstore creates has the kind of model training (:func:`new_experiment_tags`);
where to see its runs: :func:`runs_page`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trackstore.store.layout import target_dir

from .adapter import PermanentError, RetryableError
from .http import is_local_uri

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"  # MLflow 3's "machine learning" (model training) kind
WORKFLOW = "machine_learning"  # the value of MLflow 3's UI parameter ``workflowType`` for it


def new_experiment_tags() -> dict[str, str]:
    """The tags of an experiment trackstore creates: the experiment kind of model training.

    MLflow 3 releases that choose an experiment's view by its kind read this tag; without it
    they infer the kind, and an experiment holding traces (the trajectories) is taken for GenAI
    development and opens on its traces. MLflow 3.17 no longer reads it for the view (see
    :func:`runs_page`). Given only at creation: the kind of an existing experiment is the user's."""
    return {EXPERIMENT_KIND_TAG: TRAINING_KIND}


def runs_page(ui: str, experiment_id: str) -> str:
    """The address of an experiment's runs list in MLflow's UI served at ``ui``.

    MLflow 3's UI opens an experiment in the view of its *workflow type*, taken from the
    address's ``workflowType`` parameter, else from the browser's local storage
    (``mlflow.workflowType``, ``genai`` until the user flips the toggle); nothing the server
    holds decides it. So every address trackstore prints carries ``workflowType`` =
    ``machine_learning``: the runs list, not the GenAI overview. MLflow 2 ignores the parameter.
    """
    return f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType={WORKFLOW}"


class Experiments:
    """The live experiments of each project at the destination of ``adapter`` (its ``client``,
    ``call``, ``exclusive``, ``destination``, ``uri``, ``embedded`` and ``options``), looked up
    once per sync."""

    def __init__(self, adapter: Any):
        self.adapter = adapter
        self.known: dict[str, list[str]] = {}  # project -> live experiment ids, oldest first

    def ids(self, project: str) -> list[str]:
        """The live experiments named ``project``, the one new runs go to first (the oldest);
        created when there is none (see the module docstring)."""
        if project in self.known:
            return self.known[project]
        ids = self.find(project)
        if not ids:
            with self.adapter.exclusive(f"experiment {project}"):
                ids = self.find(project)
                if not ids:
                    created = self.create(project)
                    ids = self.find(project)
                    if not ids:
                        raise RetryableError(f"MLflow experiment {project!r} at {self.adapter.destination()} was "
                                             "created but is not listed yet")
                    if created is not None and created != ids[0] and self.retire_copy(project, created):
                        ids.remove(created)
        self.known[project] = ids
        return ids

    def find(self, project: str) -> list[str]:
        """Ids of the live experiments named ``project``, oldest first (creation time, then id);
        a :class:`PermanentError` when the name is held only by deleted ones (names stay reserved)."""
        from mlflow.entities import ViewType

        adapter, client = self.adapter, self.adapter.client
        quote = next((q for q in ("'", '"') if q not in project), None)
        if quote is None:  # a name MLflow's filter syntax cannot spell: its own look-up (one copy)
            exp = adapter.call("get experiment", client.get_experiment_by_name, project)
            found = [exp] if exp is not None else []
        else:
            found = adapter.call("search experiments", client.search_experiments, view_type=ViewType.ALL,
                                 filter_string=f"name = {quote}{project}{quote}", max_results=1000)
        found = [e for e in found if e.name == project]
        live = sorted((e for e in found if e.lifecycle_stage != "deleted"),
                      key=lambda e: (e.creation_time or 0, len(str(e.experiment_id)), str(e.experiment_id)))
        if found and not live:
            raise PermanentError(self.deleted_message(project))
        return [e.experiment_id for e in live]

    def create(self, project: str) -> str | None:
        """Create the experiment ``project`` (:func:`new_experiment_tags`); its id, or None when
        the server says it exists."""
        adapter = self.adapter
        kwargs: dict[str, Any] = {"tags": new_experiment_tags()}
        if is_local_uri(adapter.uri):
            art = target_dir(adapter.options.store_root or ".", "mlflow") / "artifacts"
            if not adapter.embedded and adapter.uri.startswith("sqlite:"):
                art = Path(adapter.uri[len("sqlite:///"):]).parent / "artifacts"
            kwargs["artifact_location"] = art.absolute().as_uri()

        def create_unless_there() -> str | None:
            try:
                return adapter.client.create_experiment(project, **kwargs)
            except Exception as exc:
                if "RESOURCE_ALREADY_EXISTS" in str(exc) or "already exists" in str(exc):
                    return None  # made meanwhile by another client (or deleted: the look-up says which)
                raise

        return adapter.call(f"create experiment {project!r}", create_unless_there)

    def retire_copy(self, project: str, exp_id: str) -> bool:
        """Take an empty copy of ``project`` this sync created beside an older one out of the way:
        renamed, then deleted (renamed first because a deleted experiment keeps its name, and
        MLflow's file store answers a look-up by name with the newest copy). False, and the copy
        is kept, when a run is in it already or the server refused: every copy is searched."""
        from mlflow.entities import ViewType

        client = self.adapter.client
        try:
            if client.search_runs([exp_id], run_view_type=ViewType.ALL, max_results=1):
                return False
            client.rename_experiment(exp_id, f"{project} (duplicate {exp_id}, retired by trackstore)")
            client.delete_experiment(exp_id)
        except Exception:
            return False
        return True

    def deleted_message(self, project: str) -> str:
        return (f"MLflow experiment {project!r} at {self.adapter.destination()} is deleted; restore it "
                f"(`mlflow experiments restore`) or remove it for good (`mlflow gc`), then sync again")
