"""Injective key mapping per sync target: two different trackstore keys never become one remote key.

Each target has its own rules for metric (and param/tag) keys: MLflow accepts only
``[/ \\w . - : space]``, at most 250 characters, no path that normalises to another name;
SwanLab trims leading/trailing ``.``, ``/`` and white space and cuts at 512 characters; wandb
reserves ``_step``, ``_timestamp`` and ``_runtime`` and hides every key starting with ``_``. A naive rewrite merges keys (``a#b`` and
``a_b`` both ``a_b`` for MLflow), and the merged points overwrite each other at the target.

Per key (:func:`mlflow_key`, :func:`swanlab_key`, :func:`wandb_key`; what SwanLab and wandb
metrics, and MLflow params, tags and file names use):

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

Per run, for MLflow metrics (:func:`mlflow_names`), so that common keys stay readable (verl's
``val/acc/mean@1`` becomes ``val/acc/mean_at_1``, not ``val/acc/mean_at_1__3f2a…``):

* The names already given (the cursor's ``key_map``) are kept: a key synced under one name
  keeps it on every later sync.
* Of the new keys, one MLflow accepts as it is keeps its name, and one it does not becomes its
  readable form *plainly* (``@`` as ``_at_``, other characters as ``_``), when that name is
  free: not already given, not an accepted key of the run, wanted by no other new key, and
  neither the folder of another name nor inside one (MLflow's file store keeps each metric as a
  file named by its key). Keys
  that meet on one name all get the hashed form of :func:`mlflow_key` (a key that *is* the name
  keeps it), as does a readable form that had to be cut to 250 characters.
* The result depends on the set of keys only (sorted, never their batch order), so a lost
  cursor recomputes the same names from the same run.

:func:`renamed` lists the renamings of a set of keys, for the sync summary and ``--dry-run``.

Config -> MLflow params (:func:`mlflow_params`), as verl's own MLflow logger names them
(``verl/utils/tracking.py``, ``_compute_mlflow_params_from_objects``): nested keys joined with
``/`` (``actor_rollout_ref/actor/optim/lr``), a list as ``<key>/list_len`` and ``<key>/<i>``,
every value as MLflow's ``log_params`` writes it (``str(value)``: ``True``, ``None``, ``1e-06``),
so a synced run and a natively logged one share param columns. An empty dict, which verl drops,
is kept as ``{}``. The names go through :func:`mlflow_names` (a name MLflow rejects is renamed;
two config paths that join to one name, ``{"a/b": 1}`` and ``{"a": {"b": 2}}``, each get a hashed
name). :func:`mlflow_dot_params` is the naming runs synced before used (``.``, values as JSON).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from typing import Any, Callable, Iterable, Iterator

from trackstore.read.overview import flatten  # the '.' flattening runs synced before used

__all__ = ["mlflow_key", "mlflow_names", "mlflow_params", "mlflow_dot_params", "mlflow_run_names", "swanlab_key", "wandb_key", "remote_names", "renamed", "rename_reason",
           "MLFLOW_MAX_KEY", "SWANLAB_MAX_KEY"]

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


def _mlflow_plain(key: str) -> str | None:
    """The readable form of ``key`` without a hash, or None when it is not one MLflow accepts
    or had to be cut (a cut name would pass a prefix off as the key)."""
    readable = _mlflow_readable(key)
    return readable if _mlflow_accepts(readable) else None


def mlflow_names(keys: Iterable[str], known: dict[str, str] | None = None) -> dict[str, str]:
    """``{key: MLflow key}`` for every key of ``known`` (kept as given) and of ``keys``.

    Injective over the result, whatever ``known`` holds, and a function of the *sets* only
    (see the module docstring).

    >>> mlflow_names(["val/acc/mean@1", "loss"])["val/acc/mean@1"]
    'val/acc/mean_at_1'
    >>> sorted(mlflow_names(["a@b", "a_at_b"]).values()) == sorted(["a_at_b", mlflow_key("a@b")])
    True
    """
    out = dict(known or {})
    taken = set(out.values())
    new = sorted({k for k in keys if k is not None} - out.keys())
    claims: dict[str | None, list[str]] = {}
    for k in new:
        claims.setdefault(k if _mlflow_accepts(k) else _mlflow_plain(k), []).append(k)
    # MLflow's file store keeps a metric as a file named by its key: a name that is the folder
    # of another (``a/_`` and ``a/_/b``) cannot be both. Keys the user chose are theirs; a plain
    # name of a renamed key that would sit in such a pair is not used.
    names = taken | {c for c in claims if c is not None}
    folders = {n[:i] for n in names for i, ch in enumerate(n) if ch == "/"}
    hashed: list[str] = []
    for name, ks in sorted(claims.items(), key=lambda c: c[0] or ""):
        nested = name is not None and name not in ks and (
            name in folders or any(name[:i] in names for i, ch in enumerate(name) if ch == "/"))
        if name is None or name in taken or nested:
            hashed += ks
        elif name in ks:  # the key that is the name keeps it
            out[name] = name
            hashed += [k for k in ks if k != name]
        elif len(ks) == 1:
            out[ks[0]] = name
        else:
            hashed += ks
    for k in out.values():
        taken.add(k)
    for k in sorted(hashed):
        name, salt = mlflow_key(k), 0
        if name == k:  # an accepted key that lost its name: its own hashed form
            name = _mapped(k, _mlflow_readable(k), MLFLOW_MAX_KEY)
        while name in taken:  # a hashed name another key already holds (a user key that looks hashed)
            salt += 1
            name = _mapped(f"{k}\0{salt}", _mlflow_readable(k), MLFLOW_MAX_KEY)
            if not _mlflow_accepts(name):
                name = _mapped(f"{k}\0{salt}", _mlflow_readable(k).replace(".", "_"), MLFLOW_MAX_KEY)
        out[k] = name
        taken.add(name)
    return out


def mlflow_run_names(keys: Iterable[str], known: dict[str, str] | None,
                     run_keys: Iterable[str] | None = None) -> dict[str, str]:
    """:func:`mlflow_names` over ``keys`` and every metric key of the run (``run_keys``, which
    the engine reads: :meth:`trackstore.sync.adapter.Adapter.prepare`), so the names do not
    depend on which keys a batch holds."""
    return mlflow_names(set(keys) | set(run_keys or ()), known)


def _leaves(value: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from _leaves(v, path + (str(k),))
    elif isinstance(value, list):
        yield path + ("list_len",), len(value)
        for i, v in enumerate(value):
            yield from _leaves(v, path + (str(i),))
    else:
        yield path, value


def mlflow_params(config: dict) -> dict[str, tuple[str, str]]:
    """``{MLflow param name: (config path, value)}`` of a config, verl's naming (see the module
    docstring); the path is the config's nesting joined with ``/``, as verl names it.

    >>> p = mlflow_params({"actor": {"lr": 1e-06, "fsdp": True}, "logger": ["console", "mlflow"]})
    >>> {name: value for name, (_, value) in p.items()}
    {'actor/lr': '1e-06', 'actor/fsdp': 'True', 'logger/list_len': '2', 'logger/0': 'console', 'logger/1': 'mlflow'}
    """
    joined: dict[str, list[tuple[tuple[str, ...], Any]]] = {}
    for path, value in _leaves(config, ()) if config else ():
        joined.setdefault("/".join(path), []).append((path, value))
    flat: dict[str, tuple[str, Any]] = {}
    for name, leaves in joined.items():
        if len(leaves) == 1:
            flat[name] = (name, leaves[0][1])
            continue
        for path, value in leaves:  # two paths, one name: each its own hashed name
            flat[_mapped(json.dumps(path), _mlflow_readable(name), MLFLOW_MAX_KEY)] = (name, value)
    names = mlflow_names(flat)
    return {names[k]: (path, _str_param(v)) for k, (path, v) in flat.items()}


def _str_param(value: Any) -> str:
    """A value as MLflow's ``log_params`` writes it (``str``), an empty dict as ``{}``."""
    return "{}" if value == {} else str(value)


