"""How a process's ending ends its runs: atexit, ``sys.exit``, uncaught exceptions, SIGTERM, fork.

This module owns the process-wide state of the write side: :data:`live_runs` (runs this
process owns, ended by its ending), :data:`joined_runs` (runs it helps write, see
``init(join=True)``: their end is recorded as ``finished`` whatever the process's end) and
:data:`current` (the run :func:`trackstore.init` started last). :func:`install_process_hooks`
installs, once per process and chaining what exists, the hooks that finish those runs with
their data flushed: at exit (``failed`` after a non-zero ``sys.exit`` or an uncaught
exception), and on SIGTERM (``failed``, then the process dies of the signal as it would have;
a program's own SIGTERM handler keeps control of shutdown). A forked child disowns its copies
of the parent's runs. :func:`signals_deferred` guards a flush against the signals themselves.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import traceback
import weakref
from contextlib import contextmanager
from typing import Any, Protocol

from ..store.vocab import RunStatus


class EndableRun(Protocol):
    """What the hooks use of a :class:`trackstore.write.run.Run` (its own internals included)."""

    _failed_error: str | None

    def finish(self, exit_code: int | None = None, *, status: str | None = None, error: str | None = None,
               compact: bool | None = None) -> None: ...

    def flush(self) -> bool: ...

    @property
    def id(self) -> str: ...

    def _fail(self, error: str) -> None: ...

    def _forked_copy(self) -> None: ...


current: EndableRun | None = None  # the Run started last by init in this process and not yet finished
live_runs: weakref.WeakSet[EndableRun] = weakref.WeakSet()  # runs this process owns: ended by its ending
joined_runs: weakref.WeakSet[EndableRun] = weakref.WeakSet()  # runs it joined (init(join=True))
_hooks_installed = False
_hooks_lock = threading.Lock()

# Signal handlers run in the main thread between two bytecodes, possibly while that thread is
# itself inside Run.flush/finish (holding the writer's I/O lock). Flushing again from the
# handler would deadlock, and a KeyboardInterrupt raised in the middle of the final flush would
# lose what it was writing. So while the main thread is inside such a section, SIGTERM and
# SIGINT are only noted, and handled the moment the section ends (at interpreter exit, a SIGINT
# is then only reported: the process is ending anyway).
_busy_depth = 0
_deferred_signals: list[tuple[int, Any]] = []
_exiting = False  # set by the atexit hook: nothing may be imported from here on
_exit_code: Any = None  # what the program passed to sys.exit, if it did


@contextmanager
def signals_deferred():
    global _busy_depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    outer = _busy_depth == 0
    previous_int = _defer_sigint() if outer else None
    _busy_depth += 1
    try:
        yield
    finally:
        _busy_depth -= 1
        if outer:
            _restore_sigint(previous_int)
        if _busy_depth == 0 and _deferred_signals:
            pending = list(_deferred_signals)
            _deferred_signals.clear()
            terms = [(n, f) for n, f in pending if n != signal.SIGINT]
            if terms:
                _handle_sigterm(*terms[0])
            elif not _exiting and callable(previous_int):
                previous_int(signal.SIGINT, pending[0][1])  # the interrupt, now that the data is safe


def _on_deferred_sigint(signum, frame):
    if not any(n == signal.SIGINT for n, _f in _deferred_signals):
        sys.stderr.write("trackstore: saving buffered data before stopping; the interrupt takes effect right "
                         "after (kill -9 abandons what is not yet written)\n")
    _deferred_signals.append((signum, frame))


def _defer_sigint():
    """Note SIGINT instead of raising KeyboardInterrupt; returns the handler to restore."""
    try:
        previous = signal.getsignal(signal.SIGINT)
        if previous in (signal.SIG_IGN, None) or previous is _on_deferred_sigint:
            return None
        signal.signal(signal.SIGINT, _on_deferred_sigint)
        return previous
    except (ValueError, OSError):  # not the main thread of the main interpreter
        return None


def _restore_sigint(previous) -> None:
    if previous is None:
        return
    try:
        signal.signal(signal.SIGINT, previous)
    except (ValueError, OSError):
        pass


def _exit_status() -> tuple[str | None, int | None, str | None]:
    """(status, exit code, error) for runs ended by the interpreter's exit, from ``sys.exit``."""
    code = _exit_code
    if code is None or code == 0:
        return None, None, None
    if isinstance(code, int):
        return RunStatus.FAILED, code, f"exited with sys.exit({code})"
    return RunStatus.FAILED, 1, f"exited with sys.exit({str(code)[:200]!r})"


