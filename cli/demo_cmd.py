"""``trackstore demo``: write a realistic simulated GRPO run and show what to do next."""

from __future__ import annotations

from typing import Annotated

import typer

from .common import NewRootOpt, console, literal, plural, visible


def demo(
    root: NewRootOpt = None,
    steps: Annotated[int, typer.Option("--steps", min=1, help="Training steps to simulate.")] = 200,
    project: Annotated[str, typer.Option("--project", help="Project name of the demo run.")] = "demo-grpo",
    seed: Annotated[int, typer.Option("--seed", help="Random seed (same seed, same values).")] = 0,
) -> None:
    """Log a simulated GRPO run (~100 verl-style metric keys per step) into the store."""
    from rich.text import Text

    from trackstore.cli.demo import simulate_grpo
    from trackstore.store.meta import load_run_json

    run = simulate_grpo(project=project, name=_free_name(root, project, "qwen2.5-0.5b-grpo-gsm8k"), steps=steps,
                        root=root, seed=seed)
    con = console()
    written = load_run_json(run.paths)
    n_keys = len(written.meta.get("summary_auto") or {}) if written else 0
    con.print(Text.assemble(("wrote", "green"), " run ", (visible(f"{run.project}/{run.id}"), "bold"),
                            f" ({plural(steps, 'step')}, {plural(n_keys, 'metric key')})"))
    con.print(literal(f"  folder: {run.dir}"))
    con.print("next:")
    root_flag = f" --root {root}" if root else ""
    ref = f"{run.project}/{run.name}"
    con.print(literal(f"  trackstore runs{root_flag}"))
    con.print(literal(f"  trackstore show {ref}{root_flag}"))
    con.print(literal(f"  trackstore samples {ref}{root_flag}"))
    con.print(literal(f"  trackstore trace {ref}{root_flag}"))
    con.print(literal(f"  trackstore sql \"SELECT key, max(value) FROM metrics WHERE key LIKE 'critic/score/%' GROUP BY key\"{root_flag}"))
    con.print(literal(f"  trackstore sync --to mlflow{root_flag}"))


def _free_name(root, project: str, base: str) -> str:
    """``base``, or ``base-2``, ``base-3``... when a run of ``project`` already has it: each demo run
    has a name of its own, so ``trackstore show demo-grpo/<name>`` names one run (docs/quickstart.md)."""
    from trackstore.read.listing import list_runs
    from trackstore.store.layout import resolve_root

    path = resolve_root(root)
    taken = {r.name for r in list_runs(path, project=project, unreadable=True)} if path.exists() else set()
    n, name = 1, base
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    return name
