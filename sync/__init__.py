"""Replay stored runs to tracking platforms (installed as ``trackstore.sync``).

One engine (:mod:`.engine`) and one thin adapter per target (:mod:`.mlflow`, :mod:`.wandb`,
:mod:`.swanlab`), found through the registry (:mod:`.registry`). :func:`sync` is the library
entry point the CLI calls; :mod:`.parallel` runs it, several runs at once with ``jobs``, each
run under its own lock so two syncs never send one run to one destination at once.
"""

from __future__ import annotations

from .adapter import Adapter, PermanentError, RetryableError, SendResult, TargetOptions
from .engine import Engine, Progress, RunResult, SyncOptions, SyncReport, select_runs
from .registry import available, get_adapter_class

__all__ = ["Adapter", "PermanentError", "RetryableError", "SendResult", "TargetOptions", "Engine", "Progress",
           "RunResult", "SyncOptions", "SyncReport", "select_runs", "available", "get_adapter_class", "sync",
           "make_adapter", "lock_name"]


def lock_name(target: str) -> str:
    """The whole-target lock of older versions, ``sync-<target>``: while a live process holds
    it, every run counts as held. Runs are locked one by one now
    (:func:`trackstore.store.locks.sync_run_lock_name`; see :mod:`.parallel`)."""
    from trackstore.store.locks import sync_target_lock_name

    return sync_target_lock_name(target)


def make_adapter(target: str, options: TargetOptions) -> Adapter:
    return get_adapter_class(target)(options)


def sync(root, target: str, opts: SyncOptions, options: TargetOptions | None = None, *,
         progress: Progress | None = None, wait_lock: bool = False, lock_timeout: float | None = None,
         jobs: int | None = None) -> SyncReport:
    """Sync the selected runs of the store at ``root`` to ``target``. Returns the report.

    Up to ``jobs`` runs at once (None: the target's default, :func:`.parallel.default_jobs`),
    each under its own lock: a run another sync is sending to the same destination is tried
    again last and then skipped (``error_kind`` ``locked``), or waited for with ``wait_lock``
    (up to ``lock_timeout`` seconds). ``--dry-run`` takes no lock and sends nothing.
    """
    from trackstore.store.layout import resolve_root

    from .parallel import effective_jobs, sync_runs

    root = resolve_root(root)
    options = options or TargetOptions()
    options.store_root = str(root)
    get_adapter_class(target)  # an unknown target is refused before the store is read
    runs = select_runs(root, opts)
    if opts.dry_run:
        adapter = make_adapter(target, options)
        try:
            effective_jobs(target, adapter, jobs)  # a bad --jobs is refused here too
            return Engine(root, adapter, opts, progress).sync(runs)
        finally:
            adapter.close()
    return sync_runs(root, target, opts, options, runs, lambda: make_adapter(target, options), jobs=jobs,
                     progress=progress, wait=wait_lock, lock_timeout=lock_timeout)
