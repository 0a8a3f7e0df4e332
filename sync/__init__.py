"""Replay stored runs to tracking platforms (installed as ``trackstore.sync``).

One engine (:mod:`.engine`) and one thin adapter per target (:mod:`.mlflow`, :mod:`.wandb`,
:mod:`.swanlab`), found through the registry (:mod:`.registry`). :func:`sync` is the library
entry point the CLI calls; it takes the per-target lock so two syncs never race.
"""

from __future__ import annotations

from .adapter import Adapter, PermanentError, RetryableError, SendResult, TargetOptions
from .engine import Engine, Progress, RunResult, SyncOptions, SyncReport, select_runs
from .registry import available, get_adapter_class

__all__ = ["Adapter", "PermanentError", "RetryableError", "SendResult", "TargetOptions", "Engine", "Progress",
           "RunResult", "SyncOptions", "SyncReport", "select_runs", "available", "get_adapter_class", "sync",
           "make_adapter", "lock_name"]


def lock_name(target: str) -> str:
    """One lock per (store, target): two cron jobs never sync the same target at once."""
    return f"sync-{target}"


def make_adapter(target: str, options: TargetOptions) -> Adapter:
    return get_adapter_class(target)(options)


def sync(root, target: str, opts: SyncOptions, options: TargetOptions | None = None, *,
         progress: Progress | None = None, wait_lock: bool = False, lock_timeout: float | None = None) -> SyncReport:
    """Sync the selected runs of the store at ``root`` to ``target``. Returns the report.

    Raises LockHeldError when another sync of this target holds the lock (unless waiting).
    ``--dry-run`` takes no lock and sends nothing.
    """
    from trackstore.store import locks
    from trackstore.store.layout import resolve_root

    root = resolve_root(root)
    options = options or TargetOptions()
    options.store_root = str(root)
    adapter = make_adapter(target, options)
    closed = False
    try:
        runs = select_runs(root, opts)
        if opts.dry_run:
            return Engine(root, adapter, opts, progress).sync(runs)
        with locks.acquire(root, lock_name(target), wait=wait_lock, timeout=lock_timeout) as lock:
            lock.set_info(runs=[f"{r.project}/{r.run_id}" for r in runs], destination=adapter.destination())
            engine = Engine(root, adapter, opts, progress, on_batch=lock.refresh)
            try:
                return engine.sync(runs)
            finally:
                closed = True  # set first: a close that raises is not tried a second time
                adapter.close()  # inside the lock: closing may still write the target and the cursor
    finally:
        if not closed:
            adapter.close()

