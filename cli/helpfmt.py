"""How ``--help`` reads: plain text (no rich: it answers in a fraction of the time), short
metavars, and options grouped by what they are for.

Every command is built with :class:`Command` (``cls=`` in ``cli/main.py``). It gives each
option a metavar a person reads at a glance (``N``, ``SECONDS``, ``PATH``, ``PROJECT``;
nothing after a flag; a choice's values are listed once, in the help text, instead of taking
the width of the column) and prints the options in groups: the command's own first, then which
runs (Selection), where to (Target), how it prints (Output), and the store root (Store). An
option may name its group itself with ``rich_help_panel``.
"""

from __future__ import annotations

from typing import Any

import typer.core

PANELS = {
    "Selection": ("project", "status", "tag", "since", "where", "params", "sort", "all_runs", "finished_only",
                  "older_than", "max_size", "keep_last", "require_synced_to", "include_unsynced", "keys", "run_refs"),
    "Target": ("to", "uri", "entity", "remote_project", "host", "mode", "logdir", "proxy"),
    "Output": ("fmt", "output", "wide", "limit"),
    "Store": ("root",),
}
ORDER = ("Options", "Selection", "Target", "Output", "Store")
NAMED = {"seconds": "SECONDS", "timeout": "SECONDS", "watch": "SECONDS", "fmt": "FORMAT", "params": "NAME=VALUE",
         "root": "DIR", "output": "FILE", "png": "FILE", "older_than": "AGE", "since": "AGE|DATE",
         "max_size": "SIZE", "split": "SIZE", "uri": "URI", "proxy": "URL", "host": "URL", "logdir": "DIR",
         "where": "SQL", "sort": "COLUMN", "key": "KEY", "keys": "KEY", "to": "TARGET",
         "require_synced_to": "TARGETS", "target_mb": "MB", "run_refs": "RUN"}


def metavar(param: Any) -> str | None:
    """The metavar ``param`` shows in ``--help`` (None: none, as for a flag)."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return None
    if param.metavar:
        return param.metavar
    name = param.name or ""
    if name in NAMED:
        return NAMED[name]
    kind = _kind(param)
    if kind is int:
        return "N"
    if kind is float:
        return "X"
    if kind == "path":
        return "PATH"
    return name.upper().replace("_", "-")


def _kind(param: Any) -> Any:
    """int, float, "path" or None, from typer's type descriptor (typer >= 0.20) or click's type."""
    desc = getattr(param, "type_descriptor", None)
    if desc is not None:
        if getattr(desc, "is_path", False):
            return "path"
        annotation = getattr(desc, "annotation", None)
        for t in (int, float):
            if annotation is t or (getattr(desc, "is_ranged", False) and getattr(desc, "ranged_type_name", "") == t.__name__):
                return t
        return None
    name = getattr(getattr(param, "type", None), "name", "")
    return {"integer": int, "integer range": int, "float": float, "float range": float, "path": "path"}.get(name)


def _choices(param: Any) -> list[str] | None:
    desc = getattr(param, "type_descriptor", None)
    choices = getattr(desc, "choices", None) if desc is not None and getattr(desc, "is_choice", False) else None
    if choices is None:
        choices = getattr(getattr(param, "type", None), "choices", None)
    return [getattr(c, "value", c) for c in choices] if choices else None


class Command(typer.core.TyperCommand):
    """A command whose ``--help`` is plain, short and grouped (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.param_type_name == "argument":
                param.metavar = param.metavar or (param.name or "").upper()
                continue
            param.show_envvar = False  # the help text says where the default comes from
            choices = _choices(param)
            if choices and param.help and not all(c in param.help for c in choices):
                param.help = param.help.rstrip(".") + ": " + ", ".join(choices) + "."
            param.metavar = metavar(param)

    def format_options(self, ctx: Any, formatter: Any) -> None:
        args, groups = [], {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":  # its name and help, not its Python type
                args.append((param.metavar + ("..." if param.nargs != 1 else ""), param.help or ""))
                continue
            panel = getattr(param, "rich_help_panel", None)
            if panel is None:
                panel = next((p for p, names in PANELS.items() if param.name in names), "Options")
            groups.setdefault(panel, []).append(record)
        if args:
            with formatter.section("Arguments"):
                formatter.write_dl(args)
        for panel in sorted(groups, key=lambda p: ORDER.index(p) if p in ORDER else 1):
            with formatter.section(panel):
                formatter.write_dl(groups[panel])
