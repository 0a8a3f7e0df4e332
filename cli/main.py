"""Entry point of the ``trackstore`` command. Each command lives in its own module.

Errors that users can cause are :class:`trackstore.TrackstoreError` subclasses; they are
printed as one clear message (no traceback) and mapped to the documented exit codes
(docs/cli.md). Heavy imports (duckdb, rich tables, target SDKs) happen inside commands only,
so ``trackstore --help`` answers fast.
"""

from __future__ import annotations

import sys
from typing import Any

from .commands import COMMANDS, HELP


def overview() -> str:
    """``trackstore --help``, without importing typer or any command."""
    import os
    import textwrap

    width = min(int(os.environ.get("COLUMNS", "0") or 0) or 80, 100)
    names = max(len(n) for n in COMMANDS)
    lines = ["Usage: trackstore [OPTIONS] COMMAND [ARGS]...", ""]
    lines += textwrap.wrap(HELP, width - 2, initial_indent="  ", subsequent_indent="  ")
    lines += ["", "Options:", "  --version   Print the version and exit.", "  -h, --help  Show this message and exit.",
              "", "Commands:"]
    for name, (_module, _func, short) in COMMANDS.items():
        lines += textwrap.wrap(short, width - 2, initial_indent=f"  {name:<{names}}  ",
                               subsequent_indent=" " * (names + 4))
    lines += ["", "`trackstore COMMAND --help` describes a command; docs/cli.md all of them."]
    return "\n".join(lines) + "\n"


def __getattr__(name: str) -> Any:
    if name == "app":  # the whole app, built on first use (docgen, tests)
        from .app import build_app

        return build_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (also used by tests)."""
    code = _run(sys.argv[1:] if argv is None else list(argv))
    if code == 130:
        forget_handled_interrupt()
    return code


def forget_handled_interrupt() -> None:
    """Let a Ctrl-C that a command handled end the process with the exit code it chose (130).

    When a KeyboardInterrupt passes through code run by ``eval``/``exec`` of a string (the
    standard library does this in ``collections.namedtuple`` and ``dataclasses``, so in almost
    every import), CPython marks it "unhandled"; under ``python -m trackstore...`` it then kills
    its own process with SIGINT at exit even though the command caught the interrupt, and the
    caller sees -2, not 130, after a message saying how to resume. Running any code through the
    same entry point clears the mark (CPython's ``run_eval_code_obj`` resets it first thing).
    """
    import ctypes

    try:
        ctypes.pythonapi.PyRun_SimpleString(b"pass")
    except (AttributeError, OSError):  # not CPython: no such mark
        pass


def _run(args: list[str]) -> int:
    if args in ([], ["--help"], ["-h"]):
        sys.stdout.write(overview())
        return 0
    if args == ["--version"]:
        from trackstore._version import __version__

        sys.stdout.write(f"trackstore {__version__}\n")
        return 0
    try:
        import typer

        from trackstore.errors import TrackstoreError

        from .app import build_app
    except KeyboardInterrupt:  # Ctrl-C while the command line loads: as one a moment later
        sys.stderr.write("interrupted\n")
        return 130
    try:
        # with standalone_mode=False, click returns the code of a typer.Exit instead of raising
        only = args[0] if args[0] in COMMANDS else None  # else: an option, or a mistyped command
        code = build_app(only)(args=args, standalone_mode=False, prog_name="trackstore")
    except TrackstoreError as exc:
        from .common import visible_lines

        sys.stderr.write(f"error: {visible_lines(str(exc))}\n")  # names and SQL in it are the user's
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        sys.stderr.write("aborted\n")
        return 130
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except Exception as exc:
        if isinstance(exc, _click_errors()):
            exc.show()
            return 2
        raise
    return code if isinstance(code, int) else 0


def _click_errors() -> tuple[type[BaseException], ...]:
    """Click's usage-error class: newer typer ships its own copy of click, older typer uses click itself."""
    import importlib

    found = []
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            found.append(importlib.import_module(name).ClickException)
        except ImportError:
            pass
    return tuple(found)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
