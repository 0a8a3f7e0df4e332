"""Injective key mapping per sync target: two different trackstore keys never become one remote key.

Each target has its own rules for metric (and param/tag) keys: MLflow accepts only
``[/ \\w . - : space]``, at most 250 characters, no path that normalises to another name;
SwanLab trims leading/trailing ``.``, ``/`` and white space and cuts at 512 characters; wandb
reserves ``_step``, ``_timestamp`` and ``_runtime`` and hides every key starting with ``_``. A naive rewrite merges keys (``a#b`` and
``a_b`` both ``a_b`` for MLflow), and the merged points overwrite each other at the target.

The promise of this module, for every target:

* A key the target accepts as it is stays as it is (``loss``, ``actor/pg_loss``, ``奖励``).
* Any other key becomes ``<readable part>__<h>``, where ``<readable part>`` is the key made
  acceptable (characters replaced, cut to fit) and ``<h>`` is the first 8 hex digits of the
  SHA-1 of the *original* key. The result is always accepted by the target (charset, length).
* A key the target would accept but that already *looks* renamed (ends in ``__`` and 8 hex
  digits, or, for wandb, is ``trackstore/_step``-like) is renamed too, with its own hash. So
  the image of an unchanged key is never the image of a renamed one, and two renamed keys meet
  only if the SHA-1 prefixes of two different keys with the same readable part meet.
* Deterministic: the same key maps to the same remote key on every machine and every sync, so
  no state is needed to find a key again.

:func:`renamed` lists the renamings of a set of keys, for the sync summary and ``--dry-run``.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from typing import Callable, Iterable

__all__ = ["mlflow_key", "swanlab_key", "wandb_key", "renamed", "rename_reason", "MLFLOW_MAX_KEY",
           "SWANLAB_MAX_KEY"]

MLFLOW_MAX_KEY = 250
SWANLAB_MAX_KEY = 512

_MARK = re.compile(r"__[0-9a-f]{8}\Z")
_MLFLOW_OK = re.compile(r"[/\w.\- :]*")
_MLFLOW_BAD = re.compile(r"[^/\w.\- :]")
_SWANLAB_EDGE = " \t\n\r./"


def _suffix(key: str) -> str:
    return "__" + hashlib.sha1(key.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def _mapped(key: str, readable: str, limit: int) -> str:
    suffix = _suffix(key)
    return readable[:limit - len(suffix)] + suffix


# ---------------------------------------------------------------------------------- MLflow
def _mlflow_accepts(key: str) -> bool:
    if not key or len(key) > MLFLOW_MAX_KEY or _MLFLOW_OK.fullmatch(key) is None:
        return False
    norm = posixpath.normpath(key)
    return not (norm != key or norm == "." or norm.startswith("..") or norm.startswith("/"))


def _mlflow_readable(key: str) -> str:
    k = _MLFLOW_BAD.sub("_", key.replace("@", "_at_"))
    k = re.sub(r"/+", "/", k).strip("/")
    return "/".join("_" if seg in (".", "..", "") else seg for seg in k.split("/")) or "_"


def mlflow_key(key: str) -> str:
    """The MLflow metric/param/tag key of ``key`` (see the module docstring).

    >>> mlflow_key("actor/pg_loss")
    'actor/pg_loss'
    >>> mlflow_key("a#b") != mlflow_key("a_b") == "a_b"
    True
    """
    if _mlflow_accepts(key) and not _MARK.search(key):
        return key
    readable = _mlflow_readable(key)
    out = _mapped(key, readable, MLFLOW_MAX_KEY)
    if not _mlflow_accepts(out):  # a cut that ends a segment in "." or leaves "x/.." behind
        out = _mapped(key, readable.replace(".", "_"), MLFLOW_MAX_KEY)
    return out


# ---------------------------------------------------------------------------------- SwanLab
def _swanlab_accepts(key: str) -> bool:
    return bool(key) and key == key.strip(_SWANLAB_EDGE) and len(key) <= SWANLAB_MAX_KEY


def swanlab_key(key: str) -> str:
    """The SwanLab key of ``key``: unchanged when SwanLab keeps it as it is, else renamed."""
    if _swanlab_accepts(key) and not _MARK.search(key):
        return key
    return _mapped(key, key.strip(_SWANLAB_EDGE) or "_", SWANLAB_MAX_KEY)


# ---------------------------------------------------------------------------------- wandb
def wandb_key(key: str) -> str:
    """The wandb history key of ``key``: a name starting with ``_`` (wandb's own ``_step``,
    ``_timestamp``, ``_runtime``, and hidden from its charts) moves under ``trackstore/``.

    A user key ``trackstore/_x`` (which would meet the moved ``_x``) and keys that look renamed
    get a hash suffix.
    """
    if not key or _MARK.search(key) or key.startswith("trackstore/_"):
        return _mapped(key, f"trackstore/{key}" if key.startswith("_") else key or "_", 10_000)
    if key.startswith("_"):
        return f"trackstore/{key}"
    return key


_RULES: dict[str, Callable[[str], str]] = {"mlflow": mlflow_key, "swanlab": swanlab_key, "wandb": wandb_key}


def renamed(target: str, keys: Iterable[str]) -> dict[str, str]:
    """``{key: remote key}`` for the keys of ``keys`` that ``target`` receives under another name."""
    rule = _RULES[target]
    out = {}
    for k in keys:
        if k is None:
            continue
        r = rule(k)
        if r != k:
            out[k] = r
    return out


def rename_reason(target: str, key: str, remote: str) -> str:
    """The summary and ``--dry-run`` line of one renamed key. Adapters report it with a count of
    0 (the points are sent, under another name); one line per key, however many batches."""
    return f"key {key!r} sent as {remote!r} ({target}'s key rules; see docs/sync.md)"
