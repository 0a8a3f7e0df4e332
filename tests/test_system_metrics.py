"""System metrics (trackstore.write.system): a run samples the machine from its first moment at
the interval, into metrics under system/ that never move the step counter; it stops at every
ending; GPUs are read through NVML (here: pynvml's own functions patched to return real NVML
structures, and a real GPU where there is one); no GPU is said once, in run.json; and MLflow
receives the samples as its system metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

import trackstore
from trackstore.write import system


@pytest.fixture(autouse=True)
def sampler_on(monkeypatch):
    monkeypatch.setenv("TRACKSTORE_SYSTEM_METRICS", "1")


def system_rows(root) -> list[tuple[str, int, float]]:
    con = trackstore.connect(root)
    try:
        return con.sql("SELECT key, step, epoch(ts) FROM metrics WHERE key LIKE 'system/%' ORDER BY ts").fetchall()
    finally:
        con.close()


def run_json(root, run) -> dict:
    return json.loads((root / f"project={run.project}" / f"run={run.id}" / "run.json").read_text())


def test_samples_arrive_at_the_interval_from_the_start_under_system(root):
    run = trackstore.init(project="p", root=root, system_metrics_interval=0.2)
    started = time.time()
    for step in range(3):
        run.log({"loss": 1.0 / (step + 1)}, step=step)
        time.sleep(0.4)
    run.finish()
    rows = system_rows(root)
    keys = {k for k, _, _ in rows}
    assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes",
            "system/process_memory_rss_megabytes", "system/disk_usage_percentage",
            "system/network_receive_megabytes"} <= keys
    times = sorted({t for k, _, t in rows if k == "system/cpu_utilization_percentage"})
    assert times[0] - started < 1.0  # the first sample right at the start
    assert 4 <= len(times) <= 9  # about 1.2 s / 0.2 s, loosely: the machine may be busy
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert min(gaps) >= 0.19
    meta = run_json(root, run)
    assert meta["system_metrics"]["interval_s"] == 0.2
    assert meta["last_step"] == 2  # samples never make a step of their own


def test_samples_take_the_last_logged_step_and_never_move_the_counter(root):
    run = trackstore.init(project="p", root=root, system_metrics_interval=0.1)
    time.sleep(0.3)  # samples before any step: at step 0
    run.log({"loss": 1.0})  # step 0
    run.log({"loss": 0.5})  # step 1
    time.sleep(0.3)
    run.log({"loss": 0.25})  # the counter says 2: the samples did not move it
    run.finish()
    steps = {s for k, s, _ in system_rows(root)}
    assert steps <= {0, 1, 2} and 1 in steps
    con = trackstore.connect(root)
    assert con.sql("SELECT step FROM metrics WHERE key = 'loss' ORDER BY step").fetchall() == [(0,), (1,), (2,)]


def test_off_by_init_or_environment(root, monkeypatch):
    a = trackstore.init(project="p", root=root, system_metrics=False)
    a.log({"x": 1.0})
    a.finish()
    monkeypatch.setenv("TRACKSTORE_SYSTEM_METRICS", "0")
    b = trackstore.init(project="p", root=root, system_metrics_interval=0.1)
    b.log({"x": 1.0})
    time.sleep(0.2)
    b.finish()
    assert system_rows(root) == []
    assert "system_metrics" not in run_json(root, a)


def test_a_bad_interval_is_refused_before_anything_is_written(root):
    with pytest.raises(ValueError, match="system_metrics_interval"):
        trackstore.init(project="p", root=root, system_metrics_interval=0)
    assert not list(root.iterdir())


def test_a_run_that_ends_at_once_still_has_its_first_sample(root):
    run = trackstore.init(project="p", root=root)
    run.finish()
    assert len({t for *_, t in system_rows(root)}) == 1


CHILD = r"""
import os, signal, sys, time, trackstore
run = trackstore.init(project="p", root=sys.argv[1], run_id="r", system_metrics_interval=0.1)
run.log({"loss": 1.0})
time.sleep(0.5)
how = sys.argv[2]
if how == "exception":
    raise RuntimeError("training blew up")
if how == "sigterm":
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
if how == "exit":
    sys.exit(3)
