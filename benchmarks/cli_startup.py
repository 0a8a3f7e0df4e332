"""How long the ``trackstore`` command takes to answer, beside the floor of starting Python.

    .venv/bin/python benchmarks/cli_startup.py            # 9 runs of each, on a fresh demo store
    .venv/bin/python benchmarks/cli_startup.py --runs 21

Times the installed ``trackstore`` script (wall time of the whole process, output to
/dev/null) for ``--help``, ``runs``, ``show RUN``, ``sql "SELECT ..."`` and ``runs --help``,
and ``python -c pass`` as the floor, on a demo store written by ``trackstore demo`` twice.
Prints the median and the fastest of each, and the median's ratio to the floor's (issue 18's
target: ``--help`` within 2.5x the floor, under 0.2 s; ``runs`` under 0.5 s).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def command() -> list[str]:
    script = Path(sys.executable).with_name("trackstore")
    return [str(script)] if script.exists() else [sys.executable, "-m", "trackstore.cli.main"]


def wall(argv: list[str], runs: int, env: dict) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9, help="runs of each command (default 9)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ts-startup-"))
    try:
        root = tmp / "store"
        env = {**os.environ, "COLUMNS": "80", "TRACKSTORE_DISABLE_GIT": "1"}
        env.pop("TRACKSTORE_DIR", None)
        ts = command()
        for _ in range(2):
            subprocess.run([*ts, "demo", "--root", str(root)], stdout=subprocess.DEVNULL, env=env, check=True)
        run_id = sorted(p.name.split("=", 1)[1] for p in root.glob("project=*/run=*"))[0]
        cases = [
            ("python -c pass (floor)", [sys.executable, "-c", "pass"]),
            ("trackstore --help", [*ts, "--help"]),
            ("trackstore runs", [*ts, "runs", "--root", str(root)]),
            ("trackstore show RUN", [*ts, "show", run_id, "--root", str(root)]),
            ("trackstore sql", [*ts, "sql", "SELECT key, max(value) FROM metrics GROUP BY key", "--root", str(root)]),
            ("trackstore runs --help", [*ts, "runs", "--help"]),
        ]
        for _name, argv in cases:  # warm the page cache and the bytecode
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        results = [(name, wall(argv, args.runs, env)) for name, argv in cases]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    floor = statistics.median(results[0][1])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{args.runs} runs each, Python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {load:.2f}")
    print("| command | median s | fastest s | median / floor |\n|---|---|---|---|")
    for name, times in results:
        med = statistics.median(times)
        print(f"| `{name}` | {med:.3f} | {min(times):.3f} | {med / floor:.1f}x |")


if __name__ == "__main__":
    main()
