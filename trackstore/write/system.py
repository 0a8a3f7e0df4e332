"""System metrics: a sampler thread that logs the machine's state beside the training's metrics.

What it promises:

* **Where they go.** Each sample is one ``run.log`` of metrics under the reserved prefix
  ``system/``, with MLflow's own names (``system/cpu_utilization_percentage``,
  ``system/gpu_0_utilization_percentage``...; the full list in docs/records.md), at the run's
  current step without moving its counter, and with the wall time of the sample: the axis they
  are read on. As metrics they need nothing new of the format, SQL, bundles or sync; MLflow
  shows them in its System metrics tab as they are.
* **What is sampled**: CPU use of the machine and of this process, memory (the machine's used
  and percent, this process's RSS), the disk holding the store (used, free, percent, and read
  and written since the run started), the network (received and sent since the run started),
  and per GPU, through NVML (``nvidia-ml-py``): utilisation, memory used, total and percent,
  temperature, power and the SM and memory clocks. No NVML library or driver means no GPU:
  said once, quietly, and the CPU side goes on. A reading that fails leaves only that value out.
* **When**: the first sample right after ``init``, then every ``interval`` seconds (15 by
  default), from a daemon thread; the sampler stops when the run finishes, however it ends
  (``finish``, exit, an exception, SIGTERM: it is a finish callback), and takes no sample after.
* **It never hurts training.** Nothing raises out of the thread; a sample costs about 1-2 ms of
  one core (under 0.02% at the default interval; docs/performance.md). ``init(system_metrics=
  False)`` or ``TRACKSTORE_SYSTEM_METRICS=0`` turns it off; ``system_metrics_interval=`` or
  ``TRACKSTORE_SYSTEM_METRICS_INTERVAL`` sets the interval.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

from ..store.notices import warn_note

PREFIX = "system/"
ENV = "TRACKSTORE_SYSTEM_METRICS"
INTERVAL_ENV = "TRACKSTORE_SYSTEM_METRICS_INTERVAL"
DEFAULT_INTERVAL_S = 15.0
MIN_INTERVAL_S = 0.1
_MB = 1e6


def enabled_default() -> bool:
    """Whether ``init`` starts the sampler: yes, unless ``TRACKSTORE_SYSTEM_METRICS=0``."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def interval_default() -> float:
    raw = os.environ.get(INTERVAL_ENV, "").strip()
    if not raw:
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        warn_note(f"{INTERVAL_ENV}={raw!r} is not a number of seconds; system metrics every {DEFAULT_INTERVAL_S:g} s")
        return DEFAULT_INTERVAL_S
    return max(value, MIN_INTERVAL_S)


