"""Generate docs/cli.md from the commands' own help, so the reference cannot drift.

    python -m trackstore.cli.docgen > docs/cli.md

tests/test_cli_docs.py fails when docs/cli.md differs from this output, or when a command or
option has no help text.
"""

from __future__ import annotations

import inspect

HEADER = """# Command-line reference

Generated from `trackstore --help` by `python -m trackstore.cli.docgen > docs/cli.md`; do not
edit by hand. Every command accepts `--root DIR` (default `$TRACKSTORE_DIR`, else `./tsruns`).

## Exit codes

| code | meaning |
|---|---|
| 0 | success |
| 1 | unexpected error |
| 2 | usage error: bad option, bad name or value |
| 3 | run not found, or the reference is ambiguous (the message lists candidates) |
| 4 | the store is damaged or data could not be written (`trackstore doctor` helps) |
| 5 | the SQL query failed or was refused (read-only) |
| 6 | another process holds the lock (sync of the same target, gc, compaction) |
| 7 | the sync target is unreachable |
| 8 | partial failure: some runs failed, others succeeded |
| 9 | the bundle is invalid, tampered with or conflicts with the store |

Individual commands may document further codes (gc, doctor) in their help.
"""


def _commands():
    import typer

    from .main import app

    group = typer.main.get_command(app)
    for name in sorted(group.commands):
        yield name, group.commands[name]


def render() -> str:
    out = [HEADER]
    for name, cmd in _commands():
        out.append(f"## trackstore {name}\n")
        out.append(inspect.cleandoc(cmd.help or "") + "\n")
        args = [p for p in cmd.params if p.param_type_name == "argument"]
        if args:
            out.append("Arguments: " + ", ".join(f"`{p.name.upper()}`" for p in args) + "\n")
        opts = [p for p in cmd.params if p.param_type_name == "option" and p.name != "help"]
        if opts:
            out.append("| option | help |\n|---|---|")
            for p in opts:
                flags = ", ".join(f"`{o}`" for o in p.opts + p.secondary_opts)
                helptext = (p.help or "").replace("|", "\\|").replace("\n", " ")
                out.append(f"| {flags} | {helptext} |")
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def missing_help() -> list[str]:
    """Commands or options without help text (the docs test fails on any)."""
    problems = []
    for name, cmd in _commands():
        if not (cmd.help or "").strip():
            problems.append(f"command {name}")
        for p in cmd.params:
            if p.param_type_name == "option" and p.name != "help" and not (p.help or "").strip():
                problems.append(f"{name} {p.opts[0]}")
    return problems


if __name__ == "__main__":  # pragma: no cover
    print(render(), end="")
