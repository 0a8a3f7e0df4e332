"""Every error trackstore raises on purpose, and the CLI exit code each one maps to.

The hierarchy::

    TrackstoreError                 base class; never raised itself        exit 1
    ├── InvalidNameError(ValueError)  a project/run/artifact name cannot become a path   exit 2
    ├── InvalidValueError(ValueError) a logged value or key is not acceptable            exit 2
    ├── UsageError                  bad command-line input, bad argument combination    exit 2
    │   └── NotSupportedError(NotImplementedError)  a wandb feature the drop-in lacks
    ├── RunNotFoundError            a run reference matches no run                      exit 3
    ├── AmbiguousRunError           a run reference matches several runs                exit 3
    ├── StoreError                  the store on disk is damaged or unreadable          exit 4
    │   ├── CorruptFileError        one data file cannot be read (names the file)
    │   └── GapError                unreadable parts hide rows a sync target lacks: run blocked
    ├── WriteError                  data could not be written (reported at finish)      exit 4
    ├── QueryError                  a SQL query failed or was refused                   exit 5
    ├── LockHeldError               another process holds the lock (sync, gc)           exit 6
    ├── TargetUnreachableError      a sync target cannot be reached                     exit 7
    ├── BundleError                 an export/import bundle is invalid or tampered      exit 9
    ├── TargetRefusedError          a sync destination refused for good (access denied,
    │                               no such bucket, read-only or full filesystem)       exit 10
    ├── RetryableError              a sync target failed for now: the engine retries    exit 1
    └── PermanentError              a sync target refused for good: that run stops     exit 1

A subclass keeps its parent's exit code. RetryableError and PermanentError are what a sync
adapter raises from ``send`` and friends (:mod:`trackstore.sync.adapter`, which re-exports
them); the engine catches them per run, so a pass ends with exit 8 rather than their own code.

Exit 8 (some runs synced, others failed or were blocked) is the sync command's own summary of a
pass, not an exception.

Messages say what happened and what to do next; the CLI prints them without a traceback.
The exit codes are documented in docs/cli.md and cron jobs may rely on them.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_STORE = 4
EXIT_QUERY = 5
EXIT_LOCKED = 6
EXIT_UNREACHABLE = 7
EXIT_PARTIAL = 8
EXIT_BUNDLE = 9
EXIT_REFUSED = 10


class TrackstoreError(Exception):
    """Base class of every error trackstore raises on purpose. A subclass names its exit code
    in its bases (``class UsageError(TrackstoreError, exit_code=EXIT_USAGE)``), else keeps its
    parent's."""

    exit_code: int = EXIT_ERROR

    def __init_subclass__(cls, *, exit_code: int | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if exit_code is not None:
            cls.exit_code = exit_code


class InvalidNameError(TrackstoreError, ValueError, exit_code=EXIT_USAGE):
    """A name that would become part of a path (project, run id, artifact) is not valid."""


class InvalidValueError(TrackstoreError, ValueError, exit_code=EXIT_USAGE):
    """A value or key passed to ``log`` (or a sibling) cannot be stored."""


class UsageError(TrackstoreError, exit_code=EXIT_USAGE):
    """The caller combined arguments that do not make sense together."""


class RunNotFoundError(TrackstoreError, LookupError, exit_code=EXIT_NOT_FOUND):
    """A run reference (id, id prefix or project/name) matched no run."""


class AmbiguousRunError(TrackstoreError, LookupError, exit_code=EXIT_NOT_FOUND):
    """A run reference matched more than one run; the message lists the candidates."""


class StoreError(TrackstoreError, exit_code=EXIT_STORE):
    """The store on disk cannot be used as it is."""


class CorruptFileError(StoreError):
    """One data file in the store is unreadable. ``path`` names it."""

    def __init__(self, path: str, detail: str = ""):
        self.path = path
        self.detail = detail
        msg = f"unreadable data file {path}"
        if detail:
            msg += f": {detail}"
        msg += " (run `trackstore doctor` to find and quarantine damaged files)"
        super().__init__(msg)


class WriteError(TrackstoreError, exit_code=EXIT_STORE):
    """Data could not be written to disk even after retries (raised at finish, never in log)."""


class QueryError(TrackstoreError, exit_code=EXIT_QUERY):
    """A SQL query failed, or was refused because it would modify the store."""


class LockHeldError(TrackstoreError, exit_code=EXIT_LOCKED):
    """Another live process holds the lock this operation needs."""


class TargetUnreachableError(TrackstoreError, exit_code=EXIT_UNREACHABLE):
    """The sync target could not be reached (network down, server not running)."""


class BundleError(TrackstoreError, exit_code=EXIT_BUNDLE):
    """An export bundle is malformed, tampered with or conflicts with the store."""


class TargetRefusedError(TrackstoreError, exit_code=EXIT_REFUSED):
    """The sync destination refused what no retry can fix and every run would meet alike:
    access denied, no such bucket, a read-only or full filesystem. The sync stops (it is not
    one run's failure)."""


class NotSupportedError(UsageError, NotImplementedError):
    """A wandb feature the trackstore drop-in (:mod:`trackstore.compat.wandb`) does not cover."""


class GapError(StoreError):
    """A run's sync stopped: part files it cannot read hide rows the target does not hold."""


class RetryableError(TrackstoreError):
    """Transient failure: the engine retries with exponential backoff and jitter."""


class PermanentError(TrackstoreError):
    """Retrying cannot help (auth, deleted remote object, rejected value): stop this run."""