class Gpus:
    """The machine's GPUs through NVML, or none (no library, no driver, no device)."""

    def __init__(self) -> None:
        self.nvml: Any = None
        self.handles: list = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self.nvml = pynvml
        except Exception as exc:  # no nvidia-ml-py, NVMLError_LibraryNotFound, DriverNotLoaded...
            self.why_none = f"{type(exc).__name__}"
        else:
            self.why_none = "" if self.handles else "no device"

    def sample(self) -> dict[str, float]:
        out: dict[str, float] = {}
        nv = self.nvml
        for i, h in enumerate(self.handles):
            p = f"gpu_{i}_"
            util = _try(nv.nvmlDeviceGetUtilizationRates, h)
            if util is not None:
                out[p + "utilization_percentage"] = float(util.gpu)
            mem = _try(nv.nvmlDeviceGetMemoryInfo, h)
            if mem is not None:
                out[p + "memory_usage_megabytes"] = mem.used / _MB
                out[p + "memory_total_megabytes"] = mem.total / _MB
                if mem.total:
                    out[p + "memory_usage_percentage"] = 100.0 * mem.used / mem.total
            _put(out, p + "temperature_celsius", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
            _put(out, p + "power_usage_watts", nv.nvmlDeviceGetPowerUsage, h, scale=1e-3)  # milliwatts
            _put(out, p + "sm_clock_mhz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
            _put(out, p + "memory_clock_mhz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)
        return out

    def close(self) -> None:
        if self.nvml is not None:
            _try(self.nvml.nvmlShutdown)


def _try(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, or None if it raised: one failed reading costs only itself."""
    try:
        return fn(*args)
    except Exception:
        return None


def _put(out: dict[str, float], key: str, fn: Callable[..., Any], *args: Any, scale: float = 1.0) -> None:
    value = _try(fn, *args)
    if isinstance(value, (int, float)):
        out[key] = float(value) * scale


class Machine:
    """The CPU, memory, disk and network side, through psutil (counters relative to the start)."""

    def __init__(self, disk_path: str) -> None:
        import psutil

        self.psutil = psutil
        self.disk_path = disk_path
        self.process = psutil.Process()
        psutil.cpu_percent(None)  # the first call only starts the measurement
        self.process.cpu_percent(None)
        self.disk0 = _try(psutil.disk_io_counters)
        self.net0 = _try(psutil.net_io_counters)

    def sample(self) -> dict[str, float]:
        ps = self.psutil
        out: dict[str, float] = {}
        _put(out, "cpu_utilization_percentage", ps.cpu_percent, None)
        _put(out, "process_cpu_percentage", self.process.cpu_percent, None)
        mem = _try(ps.virtual_memory)
        if mem is not None:
            out["system_memory_usage_megabytes"] = mem.used / _MB
            out["system_memory_usage_percentage"] = float(mem.percent)
        rss = _try(self.process.memory_info)
        if rss is not None:
            out["process_memory_rss_megabytes"] = rss.rss / _MB
        disk = _try(ps.disk_usage, self.disk_path)
        if disk is not None:
            out["disk_usage_percentage"] = float(disk.percent)
            out["disk_usage_megabytes"] = disk.used / _MB
            out["disk_available_megabytes"] = disk.free / _MB
        io = _try(ps.disk_io_counters)
        if io is not None and self.disk0 is not None:
            out["disk_read_megabytes"] = (io.read_bytes - self.disk0.read_bytes) / _MB
            out["disk_write_megabytes"] = (io.write_bytes - self.disk0.write_bytes) / _MB
        net = _try(ps.net_io_counters)
        if net is not None and self.net0 is not None:
            out["network_receive_megabytes"] = (net.bytes_recv - self.net0.bytes_recv) / _MB
            out["network_transmit_megabytes"] = (net.bytes_sent - self.net0.bytes_sent) / _MB
        return out


class SystemSampler:
    """Logs a sample of the machine through ``log(values)`` now and every ``interval`` seconds
    until :meth:`stop` (see the module docstring)."""

    def __init__(self, log: Callable[[dict[str, float]], None], *, interval: float = DEFAULT_INTERVAL_S,
                 disk_path: str = "/", on_open: Callable[[dict[str, Any]], None] | None = None) -> None:
        self._log = log
        self._on_open = on_open
        self.interval = max(float(interval), MIN_INTERVAL_S)
        self.disk_path = disk_path
        self.samples = 0
        self.cpu_s = 0.0  # CPU time the sampling thread spent, for docs/performance.md
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="trackstore-system-metrics", daemon=True)

    def start(self) -> SystemSampler:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop sampling; no sample is logged after this returns (unless the join timed out)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _loop(self) -> None:
        try:
            sources = self._open()
            time.sleep(0.05)  # the first CPU percentages need a moment of history
            while True:  # the first sample is taken even when the run ends at once
                started = time.thread_time()
                values: dict[str, float] = {}
                for source in sources:
                    values.update(source.sample())
                if values:
                    self._log({PREFIX + k: v for k, v in values.items()})
                    self.samples += 1
                self.cpu_s += time.thread_time() - started
                if self._stop.wait(self.interval):
                    break
            for source in sources:
                if isinstance(source, Gpus):
                    source.close()
        except Exception as exc:  # never into training: say so once and stop sampling
            warn_note(f"system metrics stopped: {type(exc).__name__}: {exc}")

    def _open(self) -> list:
        sources: list = []
        try:
            sources.append(Machine(self.disk_path))
        except ImportError:
            warn_note("system metrics: psutil is not installed; CPU, memory, disk and network are not sampled")
        gpus = Gpus()
        if gpus.handles:
            sources.append(gpus)
        if self._on_open is not None:  # "no GPU" is said once, quietly: in run.json, not on the console
            info: dict[str, Any] = {"interval_s": self.interval, "gpus": len(gpus.handles)}
            if not gpus.handles:
                info["no_gpu"] = gpus.why_none
            self._on_open(info)
        return sources
