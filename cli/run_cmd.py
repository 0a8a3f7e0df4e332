"""``trackstore run -- python train.py ...``: run an unmodified wandb script against the local store.

The command runs as a child process whose ``import wandb`` resolves to
:mod:`trackstore.compat.wandb`: a temporary folder holding a one-line ``wandb.py`` that swaps
itself for the drop-in is put first on ``PYTHONPATH``, so the shim also reaches the processes
that command starts (``torchrun`` workers, dataloader workers). Nothing is installed or
changed outside that folder, which is removed when the command ends. The exit code is the
command's own; Ctrl-C and SIGTERM are passed on to it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from .common import NewRootOpt

SHIM = '''"""trackstore run: this process's `import wandb` is trackstore's local drop-in."""
import sys

import trackstore.compat.wandb as _dropin

sys.modules[__name__] = _dropin
'''


def shim_env(shim_dir: Path, base: dict, root: Optional[Path] = None, project: Optional[str] = None) -> dict:
    """The child's environment: the shim folder first on PYTHONPATH, the store root pinned."""
    env = dict(base)
    parts = [str(shim_dir)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    from trackstore.store.layout import resolve_root

    env["TRACKSTORE_DIR"] = str(resolve_root(root if root is not None else env.get("TRACKSTORE_DIR")))
    if project:
        env["TRACKSTORE_PROJECT"] = project
    return env


def run(
    command: Annotated[List[str], typer.Argument(help="The command to run, after `--` (e.g. -- python train.py --lr 1e-4).",
                                                 show_default=False)],
    root: NewRootOpt = None,
    project: Annotated[Optional[str], typer.Option("--project", "-p", help="Store every run of the command in this project, whatever wandb.init(project=...) says.")] = None,
) -> None:
    """Run COMMAND so that its `import wandb` logs to the local store instead of wandb's servers."""
    from trackstore.errors import UsageError

    if not command:
        raise UsageError("give the command to run after `--`, e.g. trackstore run -- python train.py")
    if shutil.which(command[0]) is None and not Path(command[0]).exists():
        raise UsageError(f"command not found: {command[0]}")
    shim_dir = Path(tempfile.mkdtemp(prefix="trackstore-wandb-shim-"))
    try:
        (shim_dir / "wandb.py").write_text(SHIM)
        env = shim_env(shim_dir, dict(os.environ), root, project)
        child = subprocess.Popen(command, env=env)
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signum))
        try:
            while True:
                try:
                    code = child.wait()
                    break
                except KeyboardInterrupt:  # the child got the same Ctrl-C from the terminal
                    continue
        finally:
            signal.signal(signal.SIGTERM, previous)
    finally:
        shutil.rmtree(shim_dir, ignore_errors=True)
    if code < 0:  # killed by a signal: exit as a shell would
        code = 128 - code
    raise typer.Exit(code)
