"""What the system metrics sampler (trackstore.write.system) costs a training process.

    .venv/bin/python benchmarks/system_metrics.py            # 200 samples
    .venv/bin/python benchmarks/system_metrics.py --samples 1000

A run is started with the sampler at a short interval (0.05 s, so that many samples are taken
quickly) and the sampling thread's own CPU time (``time.thread_time`` around each sample, the
sampler's ``cpu_s``) is divided by the samples it took: the cost of one sample, which at the
default interval of 15 s is a share of one core. Anchors in the same run: one ``psutil``
reading alone (``cpu_percent`` + ``virtual_memory``: what any sampler pays), and NVML's
initialisation where there is no GPU (what "no GPU" costs once). The figure goes into
docs/performance.md (target: under 0.1% of one core at the default interval).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=200)
    args = ap.parse_args()
    os.environ["TRACKSTORE_SYSTEM_METRICS"] = "1"
    import psutil

    import trackstore
    from trackstore.write import system

    t = []
    for _ in range(200):
        s = time.thread_time()
        psutil.cpu_percent(None)
        psutil.virtual_memory()
        t.append(time.thread_time() - s)
    psutil_ms = statistics.median(t) * 1000
    s = time.perf_counter()
    gpus = system.Gpus()
    nvml_ms = (time.perf_counter() - s) * 1000

    with tempfile.TemporaryDirectory() as root:
        samplers = []
        real = system.SystemSampler.start

        def keep(self):  # the run's sampler, to read its counters
            samplers.append(self)
            return real(self)

        system.SystemSampler.start = keep
        run = trackstore.init(project="bench", root=root, system_metrics_interval=0.05)
        deadline = time.time() + 120
        while samplers[0].samples < args.samples and time.time() < deadline:
            time.sleep(0.05)
        run.finish()
        sampler = samplers[0]
        con = trackstore.connect(root)
        keys = con.sql("SELECT count(DISTINCT key) FROM metrics WHERE key LIKE 'system/%'").fetchall()[0][0]
        con.close()
    per_sample_ms = sampler.cpu_s / sampler.samples * 1000
    share = per_sample_ms / 1000 / system.DEFAULT_INTERVAL_S * 100
    print(f"\n{sampler.samples} samples of {keys} keys ({gpus.handles and len(gpus.handles) or 0} GPUs: "
          f"{gpus.why_none or 'NVML'}); Python {sys.version.split()[0]}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| what | ms | notes |\n|---|---|---|")
    print(f"| anchor: psutil cpu_percent + virtual_memory, one reading (thread CPU) | {psutil_ms:.3f} | |")
    print(f"| anchor: NVML initialisation on this machine (once per run) | {nvml_ms:.3f} | {gpus.why_none or 'found GPUs'} |")
    print(f"| one sample: every reading, logged as metrics (sampler thread CPU) | {per_sample_ms:.3f} | "
          f"{per_sample_ms / psutil_ms:.1f}x the psutil anchor |")
    print(f"| share of one core at the default {system.DEFAULT_INTERVAL_S:g} s interval | | **{share:.4f}%** "
          f"(target under 0.1%: {'met' if share < 0.1 else 'NOT met'}) |")


if __name__ == "__main__":
    main()
