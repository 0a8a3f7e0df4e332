"""Where the test suite's time goes: per module and per test, CPU (every process a test
started) and wall seconds, from what ``pytest -p tests.cpu_profile`` recorded.

    rm -rf /tmp/trackstore-cpu-profile
    .venv/bin/python -m pytest -q -n 3 --dist loadgroup -p tests.cpu_profile
    .venv/bin/python benchmarks/suite_cpu.py [--top 30] [FOLDER]
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", nargs="?", default="/tmp/trackstore-cpu-profile")
    ap.add_argument("--top", type=int, default=30, help="how many modules and tests to list (default 30)")
    args = ap.parse_args()
    rows = [json.loads(line) for f in sorted(Path(args.folder).glob("tests-*.jsonl")) for line in f.open()]
    if not rows:
        raise SystemExit(f"no records in {args.folder}: run pytest with -p tests.cpu_profile first")
    cpu = sum(r["cpu"] or 0 for r in rows)
    wall = sum(r["wall"] for r in rows)
    print(f"{len(rows)} tests: {cpu:.0f} s of CPU, {wall:.0f} s of wall time summed over the workers")
    by_cpu: collections.Counter = collections.Counter()
    by_wall: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    for r in rows:
        module = r["id"].split("::")[0]
        by_cpu[module] += r["cpu"] or 0
        by_wall[module] += r["wall"]
        count[module] += 1
    print(f"\n{'cpu s':>8} {'wall s':>8} {'tests':>6}  module")
    for module, _ in by_cpu.most_common(args.top) if cpu else by_wall.most_common(args.top):
        print(f"{by_cpu[module]:8.1f} {by_wall[module]:8.1f} {count[module]:6d}  {module}")
    print(f"\n{'cpu s':>8} {'wall s':>8}  test")
    for r in sorted(rows, key=lambda r: -(r["cpu"] or r["wall"]))[: args.top]:
        print(f"{(r['cpu'] or 0):8.1f} {r['wall']:8.1f}  {r['id']}")


if __name__ == "__main__":
    main()
