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

    def second_value(self) -> tuple[str | None, str]:
        """What the target does with a second value for one key at one step (the store keeps
        both): ``(reason it is reported under, "first" | "last" value kept)``, or
        ``(None, "both")`` for a target that holds both points."""
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

    def second_value(self):
        return None, "both"  # a metric history holds any number of points per step


class SwanlabHarness(Harness):
    """The real swanlab client in offline mode, its run folders read back with SwanLab's own
    ``DataStoreReader`` (every session folder of the experiment, as ``swanlab sync`` would)."""

    target = "swanlab"
    kinds = ("metrics", "histograms", "samples", "spans", "artifacts")
    ts_precision = "ms"  # kept through SwanLab's per-point timestamp (sync/swanlab.py)

    def __init__(self, tmp_path, monkeypatch):
        super().__init__(tmp_path, monkeypatch)
        self.logdir = tmp_path / "swanlog"
        monkeypatch.delenv("SWANLAB_API_KEY", raising=False)

    def cli_args(self):
        return ["--to", "swanlab", "--mode", "offline", "--logdir", str(self.logdir)]

    def env(self):
        return {"SWANLAB_ROOT": str(self.tmp / "swanlab-home")}

    def records(self, project, run_id):
        from trackstore.sync.swanlab import experiment_id, read_session_files

        return list(read_session_files(self.logdir, experiment_id(project, run_id)))

    def metrics(self, project, run_id):
        from datetime import timezone

        out = []
        for _d, rec in self.records(project, run_id):
            if rec.WhichOneof("record_type") == "scalar":
                s = rec.scalar
                ts = s.timestamp.ToDatetime(tzinfo=timezone.utc)
                out.append((s.key, int(s.step), s.value.number, int(ts.timestamp() * 1000)))
        return sorted(out)

    def status(self, project, run_id):
        from swanlab.proto.swanlab.run.v1.run_pb2 import RunState

        state = None
        for _d, rec in self.records(project, run_id):
            if rec.WhichOneof("record_type") == "finish":
                state = rec.finish.state
        return {RunState.RUN_STATE_FINISHED: "finished", RunState.RUN_STATE_CRASHED: "failed",
                RunState.RUN_STATE_ABORTED: "crashed"}.get(state, "running")

    def remote_run_count(self, project, run_id):
        ids = set()
        for d in self.logdir.glob("run-*"):
            ids.add(d.name.rsplit("-", 1)[-1])
        return len(ids)

    def second_value(self):
        from trackstore.sync.swanlab import SKIP_SECOND

        return SKIP_SECOND, "first"


HARNESSES: dict[str, type[Harness]] = {"mlflow": MlflowHarness, "swanlab": SwanlabHarness}


