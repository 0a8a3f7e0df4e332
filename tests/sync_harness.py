"""Per-target harnesses for the sync conformance suite (tests/test_sync_conformance.py).

A harness says how to point ``trackstore sync`` at a target in a test (CLI arguments and
environment) and how to read back what the target holds, with the target's own client or
reader — never a mock. Each target adds one class here and one entry in ``HARNESSES``.
"""

from __future__ import annotations

from pathlib import Path


class Harness:
    """Base: subclasses set ``target`` and implement the readers."""

    target: str = ""
    #: the precision of timestamps the target keeps for metric points ("ms"), or None if none
    ts_precision: str | None = "ms"
    #: kinds the target represents at all (others must be reported as unsupported)
    kinds: tuple[str, ...] = ("metrics",)

    def __init__(self, tmp_path: Path, monkeypatch):
        self.tmp = tmp_path
        self.monkeypatch = monkeypatch

    def cli_args(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return {}

    def metrics(self, project: str, run_id: str) -> list[tuple]:
        """Every metric point the target holds for the run: sorted ``(key, step, value, ts_ms)``
        (``ts_ms`` None when the target keeps no point timestamps)."""
        raise NotImplementedError

    def status(self, project: str, run_id: str) -> str:
        """The run's state at the target, as a trackstore status (finished/failed/crashed/running)."""
        raise NotImplementedError

    def remote_run_count(self, project: str, run_id: str) -> int:
        """How many remote runs exist for this trackstore run (must always be 1)."""
        raise NotImplementedError


class MlflowHarness(Harness):
    target = "mlflow"
    kinds = ("metrics", "histograms", "samples", "spans", "artifacts")

    def __init__(self, tmp_path, monkeypatch):
        super().__init__(tmp_path, monkeypatch)
        # the file store keeps re-sent duplicates, so it is the strict test of exactly-once
        monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        self.uri = (tmp_path / "mlruns").as_uri()

    def cli_args(self):
        return ["--to", "mlflow", "--uri", self.uri]

    def _client(self):
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.uri)

    def _runs(self, project, run_id):
        from mlflow.entities import ViewType

        c = self._client()
        exp = c.get_experiment_by_name(project)
        if exp is None:
            return []
        return c.search_runs([exp.experiment_id], filter_string=f"tags.`trackstore.run_id` = '{run_id}'",
                             run_view_type=ViewType.ALL)

    def metrics(self, project, run_id):
        c = self._client()
        runs = self._runs(project, run_id)
        if not runs:
            return []
        r = runs[0]
        out = []
        for key in r.data.metrics:
            out += [(key, m.step, m.value, m.timestamp) for m in c.get_metric_history(r.info.run_id, key)]
        return sorted(out)

    def status(self, project, run_id):
        r = self._runs(project, run_id)[0]
        return {"FINISHED": "finished", "FAILED": "failed", "KILLED": "crashed", "RUNNING": "running"}[r.info.status]

    def remote_run_count(self, project, run_id):
        return len(self._runs(project, run_id))


HARNESSES: dict[str, type[Harness]] = {"mlflow": MlflowHarness}
