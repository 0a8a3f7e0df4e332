"""Artifacts -> MLflow: files under the run, checkpoints as registered model versions with aliases.

MLflow's model registry is what it offers for "model version management": a registered model
holds numbered versions, each pointing at artifacts of a run, and aliases (``@best``) that
belong to one version at a time and move. This module promises:

* Every file of a version goes to the run's artifacts under
  ``trackstore/artifacts/<name>/v<version>/<path in the artifact>`` (a resend overwrites the same
  path). A reference is read where the trainer left it after its size and sha256 are checked;
  one that vanished or changed is skipped and counted (:mod:`.artifact_rows`).
* A version of type ``model`` also becomes a version of the registered model named like the
  artifact (``model-<run id>`` for checkpoints; ``/`` and ``:``, which MLflow refuses, become
  ``-``), source ``runs:/<run>/trackstore/artifacts/<name>/v<version>``, tagged
  ``trackstore.version``, ``trackstore.step``, ``trackstore.digest`` and the version's metrics.
  Exactly once: before creating one, the run's versions of that model are searched for the tag
  ``trackstore.version``, so a resend after a cut finds the version it made.
* Aliases (given at log time or moved later) are ``set_registered_model_alias``, which MLflow
  moves from the version that held it. MLflow reserves ``latest`` (``models:/<name>/latest`` is
  always its newest version, which is the version trackstore's ``latest`` marks when each
  checkpoint takes it) and names like ``v3``; those and aliases with characters MLflow refuses
  are skipped and counted, as are aliases of artifacts that are not models (MLflow keeps
  aliases for registered models only).
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from trackstore.records.samples import decode_json

from .adapter import SendResult
from .artifact_rows import local_file, runs_of
from .keys import mlflow_key

VERSION_TAG = "trackstore.version"
_ALIAS_OK = re.compile(r"^[\w\-]+$")
_ALIAS_RESERVED = re.compile(r"^[vV]\d+$")
_MAX_TAG = 5000


def model_name(artifact: str) -> str:
    """The registered model of an artifact: its name without the characters MLflow refuses."""
    return re.sub(r"[/:]", "-", artifact)


def artifact_dir(name: str, version: int) -> str:
    return f"trackstore/artifacts/{mlflow_key(name)}/v{version}"


class ModelVersions:
    """The registered model versions one adapter made or found, per run."""

    def __init__(self, adapter: Any):
        self.adapter = adapter
        self._known: dict[tuple[str, str, int], str] = {}  # (model, run id, trackstore version) -> MLflow version
        self._models: set[str] = set()

    def send(self, rid: str, run_dir, rows) -> SendResult:
        from trackstore.records.artifacts import list_versions

        result = SendResult()
        client = self.adapter.client
        for group in runs_of(rows.to_pylist()):
            if group.moves:
                stored = {v.version: v for v in list_versions(run_dir, group.name)}.get(group.version)
                if stored is None or stored.type != "model":
                    result.skip("MLflow keeps aliases for registered models only", len(group.moves))
                    continue
                mv = self.version(rid, group.name, group.version, stored.step, stored.digest, stored.metadata)
                self._aliases(group.name, mv, group.moves, result)
                continue
            sent = 0
            for r in group.files:
                path, why = local_file(run_dir, r)
                if why is not None:
                    result.skip(why, 1)
                    continue
                folder = artifact_dir(r["name"], r["version"])
                sub = posixpath.dirname(r["logical_path"])
                self.adapter.call("log artifact", client.log_artifact, rid, str(path), f"{folder}/{sub}" if sub else folder)
                sent += 1
            first = group.first
            if first["type"] != "model" or sent < len(group.files):
                if first.get("aliases") and first["type"] != "model":
                    result.skip("MLflow keeps aliases for registered models only", len(first["aliases"]))
                continue
            mv = self.version(rid, group.name, group.version, first.get("step"), first["digest"],
                              _metadata(first.get("metadata")))
            self._aliases(group.name, mv, list(first.get("aliases") or []), result)
        return result

    def version(self, rid: str, name: str, version: int, step, digest: str, metadata: dict) -> str:
        """The MLflow version of ``name`` ``version`` of run ``rid``: found, or created once."""
        model = model_name(name)
        key = (model, rid, version)
        if key in self._known:
            return self._known[key]
        client = self.adapter.call
        mlc = self.adapter.client
        for mv in client("search model versions", mlc.search_model_versions, f"name = '{_q(model)}' and run_id = '{_q(rid)}'"):
            if (mv.tags or {}).get(VERSION_TAG) == str(version):
                self._known[key] = mv.version
                return mv.version
        if model not in self._models:
            self.adapter.call("create registered model", _create_model, mlc, model)
            self._models.add(model)
        tags = {VERSION_TAG: str(version), "trackstore.digest": digest, "trackstore.artifact": name}
        if step is not None:
            tags["trackstore.step"] = str(step)
        for k, v in (metadata.get("metrics") or {}).items():
            tags[f"metric.{k}"[:250]] = str(v)[:_MAX_TAG]
        mv = client("create model version", mlc.create_model_version, model, f"runs:/{rid}/{artifact_dir(name, version)}",
                    run_id=rid, tags=tags)
        self._known[key] = mv.version
        return mv.version

    def _aliases(self, name: str, mlflow_version: str, aliases: list[str], result: SendResult) -> None:
        model = model_name(name)
        for alias in dict.fromkeys(aliases):
            if alias.lower() == "latest":
                continue  # MLflow's own: models:/<name>/latest (module docstring)
            if _ALIAS_RESERVED.match(alias) or not _ALIAS_OK.match(alias):
                result.skip("alias MLflow cannot hold", 1)
                continue
            self.adapter.call("set model alias", self.adapter.client.set_registered_model_alias, model, alias,
                              mlflow_version)


def _create_model(client: Any, model: str) -> None:
    from mlflow.exceptions import MlflowException

    try:
        client.create_registered_model(model, description="trackstore model artifact")
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise


def _q(text: str) -> str:
    return text.replace("'", "''")


def _metadata(text: str | None) -> dict:
    value = decode_json(text)
    return value if isinstance(value, dict) else {}