class WandbHarness(Harness):
    """The real wandb client in offline mode (``WANDB_MODE=offline``, ``WANDB_DIR`` in the test's
    tmp dir); read back with wandb's own reader of ``.wandb`` files, ``wandb leet inspect --json``,
    merging every offline-run folder of the run (offline mode writes one per sync session)."""

    target = "wandb"
    kinds = ("metrics", "histograms", "samples", "spans", "artifacts")

    def __init__(self, tmp_path, monkeypatch):
        super().__init__(tmp_path, monkeypatch)
        self.dir = tmp_path / "wandb-dir"

    def cli_args(self):
        return ["--to", "wandb"]

    def env(self):
        return {"WANDB_MODE": "offline", "WANDB_DIR": str(self.dir), "WANDB_SILENT": "true"}

    def run_dirs(self, project, run_id) -> list[Path]:
        from trackstore.sync.wandb import wandb_run_id

        rid = wandb_run_id(project, run_id)
        dirs = [d for d in (self.dir / "wandb").glob(f"*run-*-{rid}") if not d.is_symlink()]
        return sorted(dirs, key=lambda d: d.name.split("-", 2)[-1])

    def records(self, project, run_id) -> list[list[dict]]:
        """Every record of every transaction log of the run, one list per offline-run folder."""
        import json
        import subprocess
        import sys

        wandb_cli = str(Path(sys.executable).with_name("wandb"))
        out = []
        for d in self.run_dirs(project, run_id):
            log = d / f"run-{d.name.rsplit('-', 1)[-1]}.wandb"
            if not log.is_file():  # a session killed during wandb.init leaves a folder without a log
                continue
            res = subprocess.run([wandb_cli, "leet", "inspect", "--json", str(log)], capture_output=True, text=True,
                                 timeout=120, check=True)
            out.append([json.loads(line) for line in res.stdout.splitlines() if line.strip()])
        return out

    def history(self, project, run_id) -> list[dict]:
        """Every history row as ``{"step": N, **items}`` with nested media values rebuilt."""
        rows = []
        for recs in self.records(project, run_id):
            for r in recs:
                if r["type"] == "history":
                    h = r["history"]
                    item = _nest_media(h["item"])
                    rows.append({**item, "step": (h.get("step") or {}).get("num", item.get("_step", 0))})
        return rows

    def metrics(self, project, run_id):
        out = []
        for row in self.history(project, run_id):
            ts = row["_timestamp"]
            for key, value in row.items():
                if key.startswith("_") or key == "step" or isinstance(value, dict):
                    continue
                out.append((key, row["step"], value, int(ts * 1000)))
        return sorted(out)

    def final(self, project, run_id) -> tuple[int | None, dict]:
        """The exit code of the last session that finished, and the merged summary."""
        code, summary = None, {}
        for recs in self.records(project, run_id):
            for r in recs:
                if r["type"] == "exit":
                    code = r["exit"].get("exit_code", 0)
                elif r["type"] == "summary":
                    summary.update(r["summary"].get("update") or {})
        return code, summary

    def status(self, project, run_id):
        code, summary = self.final(project, run_id)
        if code is None:
            return "running"
        if code == 0:
            return "finished"
        return "crashed" if summary.get("trackstore/status") == "crashed" else "failed"

    def remote_run_count(self, project, run_id):
        # offline folders are per session; a wandb run is the set of folders sharing one id
        return len({d.name.rsplit("-", 1)[-1] for d in (self.dir / "wandb").glob("*run-*") if not d.is_symlink()})

    def second_value(self):
        from trackstore.sync.wandb import SECOND

        return SECOND, "last"

    def run_records(self, project, run_id) -> list[dict]:
        """The ``run`` record of each session (id, entity, project, name, notes, tags, ...)."""
        return [r["run"] for recs in self.records(project, run_id) for r in recs if r["type"] == "run"]

    def artifacts(self, project, run_id) -> list[dict]:
        """Every ``log_artifact`` record of the run, in order, with ``metadata`` parsed."""
        import json

        out = []
        for recs in self.records(project, run_id):
            for r in recs:
                if r["type"] == "artifact":
                    a = dict(r["artifact"])
                    a["metadata"] = json.loads(a["metadata"]) if a.get("metadata") else {}
                    out.append(a)
        return out

    def table(self, project, run_id, value: dict) -> dict:
        """The table file (``columns``, ``data``) of a history entry ``{_type: table-file, path}``,
        from whichever session folder of the run wrote it."""
        import json

        [file] = [d / "files" / value["path"] for d in self.run_dirs(project, run_id)
                  if (d / "files" / value["path"]).is_file()]
        return json.loads(file.read_text())

    @staticmethod
    def artifact_file(artifact: dict, path: str) -> Path:
        """The local file of one manifest entry: offline, wandb stages artifact files (tables
        included) under ``WANDB_DATA_DIR`` and records each one's ``local_path`` in the record."""
        [entry] = [e for e in artifact["manifest"]["contents"] if e["path"] == path]
        return Path(entry["local_path"])


def _nest_media(item: dict) -> dict:
    """``leet inspect`` prints a media value flat (``h._type``, ``h.bins``...): nest it again."""
    media = {k[: -len("._type")] for k in item if k.endswith("._type")}
    out: dict = {}
    for key, value in item.items():
        prefix = next((m for m in media if key.startswith(m + ".")), None)
        if prefix is None:
            out[key] = value
        else:
            out.setdefault(prefix, {})[key[len(prefix) + 1:]] = value
    return out


HARNESSES["wandb"] = WandbHarness



def mlflow_points(url: str, project: str, run_id: str):
    """Every (key, step, value) the MLflow run of trackstore run ``run_id`` holds, with how
    many times each is held (a Counter: a point sent twice counts 2), read with MLflow's client."""
    from collections import Counter

    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=url)
    exp = c.get_experiment_by_name(project)
    [r] = c.search_runs([exp.experiment_id], filter_string=f"tags.`trackstore.run_id` = '{run_id}'")
    out: Counter = Counter()
    for key in r.data.metrics:
        out.update((key, m.step, m.value) for m in c.get_metric_history(r.info.run_id, key))
    return out