def _finish_at_exit() -> None:
    """The atexit hook: end every run this process still has open, data first."""
    global _exiting
    _exiting = True
    status, code, error = _exit_status()
    with signals_deferred():
        for run in list(joined_runs):  # this process only helped: its ending is not the run's
            try:
                run.finish(status=RunStatus.FINISHED)
            except Exception as exc:  # atexit context: report, never raise
                sys.stderr.write(f"trackstore: WARNING: finishing joined run {run.id}: {exc}\n")
        for run in list(live_runs):
            try:
                run.finish(code, status=status, error=run._failed_error or error)
            except Exception as exc:  # atexit context: report, never raise
                sys.stderr.write(f"trackstore: WARNING: {exc}\n")


def _finish_all(status: str | None = None, error: str | None = None, compact: bool | None = None) -> None:
    for run in list(live_runs):
        try:
            run.finish(status=status, error=error or run._failed_error, compact=compact)
        except Exception as exc:  # signal context: report, never raise
            sys.stderr.write(f"trackstore: WARNING: {exc}\n")


_SIGTERM_ERROR = "terminated by SIGTERM"
_previous_sigterm: Any = signal.SIG_DFL


def _on_sigterm(signum, frame):
    if _busy_depth:
        _deferred_signals.append((signum, frame))
        return
    _handle_sigterm(signum, frame)


def _handle_sigterm(signum, frame):
    """SIGTERM (scheduler pre-emption, ``kill``, ``timeout``): make every run's data safe.

    With no other handler, the runs are finished as ``failed`` ("terminated by SIGTERM") and
    the signal is re-raised with its default action, so the process still dies of SIGTERM. If
    the program had its own handler (a graceful-shutdown flag, torchrun's), that handler owns
    shutdown: the runs are flushed and the reason is recorded, they stay open for the last
    ``log`` calls, and ``finish``/``atexit`` later mark them ``failed`` with it.
    """
    previous = _previous_sigterm
    if callable(previous):
        for run in list(live_runs):
            run._fail(_SIGTERM_ERROR)
            try:
                run.flush()
            except Exception as exc:
                sys.stderr.write(f"trackstore: WARNING: flush on SIGTERM failed: {exc}\n")
        previous(signum, frame)
        return
    # No merging of part files here: a pre-empted job has seconds before SIGKILL, and the data
    # is what must be safe. `trackstore compact` merges such runs later.
    _finish_all(status=RunStatus.FAILED, error=_SIGTERM_ERROR, compact=False)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _after_fork_in_child() -> None:
    """A forked child (DataLoader and rollout workers, ``multiprocessing`` with fork) inherits
    the parent's runs, atexit hook and SIGTERM handler. Its copies (of the runs the parent owns
    or joined) are disowned, so neither its exit nor a SIGTERM to it (torch terminates stuck
    workers that way) touches the parent's run."""
    global current, _busy_depth
    for run in [*live_runs, *joined_runs]:
        run._forked_copy()
    live_runs.clear()
    joined_runs.clear()
    current = None
    _busy_depth = 0
    _deferred_signals.clear()


def install_process_hooks() -> None:
    """atexit, sys.excepthook, sys.exit and SIGTERM, installed once per process, chaining what
    exists.

    SIGINT needs no handler of its own: it raises KeyboardInterrupt, which the excepthook
    records and ``atexit`` (or the ``with`` block) turns into a ``failed`` run; from the moment
    the main thread dies of an exception, and during every final flush, further SIGINTs are
    only noted (see :func:`signals_deferred`). ``sys.exit(n)`` is recorded (the exit code is
    not visible to ``atexit``), so a non-zero exit ends the runs ``failed`` with that code. An
    uncaught exception in another thread does not end the process, so it does not end the run
    either. A SIGTERM the program ignores (``SIG_IGN``) stays ignored.
    """
    global _hooks_installed, _previous_sigterm
    with _hooks_lock:
        if _hooks_installed:
            return
        _hooks_installed = True
    atexit.register(_finish_at_exit)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)

    previous_hook = sys.excepthook

    def _excepthook(exc_type, exc, tb):
        err = "".join(traceback.format_exception_only(exc_type, exc)).strip()
        for run in list(live_runs):
            run._fail(err)
        if live_runs and threading.current_thread() is threading.main_thread() and not hasattr(sys, "ps1"):
            _defer_sigint()  # the process is ending: a second Ctrl-C must not cut the final flush
        previous_hook(exc_type, exc, tb)

    sys.excepthook = _excepthook

    previous_exit = sys.exit

    def _exit(status: Any = None):
        global _exit_code
        if threading.current_thread() is threading.main_thread():
            _exit_code = status
        previous_exit(status)

    _exit.__doc__ = previous_exit.__doc__
    sys.exit = _exit

    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be installed from the main thread
    try:
        previous = signal.getsignal(signal.SIGTERM)
        if previous == signal.SIG_IGN:
            return
        _previous_sigterm = previous if callable(previous) else signal.SIG_DFL
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):
        pass
