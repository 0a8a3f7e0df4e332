"""How ``trackstore sync --watch`` stops: Ctrl-C or SIGTERM, at once and never half-way silently.

:class:`WatchStop` turns the two signals into a flag (and, while the loop sleeps or a pass
talks to the target, a KeyboardInterrupt); :func:`in_pass` marks the span of a pass. An
interrupted pass is safe to cut: the engine's in-doubt batch protocol settles the batch it
stopped in on the next sync. The previous handlers come back with :meth:`WatchStop.restore`.
"""

from __future__ import annotations

import contextlib


class WatchStop:
    """Ctrl-C or SIGTERM ends ``--watch``: at once while it sleeps, else by interrupting the pass.

    The flag matters as much as the interrupt: a client library that swallows the
    KeyboardInterrupt mid-request (some catch BaseException around retries) would otherwise
    let the loop run on for ever. Interrupting a pass is safe: the engine's in-doubt batch
    protocol settles the interrupted batch on the next sync.

    The handler touches no lock: it runs in the main thread between two bytecodes, possibly
    inside ``Event.wait`` holding the event's lock, so ``Event.set`` there deadlocks (a
    SIGTERM between rounds once hung ``--watch`` for good). It sets a plain flag and, while
    the loop sleeps or syncs, raises to cut the wait short. The sleep goes in short slices:
    a signal that arrives just before ``time.sleep`` begins has its Python handler run only
    when that sleep ends, which must not be a whole ``--watch`` interval later.
    """

    SLICE_S = 0.2  # a signal whose handler is still pending when a sleep starts waits this long at most

    def __init__(self):
        import signal

        self.stopped = False
        self.in_pass = False  # True only while a sync pass talks to the target
        self._sleeping = False
        self._previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}

    def _handle(self, signum, frame):
        self.stopped = True
        if self.in_pass or self._sleeping:
            raise KeyboardInterrupt

    def sleep(self, seconds: float) -> bool:
        """Wait ``seconds``; True when asked to stop (before or during the wait)."""
        import time

        try:
            try:
                self._sleeping = True  # from here a signal raises; before it, the check below sees the flag
                deadline = time.monotonic() + seconds
                while not self.stopped and (left := deadline - time.monotonic()) > 0:
                    time.sleep(min(left, self.SLICE_S))
            finally:
                self._sleeping = False  # a signal even here is caught below
        except KeyboardInterrupt:
            return True
        return self.stopped

    def restore(self) -> None:
        import signal

        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def in_pass(stop: WatchStop | None):
    """While a pass talks to the target, a stop signal interrupts it; otherwise it only sets the flag."""
    if stop is None:
        yield
        return
    if stop.stopped:
        raise KeyboardInterrupt  # asked to stop just before this pass began
    stop.in_pass = True
    try:
        yield
    finally:
        stop.in_pass = False
