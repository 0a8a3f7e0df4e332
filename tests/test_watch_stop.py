"""``sync --watch`` stops on a signal wherever in its sleep the signal lands.

A signal handler runs in the main thread between two bytecodes, so it can land while that
thread holds a lock; a handler that takes the same lock deadlocks the process. CI once saw
exactly this: SIGTERM landed inside ``Event.wait`` while it held the event's lock, the
handler's ``Event.set`` waited on that lock, and ``--watch`` never stopped. The timing is too
rare to hit by sending signals from outside, so this test places the signal itself: a trace
function raises SIGTERM on the n-th line executed inside ``sleep`` (and whatever it calls).
Every distinct line is covered: the first slices of the sleep and its last lines. A child
process runs the cases, so a deadlock is a timeout that names the line, not a hung suite.
"""

from __future__ import annotations

import subprocess
import sys

CHILD = r"""
import signal, sys, time
from trackstore.cli.sync_watch import WatchStop

WatchStop.SLICE_S = 0.01  # many slices in a short sleep: the loop's lines repeat quickly
SLEEP_S = 1.0

# The sleep's clock advances a fixed amount per reading, so every run of it executes the same
# lines in the same order whatever the machine's load (with the real clock a loaded machine ran
# fewer slices, and a case aimed at one of the last lines never fired); time.sleep stays real.
real_monotonic = time.monotonic
_fake_now = [0.0]


def fake_monotonic():
    _fake_now[0] += 0.025
    return _fake_now[0]


time.monotonic = fake_monotonic


def sleep_with_signal_at(target):
    count, raised_at = 0, None

    def tracer(frame, event, arg):
        nonlocal count, raised_at
        if event == "line":
            count += 1
            if count == target:
                raised_at = real_monotonic()
                signal.raise_signal(signal.SIGTERM)
        return tracer

    stop = WatchStop()
    t0 = real_monotonic()
    sys.settrace(tracer)
    try:
        stopped = stop.sleep(SLEEP_S)
    finally:
        sys.settrace(None)
        stop.restore()
    return count, stopped, real_monotonic() - (raised_at or t0)


lines, stopped, took = sleep_with_signal_at(0)  # no signal: the lines a whole sleep runs
print("whole", lines, stopped, f"{took:.3f}", flush=True)
for n in sorted({*range(1, 13), *range(lines - 6, lines + 1)}):
    print("case", n, flush=True)  # a deadlock leaves this as the last line
    _count, stopped, took = sleep_with_signal_at(n)
    print("result", n, stopped, f"{took:.3f}", flush=True)
"""


def test_a_signal_on_any_line_of_the_sleep_stops_it_at_once():
    try:
        done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        raise AssertionError(f"the sleep hung on a signal; the child's last lines:\n{out[-400:]}") from None
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    _, lines, stopped, took = rows[0]
    assert stopped == "False" and int(lines) >= 20
    results = [r for r in rows if r[0] == "result"]
    assert len(results) >= 12
    for _, n, stopped, took in results:
        assert stopped == "True", f"a signal on line {n} of {lines} did not stop the sleep"
        assert float(took) < 0.5, f"a signal on line {n} of {lines} was noticed only after {took} s"


def test_a_stop_asked_before_the_sleep_skips_it():
    code = ("import signal, time\nfrom trackstore.cli.sync_watch import WatchStop\ns = WatchStop()\n"
            "signal.raise_signal(signal.SIGINT)\nt = time.monotonic()\nprint(s.sleep(5), time.monotonic() - t < 1)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.stdout.split() == ["True", "True"], done.stderr
