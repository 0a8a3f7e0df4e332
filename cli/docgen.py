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

## The store root

The root is `--root DIR`, else `$TRACKSTORE_DIR`, else `./tsruns` in the current directory.
Every command but `demo`, `run`, `import` and `ingest` (which write runs, so they create a root that
does not exist, as `trackstore.init` does) needs a store there, and refuses with exit code 2,
naming the path and where it came from, when the path

- does not exist (a mistyped `--root` in a cron job fails every time instead of
  "succeeding" on an empty store); the message then names the stores nearby (folders of the
  working directory and of the path's parent holding a `project=*` folder or one of
  trackstore's own `_*` folders) and the `--root` or `export TRACKSTORE_DIR=...` that reads
  the first, e.g. `Stores nearby: demo-store; use --root demo-store or export
  TRACKSTORE_DIR=/home/me/trackstore/demo-store`,
- is not a folder, or
- is a folder holding other things only: a store is an empty folder (hidden entries aside)
  or one with a `project=*` folder or one of trackstore's own `_*` folders (`_sync`,
  `_locks`, ...). The writing commands refuse such a path too.

Commands that only read change nothing in the store but its catalog (`_catalog/`, a cache
of the run folders that they refresh: [format.md](format.md) section 11): `runs`, `show`, `sql`, `plot`,
`compare`, `status`, `doctor` (without `--fix`), `sync --dry-run`, `gc --dry-run`, `ui` and
`export` (which writes only its bundle). They also work on a read-only store (a snapshot, a
read-only mount): `export` holds gc, compaction and import off with a shared lock on the
root folder instead of a lock file. Commands that change the store (`gc`, `compact`, `sync`,
`import`, `doctor --fix`) cannot take their lock there and exit with code 4 and a one-line
message.

Options that take a fixed set of values (`--format`, `runs --status`, `plot --x`,
`sync --mode`, `sync --to`, `status --to`, `gc --status`, `gc --require-synced-to`) refuse
any other value with exit code 2, listing the valid ones.

`--format parquet` writes (to `-o FILE`, or to a standard output that is not a terminal) the
columns `--format json` has, typed: a column of objects (a run's `config`, `summary`,
`nonfinite_keys`) is JSON text, as the `runs` SQL view holds `config` and `summary`, whatever
shape each run's object has; `tags` is a list of strings.

## Exit codes

| code | meaning |
|---|---|
| 0 | success |
| 1 | unexpected error |
| 2 | usage error: bad option, bad name or value, a value outside an option's choices, a store root that does not exist or is not a store |
| 3 | run not found, or the reference is ambiguous (the message lists candidates) |
| 4 | the store is damaged or data could not be written (`trackstore doctor` helps), or a command that changes the store met a read-only one |
| 5 | the SQL query failed or was refused (read-only) |
| 6 | another process holds the lock (gc, compaction; sync: a run another sync is sending to the same destination was skipped) |
| 7 | the sync target is unreachable |
| 8 | partial failure: some runs failed, others succeeded |
| 9 | the bundle is invalid, tampered with or conflicts with the store |
| 10 | the sync destination refused for good: access denied, no such bucket, a read-only or full filesystem (`sync --to store`) |
| 130 | interrupted (Ctrl-C, SIGINT): `interrupted` on stderr, no traceback (but in the first few hundredths of a second, while Python starts and imports the package); nothing half-written is left (a sync's next run resumes) |

Individual commands may document further codes (gc, doctor) in their help.

A name that matches nothing is answered with the closest names there are: a run reference
(exit 3, "did you mean"), `plot -k` (the closest keys), `trace --sample-index` (the indices
that exist), `export --project` (exit 3, the projects, closest first). `runs`, `gc`, `compact`
and `sync` take `--project` as a filter: a project without runs is not an error there (a cron
line may name one whose first run has not started), but a `note:` on stderr names the projects
the store has, closest first, and the exit code is what it would be otherwise.
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