def mlflow_dot_params(config: dict) -> dict[str, tuple[str, str]]:
    """The params of runs synced before :func:`mlflow_params`, in its shape: nested keys joined
    with ``.``, lists and other structures as JSON, each name through :func:`mlflow_key`."""
    out = {}
    for key, value in flatten(config or {}).items():
        out[mlflow_key(key)] = (key, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str))
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


def remote_names(target: str, keys: Iterable[str], known: dict[str, str] | None = None) -> dict[str, str]:
    """``{key: remote key}`` for every key of ``keys``: per run for MLflow (:func:`mlflow_names`,
    given the names already in use, ``known``), per key for the other targets."""
    keys = {k for k in keys if k is not None}
    if target == "mlflow":
        names = mlflow_names(keys, known)
        return {k: names[k] for k in keys}
    rule = _RULES[target]
    return {k: rule(k) for k in keys}


def renamed(target: str, keys: Iterable[str], known: dict[str, str] | None = None) -> dict[str, str]:
    """``{key: remote key}`` for the keys of ``keys`` that ``target`` receives under another name."""
    return {k: r for k, r in remote_names(target, keys, known).items() if r != k}


def rename_reason(target: str, key: str, remote: str) -> str:
    """The summary and ``--dry-run`` line of one renamed key. Adapters report it with a count of
    0 (the points are sent, under another name); one line per key, however many batches."""
    return f"key {key!r} sent as {remote!r} ({target}'s key rules; see docs/sync.md)"
