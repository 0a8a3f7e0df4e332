"""The typer app behind ``trackstore``: every command of :data:`cli.main.COMMANDS`, or only the
one being run (``cli/main.py`` builds it; ``trackstore --help`` needs none of it)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from .commands import COMMANDS, EXTRA, HELP
from .helpfmt import Command


def _version(value: bool) -> None:
    if value:
        from trackstore._version import __version__

        typer.echo(f"trackstore {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Local-first experiment tracking for LLM RL."""


def build_app(only: str | None = None) -> Any:
    """The typer app with every command (docs, tests), or with command ``only`` (a run of it)."""
    import importlib

    app = typer.Typer(name="trackstore", help=HELP, no_args_is_help=True, add_completion=False,
                      context_settings={"help_option_names": ["-h", "--help"]}, pretty_exceptions_enable=False,
                      rich_markup_mode=None)

    app.callback()(_root)

    for name, (module, func, short) in COMMANDS.items():
        if only is None or name == only:
            function = getattr(importlib.import_module(f".{module}", __package__), func)
            app.command(name, cls=Command, short_help=short, **EXTRA.get(name, {}))(function)
    return app


