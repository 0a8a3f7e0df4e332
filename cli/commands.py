"""The table of ``trackstore`` commands: read by ``cli/main.py`` (``trackstore --help`` answers
from it alone) and ``cli/app.py`` (which builds the typer commands from it)."""

from __future__ import annotations

HELP = ("Local-first experiment tracking for LLM RL: log to Parquet, query with SQL, replay to wandb, MLflow or "
        "SwanLab when the network allows.")
# Every command: its module and function, and the one line `trackstore --help` shows. Each command
# module (and typer) is imported only when that command runs, so `trackstore --help` answers from
# this table alone and `trackstore runs` builds one command, not fourteen.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "runs": ("runs_cmd", "runs", "List runs with their status, filtered and sorted."),
    "show": ("show_cmd", "show", "Show one run: metadata, record counts, main metrics, what to read next."),
    "sql": ("sql_cmd", "sql", "Query every run with SQL (read-only)."),
    "samples": ("records_cmd", "samples", "Read a run's samples (validation generations)."),
    "trace": ("records_cmd", "trace", "Read a run's trajectories as conversation trees."),
    "artifacts": ("artifacts_cmd", "artifacts", "List a run's artifact versions (checkpoints) and their aliases."),
    "plot": ("plot_cmd", "plot", "Draw metric curves in the terminal or as a PNG."),
    "compare": ("compare_cmd", "compare", "Compare runs: config differences and metrics side by side."),
    "ui": ("ui_cmd", "ui", "Serve a local dashboard of the store in the browser (read-only, live)."),
    "demo": ("demo_cmd", "demo", "Log a simulated GRPO run into the store."),
    "sync": ("sync_cmd", "sync", "Replay runs to MLflow, wandb, SwanLab or a team store, exactly once."),
    "status": ("sync_cmd", "status", "Sync state per run and target: pending rows, last error."),
    "run": ("run_cmd", "run", "Run a script whose `import wandb` logs to the store."),
    "compact": ("compact_cmd", "compact", "Merge small part files of runs."),
    "gc": ("gc_cmd", "gc", "Delete old runs that are safely synced."),
    "export": ("bundle_cmd", "export", "Write runs (or a receipt) to a bundle for an air gap."),
    "import": ("bundle_cmd", "import_", "Verify a bundle, then add its runs or merge its receipt."),
    "ingest": ("ingest_cmd", "ingest", "Bring runs in from wandb, SwanLab, MLflow or TensorBoard files."),
    "doctor": ("doctor_cmd", "doctor", "Find damage in the store; --fix repairs or quarantines."),
}
EXTRA = {"run": {"context_settings": {"allow_extra_args": True, "ignore_unknown_options": True}}}
