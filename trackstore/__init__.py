"""trackstore: the local-first experiment store for LLM RL training.

    import trackstore
    run = trackstore.init(project="grpo", name="exp1", config={"lr": 1e-6})
    run.log({"actor/entropy": 0.31}, step=10)
    run.finish()
    con = trackstore.connect()        # DuckDB connection with views over every run

``import trackstore`` is cheap: it imports the errors and the version only (every public name
loads on first use), so neither pyarrow nor duckdb nor any target SDK.
pyarrow is imported by the writer thread at its first flush, duckdb by ``connect``/``query``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__
from .errors import (
    AmbiguousRunError,
    BundleError,
    CorruptFileError,
    InvalidNameError,
    InvalidValueError,
    LockHeldError,
    QueryError,
    RunNotFoundError,
    StoreError,
    TargetUnreachableError,
    TrackstoreError,
    UsageError,
    WriteError,
)

if TYPE_CHECKING:  # pragma: no cover
    from .integrations.watch import unwatch, watch
    from .read.views import connect, query, wide
    from .records.histogram import Histogram
    from .records.images import Image
    from .records.trace import configure, traced
    from .write.run import Run, current_run, finish, init, log

__all__ = [
    "__version__",
    "init",
    "log",
    "finish",
    "current_run",
    "Run",
    "Histogram",
    "Image",
    "connect",
    "query",
    "wide",
    "traced",
    "configure",
    "watch",
    "unwatch",
    "TrackstoreError",
    "InvalidNameError",
    "InvalidValueError",
    "UsageError",
    "RunNotFoundError",
    "AmbiguousRunError",
    "StoreError",
    "CorruptFileError",
    "WriteError",
    "QueryError",
    "LockHeldError",
    "TargetUnreachableError",
    "BundleError",
]

# the write path too: `import trackstore.cli.main` (every CLI start) pays for none of it
_LAZY_BY_MODULE = {
    "write.run": ("init", "log", "finish", "current_run", "Run"),
    "records.histogram": ("Histogram",),
    "records.images": ("Image",),
    "read.views": ("connect", "query", "wide"),
    "records.trace": ("traced", "configure"),
    "integrations.watch": ("watch", "unwatch"),
}
_LAZY = {name: module for module, names in _LAZY_BY_MODULE.items() for name in names}


def __getattr__(name: str) -> Any:
    # Everything but the version and the errors loads on first use only.
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'trackstore' has no attribute {name!r}")
    import importlib

    module = importlib.import_module(f".{module_name}", __name__)
    value = globals()[name] = getattr(module, name)
    return value
