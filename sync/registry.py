"""Which adapter serves ``--to NAME``: entry points in the group ``trackstore.targets``.

Built-in targets register themselves the same way third-party ones do (see pyproject.toml),
so a package can add ``--to mytracker`` by declaring::

    [project.entry-points."trackstore.targets"]
    mytracker = "mypkg.trackstore_target:MyAdapter"

The built-in table below is only a fallback for running from a source tree without the
package metadata installed.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import entry_points

from trackstore.errors import UsageError

GROUP = "trackstore.targets"
_BUILTIN = {
    "mlflow": "trackstore.sync.mlflow:MlflowAdapter",
    "wandb": "trackstore.sync.wandb:WandbAdapter",
    "wandb-offline": "trackstore.sync.wandb:WandbOfflineAdapter",
    "swanlab": "trackstore.sync.swanlab:SwanlabAdapter",
    "store": "trackstore.sync.replica:ReplicaAdapter",
}


def _targets() -> dict[str, str]:
    found = dict(_BUILTIN)
    try:
        for ep in entry_points(group=GROUP):
            found[ep.name] = ep.value
    except Exception:  # broken metadata of some other package must not break sync
        pass
    return found


def available() -> list[str]:
    return sorted(_targets())


def get_adapter_class(name: str):
    """The adapter class for ``name``; a clear UsageError for unknown or uninstalled targets."""
    targets = _targets()
    spec = targets.get(name)
    if spec is None:
        raise UsageError(f"unknown sync target {name!r}; available: {', '.join(sorted(targets))}")
    module_name, _, attr = spec.partition(":")
    try:
        module = import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"sync target {name!r} is not available: {exc}") from exc
    return getattr(module, attr)
