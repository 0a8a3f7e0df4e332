"""Which store this is: a random id kept in ``<root>/_store.json``, made on first use.

The team store (a replica, docs/team-store.md) records in each run the store it was replicated
from, so two stores that hold the same run id (a copied store, or a run carried by a bundle into
a second store that replicates too) are told apart instead of merged silently. What it promises:

* :func:`store_identity` returns ``{"store_id", "created_at", "host", "root"}``: ``store_id``
  is 32 random hex digits, the same for the life of the store; the file is created once,
  create-only (two processes creating it at once agree on the first one written), atomically
  (a reader never sees half of it).
* A store copied with its files (``cp -r``) keeps the id: the copy is the same store to a
  replica. A bundle does not carry it (an imported run belongs to the importing store).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path

from .atomic import fsync_dir, temp_path_for
from .clock import iso
from .host import hostname

IDENTITY_FILE = "_store.json"


def store_identity(root: str | os.PathLike) -> dict:
    """This store's identity (see the module docstring), made on first use."""
    path = Path(root) / IDENTITY_FILE
    found = _read(path)
    if found is not None:
        return found
    made = {"store_id": secrets.token_hex(16), "created_at": iso(time.time()), "host": hostname(),
            "root": str(Path(root).absolute())}
    tmp = temp_path_for(path)
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(made, f)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)  # create-only: another process may have made it a moment ago
        fsync_dir(path.parent)
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    found = _read(path)
    if found is None:
        raise OSError(f"{path}: not a store identity file (move it aside and run again)")
    return found


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and isinstance(data.get("store_id"), str) and data["store_id"]:
        return data
    return None
