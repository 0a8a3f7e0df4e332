"""Replay stored runs to tracking platforms (installed as ``trackstore.sync``).

One engine (:mod:`.engine`) and one thin adapter per target (:mod:`.mlflow`, :mod:`.wandb`,
:mod:`.swanlab`), found through the registry (:mod:`.registry`). :func:`sync` is the library
entry point the CLI calls; :mod:`.parallel` runs it, several runs at once with ``jobs``, each
run under its own lock so two syncs never send one run to one destination at once.
"""

from __future__ import annotations

from .adapter import Adapter, Capabilities, PermanentError, RetryableError, SendResult, TargetOptions
from .engine import Engine, Progress, RunResult, SyncOptions, SyncReport, select_runs
from .registry import available, get_adapter_class

__all__ = ["Adapter", "Capabilities", "PermanentError", "RetryableError", "SendResult", "TargetOptions", "Engine",
           "Progress", "RunResult", "SyncOptions", "SyncReport", "select_runs", "available", "get_adapter_class",
           "sync", "open_adapter", "lock_name"]


def lock_name(target: str) -> str:
    """The whole-target lock of older versions, ``sync-<target>``: while a live process holds
    it, every run counts as held. Runs are locked one by one now
    (:func:`trackstore.store.locks.sync_run_lock_name`; see :mod:`.parallel`)."""
    from trackstore.store.locks import sync_target_lock_name

    return sync_target_lock_name(target)


def open_adapter(root, target: str, options: TargetOptions | None = None) -> Adapter:
    """The adapter of ``--to target`` for the store at ``root``: the one lookup of the target's
    class (an unknown or uninstalled target is a UsageError, exit 2). Its client is not
    contacted; ``check_online`` does that."""
    from trackstore.store.layout import resolve_root

    options = options or TargetOptions()
    options.store_root = str(resolve_root(root))
    return get_adapter_class(target)(options)


def sync(root, target: str | Adapter, opts: SyncOptions, options: TargetOptions | None = None, *,
         progress: Progress | None = None, wait_lock: bool = False, lock_timeout: float | None = None,
         jobs: int | None = None, processes: bool = False) -> SyncReport:
    """Sync the selected runs of the store at ``root`` to ``target`` (a name, or an adapter from
    :func:`open_adapter`, which this call then owns and closes). Returns the report.

    Up to ``jobs`` runs at once (None: the target's default, its
    :class:`~.adapter.Capabilities`), each under its own lock: a run another sync is sending to
    the same destination is tried again last and then skipped (``error_kind`` ``locked``), or
    waited for with ``wait_lock`` (up to ``lock_timeout`` seconds). ``--dry-run`` takes no lock
    and sends nothing. One adapter serves the whole sync with one worker; each further worker
    has one of its own.

    ``processes``: spread the workers over processes, one per core, for a target that declares
    it (the team store; :mod:`.parallel`), as the CLI does. Each process is spawned, and
    multiprocessing's spawn imports the calling script again in it: a script that passes True
    must keep its top level under ``if __name__ == "__main__":``.
    """
    from trackstore.store.layout import resolve_root

    from .parallel import effective_jobs, sync_runs

    root = resolve_root(root)
    # an unknown target is refused before the store is read
    adapter = target if isinstance(target, Adapter) else open_adapter(root, target, options)
    try:
        runs = select_runs(root, opts)
    except BaseException:
        adapter.close()
        raise
    if opts.dry_run:
        try:
            effective_jobs(adapter, jobs)  # a bad --jobs is refused here too
            return Engine(root, adapter, opts, progress).sync(runs)
        finally:
            adapter.close()
    return sync_runs(root, opts, runs, adapter, jobs=jobs, progress=progress, wait=wait_lock,
                     lock_timeout=lock_timeout, processes=processes)
