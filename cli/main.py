"""Entry point of the ``trackstore`` command. Each command lives in its own module.

Errors that users can cause are :class:`trackstore.TrackstoreError` subclasses; they are
printed as one clear message (no traceback) and mapped to the documented exit codes
(docs/cli.md). Heavy imports (duckdb, rich tables, target SDKs) happen inside commands only,
so ``trackstore --help`` answers fast.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from . import (  # store upkeep (issue 7)  # SQL, curves, comparisons (issue 4)
    bundle_cmd,
    compact_cmd,
    compare_cmd,
    demo_cmd,
    doctor_cmd,
    gc_cmd,
    plot_cmd,
    records_cmd,
    run_cmd,  # wandb scripts under the drop-in (issue 8)
    runs_cmd,
    show_cmd,
    sql_cmd,
    sync_cmd,
)

app = typer.Typer(
    name="trackstore",
    help="Local-first experiment tracking for LLM RL: log to Parquet, query with SQL, "
    "replay to wandb, MLflow or SwanLab when the network allows.",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from trackstore._version import __version__

        typer.echo(f"trackstore {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Local-first experiment tracking for LLM RL."""


app.command("runs")(runs_cmd.runs)
app.command("show")(show_cmd.show)
app.command("sql")(sql_cmd.sql)
app.command("samples")(records_cmd.samples)
app.command("trace")(records_cmd.trace)
app.command("plot")(plot_cmd.plot)
app.command("compare")(compare_cmd.compare)
app.command("demo")(demo_cmd.demo)
app.command("sync")(sync_cmd.sync)
app.command("status")(sync_cmd.status)
app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(run_cmd.run)
app.command("compact")(compact_cmd.compact)
app.command("gc")(gc_cmd.gc)
app.command("export")(bundle_cmd.export)
app.command("import")(bundle_cmd.import_)
app.command("doctor")(doctor_cmd.doctor)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (also used by tests)."""
    from trackstore.errors import TrackstoreError

    from .common import visible_lines

    try:
        # with standalone_mode=False, click returns the code of a typer.Exit instead of raising
        code = app(args=argv, standalone_mode=False)
    except TrackstoreError as exc:
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