"""


@pytest.mark.parametrize("how", ["exception", "sigterm", "exit", "return"])
def test_the_sampler_stops_at_every_ending(root, how):
    env = {**os.environ, "TRACKSTORE_SYSTEM_METRICS": "1"}
    started = time.monotonic()
    child = subprocess.run([sys.executable, "-c", CHILD, str(root), how], env=env, capture_output=True, text=True,
                           timeout=60)
    assert time.monotonic() - started < 20  # nothing kept the process alive
    assert "system metrics stopped" not in child.stderr
    rows = system_rows(root)
    assert len({t for *_, t in rows}) >= 3
    # nothing was sampled after the run ended: every sample is before run.json's end time
    meta = json.loads((root / "project=p" / "run=r" / "run.json").read_text())
    from trackstore.store.clock import parse_iso

    assert max(t for *_, t in rows) <= parse_iso(meta["ended_at"]) + 1e-3
    assert meta["status"] == {"exception": "failed", "sigterm": "failed", "exit": "failed", "return": "finished"}[how]


class FakeNvml:
    """pynvml's functions, patched to return the real NVML structures a driver gives."""

    def __init__(self, pynvml, count=2):
        self.pynvml, self.count = pynvml, count

    def install(self, monkeypatch):
        nv = self.pynvml
        monkeypatch.setattr(nv, "nvmlInit", lambda: None)
        monkeypatch.setattr(nv, "nvmlShutdown", lambda: None)
        monkeypatch.setattr(nv, "nvmlDeviceGetCount", lambda: self.count)
        monkeypatch.setattr(nv, "nvmlDeviceGetHandleByIndex", lambda i: i)

        def util(h):
            u = nv.c_nvmlUtilization_t()
            u.gpu, u.memory = 40 + h, 10
            return u

        def mem(h):
            m = nv.c_nvmlMemory_t()
            m.total, m.used = 80 * 10**9, (20 + h) * 10**9
            m.free = m.total - m.used
            return m

        monkeypatch.setattr(nv, "nvmlDeviceGetUtilizationRates", util)
        monkeypatch.setattr(nv, "nvmlDeviceGetMemoryInfo", mem)
        monkeypatch.setattr(nv, "nvmlDeviceGetTemperature", lambda h, sensor: 61 + h)
        monkeypatch.setattr(nv, "nvmlDeviceGetPowerUsage", lambda h: 250_000 + h)  # milliwatts
        monkeypatch.setattr(nv, "nvmlDeviceGetClockInfo", lambda h, clock: 1980 if clock == nv.NVML_CLOCK_SM else 2619)


def test_gpus_are_read_through_nvml_structures(root, monkeypatch):
    pynvml = pytest.importorskip("pynvml")
    FakeNvml(pynvml).install(monkeypatch)
    got = system.Gpus().sample()
    assert got["gpu_0_utilization_percentage"] == 40 and got["gpu_1_utilization_percentage"] == 41
    assert got["gpu_1_memory_usage_megabytes"] == 21_000 and got["gpu_0_memory_total_megabytes"] == 80_000
    assert got["gpu_0_memory_usage_percentage"] == 25.0
    assert got["gpu_0_temperature_celsius"] == 61 and got["gpu_0_power_usage_watts"] == 250.0
    assert got["gpu_0_sm_clock_mhz"] == 1980 and got["gpu_0_memory_clock_mhz"] == 2619
    run = trackstore.init(project="p", root=root, system_metrics_interval=0.1)
    time.sleep(0.3)
    run.finish()
    keys = {k for k, *_ in system_rows(root)}
    assert {"system/gpu_0_utilization_percentage", "system/gpu_1_power_usage_watts"} <= keys
    assert run_json(root, run)["system_metrics"]["gpus"] == 2


def test_a_failing_gpu_reading_leaves_out_only_that_value(monkeypatch):
    pynvml = pytest.importorskip("pynvml")
    FakeNvml(pynvml, count=1).install(monkeypatch)

    def broken(h):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetPowerUsage", broken)
    got = system.Gpus().sample()
    assert "gpu_0_power_usage_watts" not in got and got["gpu_0_utilization_percentage"] == 40


def test_no_gpu_is_said_once_in_run_json_and_not_on_the_console(root, monkeypatch, capfd):
    pynvml = pytest.importorskip("pynvml")

    def no_library():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_library)
    run = trackstore.init(project="p", root=root)
    run.finish()
    info = run_json(root, run)["system_metrics"]
    assert info["gpus"] == 0 and info["no_gpu"].startswith("NVMLError")
    assert "GPU" not in capfd.readouterr().err
    assert not any("gpu" in k for k, *_ in system_rows(root))


@pytest.mark.gpu
def test_a_real_gpu_is_read_where_there_is_one():
    gpus = system.Gpus()
    if not gpus.handles:
        pytest.skip(f"no GPU on this machine ({gpus.why_none})")
    got = gpus.sample()
    assert got["gpu_0_memory_total_megabytes"] > 0 and 0 <= got["gpu_0_utilization_percentage"] <= 100


def test_samples_reach_mlflow_as_its_system_metrics(root, tmp_path):
    mlflow = pytest.importorskip("mlflow")
    from tests.helpers import mlflow_sqlite_uri, run_cli

    run = trackstore.init(project="p", root=root, system_metrics_interval=0.1)
    run.log({"loss": 1.0})
    time.sleep(0.35)
    run.finish()
    want = sorted(t for k, _, t in system_rows(root) if k == "system/cpu_utilization_percentage")
    uri = mlflow_sqlite_uri(tmp_path)
    out = run_cli("sync", "--to", "mlflow", "--uri", uri, root=root)
    assert out.returncode == 0, out.stderr
    client = mlflow.MlflowClient(tracking_uri=uri)
    (remote,) = client.search_runs([client.get_experiment_by_name("p").experiment_id])
    assert "system/cpu_utilization_percentage" in remote.data.metrics  # MLflow's System metrics tab reads system/
    hist = client.get_metric_history(remote.info.run_id, "system/cpu_utilization_percentage")
    assert sorted(m.timestamp for m in hist) == [int(t * 1000) for t in want]

