"""How a run's metadata looks in SwanLab, and what SwanLab's local dashboard needs.

* Config: SwanLab's cards and tables show a nested value as ``[object Object]``, so the config
  goes flattened (``model.layers``), every value a number, a boolean or text (lists and other
  structures as compact JSON). trackstore's own facts (run id, times, status, exit code, host,
  user, git commit, tags, summary) travel as ``trackstore.*`` keys of the same config; tags are
  also there as text (``trackstore.tags``), since the local dashboard does not show SwanLab's
  experiment tags. Flattening uses :func:`trackstore.read.overview.flatten`.
* Local mode (``--mode local``) writes, besides SwanLab's run folders, the database of its local
  dashboard (``swanlab watch``). SwanLab does that through the ``swanboard`` package, and only
  with exactly the version its client names (:data:`SWANBOARD_VERSION` for swanlab 0.10); without
  it SwanLab writes the run folders and silently no dashboard database. :func:`require_swanboard`
  refuses that before anything is written (a usage error, exit 2).
* The dashboard's database holds one project: each trackstore project gets its own folder,
  ``<logdir>/<project>``, to be opened with ``swanlab watch <logdir>/<project>`` (see
  :func:`project_logdir`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trackstore.errors import UsageError
from trackstore.read.overview import flatten

SWANBOARD_VERSION = "0.1.10b2"
SWANBOARD_INSTALL = (f"pip install --no-deps swanboard=={SWANBOARD_VERSION} && "
                     "pip install fastapi uvicorn 'peewee>3,<4' ujson psutil")


def readable_value(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return json.dumps(v, ensure_ascii=False, default=str, sort_keys=isinstance(v, dict))


def readable_config(config: dict, facts: dict) -> dict[str, Any]:
    """The flat config SwanLab receives: the user's config, then ``trackstore.<fact>``."""
    out = {k: readable_value(v) for k, v in flatten(config or {}).items()}
    for k, v in flatten({"trackstore": facts}).items():
        if v not in (None, {}, ""):
            out[k] = readable_value(v)
    return out


def require_swanboard() -> None:
    """Refuse local mode when SwanLab's dashboard package is missing or not the version it needs."""
    import importlib.util
    from importlib.metadata import PackageNotFoundError, version

    if importlib.util.find_spec("swanboard") is None:
        raise UsageError(
            "--mode local writes SwanLab's local dashboard database, which needs the swanboard package "
            f"(exactly {SWANBOARD_VERSION}, the version swanlab 0.10 requires); it is not installed. Its pins "
            f"(rich<14) conflict with trackstore's, so install it without them: {SWANBOARD_INSTALL}. "
            "Or sync with --mode offline (SwanLab's run folders only, for `swanlab sync`)")
    try:
        have = version("swanboard")
    except PackageNotFoundError:
        have = "unknown"
    if have != SWANBOARD_VERSION:
        raise UsageError(
            f"--mode local needs swanboard {SWANBOARD_VERSION} (the version swanlab 0.10 requires), but "
            f"{have} is installed; SwanLab would write no dashboard database. Install it: {SWANBOARD_INSTALL}")


def project_logdir(logdir: Path, project: str, mode: str) -> Path:
    """Where SwanLab writes a project's runs: ``<logdir>/<project>`` in local mode (the dashboard
    database holds one project), ``<logdir>`` otherwise. trackstore project names are folder
    names already (validated when the run was created)."""
    return logdir / project if mode == "local" else logdir
