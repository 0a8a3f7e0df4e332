"""What `kill -9` costs: how much of the newest logging is lost, against the flush interval.

A child process logs a point every millisecond (each point's value is its wall time) from the
moment `trackstore.init` returns, and is killed with SIGKILL at a random moment between
0.2 s and 4 s after init, so the kill also lands in the run's first flush interval. The loss
is the kill time minus the newest point that reached the disk. docs/concepts.md promises at
most `flush_interval` (plus the time one flush takes): this prints the figures that check it,
and how long `init` itself took.

    python benchmarks/flush_window.py [--repeats 20]
"""

from __future__ import annotations

import argparse
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

CHILD = textwrap.dedent(
    """
    import sys, time
    t0 = time.perf_counter()
    import trackstore
    run = trackstore.init("bench", root=sys.argv[1], run_id="r1", flush_interval=float(sys.argv[2]))
    print(time.perf_counter() - t0, flush=True)
    step = 0
    while True:
        run.log({"wall": time.time()}, step=step)
        step += 1
        time.sleep(0.001)
    """
)


def one(interval: float, delay: float) -> tuple[float, float]:
    import trackstore

    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.Popen([sys.executable, "-c", CHILD, tmp, str(interval)], stdout=subprocess.PIPE, text=True)
        init_s = float(p.stdout.readline())
        time.sleep(delay)
        killed_at = time.time()
        p.send_signal(signal.SIGKILL)
        p.wait()
        con = trackstore.connect(Path(tmp), sync_state=False)
        newest = con.execute("SELECT max(value) FROM metrics").fetchone()[0]
        con.close()
        return killed_at - (newest if newest is not None else killed_at - delay), init_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    rng = random.Random(0)
    print(f"{'flush_interval':>14} {'kills':>5} {'lost: median':>13} {'max':>7} {'max/interval':>12} {'init (median)':>14}")
    for interval in (0.5, 2.0):
        lost, inits = [], []
        for _ in range(args.repeats):
            loss, init_s = one(interval, rng.uniform(0.2, 4.0))
            lost.append(loss)
            inits.append(init_s)
        print(f"{interval:>13.1f}s {len(lost):>5} {statistics.median(lost):>12.2f}s {max(lost):>6.2f}s "
              f"{max(lost) / interval:>12.2f} {statistics.median(inits):>13.2f}s")


if __name__ == "__main__":
    main()
