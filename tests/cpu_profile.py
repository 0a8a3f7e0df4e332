"""Opt-in pytest plugin: the CPU each test used, including every process it started.

``pytest -p tests.cpu_profile -n 3 --dist loadgroup`` (as root, on a machine with cgroup v1
``cpuacct`` mounted at /sys/fs/cgroup/cpuacct) puts each worker in a cgroup of its own, so the
CPU of the CLI runs, SDK service processes, servers and browsers a test starts is counted for
that test, however they were reparented. One JSON line per test (``id``, ``wall``, ``cpu``
seconds) goes to ``$TRACKSTORE_CPU_PROFILE`` (a folder; default /tmp/trackstore-cpu-profile),
one file per worker; ``python benchmarks/suite_cpu.py`` sums them per module. Where no cgroup
can be made, it says so once and records wall time only (cpu null). Never part of
``make test``: it measures the suite, it does not test the product.
"""

from __future__ import annotations

import json
import os
import time

import pytest

CPUACCT = "/sys/fs/cgroup/cpuacct"
_group: str | None = None
_out = None


def pytest_configure(config) -> None:
    global _group, _out
    folder = os.environ.get("TRACKSTORE_CPU_PROFILE", "/tmp/trackstore-cpu-profile")
    os.makedirs(folder, exist_ok=True)
    _out = open(os.path.join(folder, f"tests-{os.getpid()}.jsonl"), "a")  # noqa: SIM115 - open for the session
    group = os.path.join(CPUACCT, f"trackstore-tests-{os.getpid()}")
    try:
        os.makedirs(group, exist_ok=True)
        with open(os.path.join(group, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        _group = group
    except OSError as exc:
        print(f"tests.cpu_profile: no cgroup ({exc}); recording wall time only")


def _cpu() -> float | None:
    if _group is None:
        return None
    with open(os.path.join(_group, "cpuacct.usage")) as f:
        return int(f.read()) / 1e9


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    t0, c0 = time.monotonic(), _cpu()
    yield
    t1, c1 = time.monotonic(), _cpu()
    assert _out is not None
    _out.write(json.dumps({"id": item.nodeid, "wall": t1 - t0,
                           "cpu": None if c0 is None or c1 is None else c1 - c0}) + "\n")
    _out.flush()
