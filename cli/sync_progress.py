"""What ``trackstore sync`` shows while it runs: the engine's progress events, rendered.

:class:`RichProgress` draws bars on a terminal (a bar per run, an overall bar for several);
:class:`CronProgress` writes plain lines for logs and cron mail. Both implement the events of
:class:`trackstore.sync.Progress` (plus the scheduler's ``begin``, ``run_advanced`` and
``run_held``), record each run they saw begin in ``started`` (what an interrupted sync names
as left pending), and never show a run stopped by Ctrl-C as done. rich is imported only when
a terminal display is made.
"""

from __future__ import annotations

import sys
import time

from .common import console, one_line, plural, visible


class CronProgress:
    """Plain lines for logs and cron mail (no TTY): one line when a run starts and one when it
    ends, retries as they happen. Several runs at once (``--jobs``): every line names its run,
    and the end lines count the runs done (``[3/64]``)."""

    def __init__(self, quiet: bool = False, opening: str | None = None, started: set | None = None):
        self.started = set() if started is None else started  # (project, run_id) of each run begun
        self.quiet = quiet  # machine-readable output on stdout: keep these lines on stderr
        self.out = sys.stderr if quiet else sys.stdout
        self.opening = opening  # "mlflow at URI": said once, before the first run opens it
        self.runs = 0  # selected runs (begin), 0 until known
        self.jobs = 1
        self.ended = 0

    def begin(self, runs, jobs):
        self.runs, self.jobs = runs, jobs

    def run_started(self, run, total):
        self.started.add((run.project, run.run_id))
        if not self.quiet:
            if self.opening:
                print(visible(f"sync: opening {self.opening}"), file=self.out, flush=True)
                self.opening = None
            print(visible(f"sync {run.project}/{run.run_id}: {plural(total, 'row')} pending"), file=self.out, flush=True)

    def advanced(self, n):
        pass

    def run_advanced(self, key, n):
        pass

    def run_held(self, run, holder, waiting):
        what = "waiting for it" if waiting else "trying it again after the others"
        print(visible(f"sync {run.project}/{run.run_id}: another sync holds this run ({one_line(holder)}); {what}"),
              file=sys.stderr if self.quiet else self.out, flush=True)

    def run_ended(self, result):
        self.ended += 1
        if interrupting():
            print(visible(f"sync {result.project}/{result.run_id}: interrupted"), file=self.out, flush=True)
            return
        if self.quiet and result.ok:
            return
        if result.up_to_date and result.ok:
            return
        count = f" [{self.ended}/{self.runs}]" if self.jobs > 1 and self.runs else ""
        if result.error_kind == "locked":
            print(visible(f"sync {result.project}/{result.run_id}: {one_line(result.error or '')}{count}"),
                  file=self.out, flush=True)
            return
        sent = ", ".join(f"{k} {v:,}" for k, v in result.sent.items() if v) or "nothing new"
        state = "ok" if result.ok else f"FAILED: {one_line(result.error or '')}"
        print(visible(f"sync {result.project}/{result.run_id}: {state} ({sent}; "
                      f"{plural(result.retries, 'retry', 'retries')}){count}"), file=self.out, flush=True)

    def message(self, text):
        print(visible(text), file=self.out, flush=True)


class RichProgress:
    """On a terminal: a bar per run being synced (rows sent, rate, ETA) and, when several runs
    are selected, an overall bar (runs done, rows sent, rate). With ``--jobs`` above 1 a run's
    bar goes when the run is done, so the display shows the active runs; one at a time, each
    run's bar stays, as a log of the pass. While a run's first request opens the target (a first
    MLflow sync creates its database, ~10 s), a line says so."""

    def __init__(self, opening: str | None = None, started: set | None = None):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(bar_width=20), MofNCompleteColumn(),
                            TaskProgressColumn(), TextColumn("{task.fields[rate]}"), TimeRemainingColumn(),
                            console=console(stderr=True), transient=False)
        self.tasks: dict = {}  # "project/run_id" -> (task id, started, rows done)
        self.started = set() if started is None else started  # (project, run_id) of each run begun
        self.last = ""  # the run started last (plain ``advanced`` events)
        self.jobs = 1
        self.overall = None
        self.began = 0.0
        self.rows = 0
        self.opening = opening
        self.opening_task = None  # a line of its own while the run's first request opens the target

    def __enter__(self):
        self.bar.start()
        return self

    def __exit__(self, *exc):
        self.bar.stop()

    def begin(self, runs, jobs):
        self.jobs, self.began = jobs, time.monotonic()
        if runs > 1:
            self.overall = self.bar.add_task(f"[bold]{plural(runs, 'run')}[/bold], {jobs} at a time"
                                             if jobs > 1 else f"[bold]{plural(runs, 'run')}[/bold]", total=runs, rate="")

    def run_started(self, run, total):
        key = f"{run.project}/{run.run_id}"
        self.started.add((run.project, run.run_id))
        task = self.bar.add_task(escape(visible(run.run_id)), total=max(total, 1), rate="")
        self.tasks[key] = (task, time.monotonic(), 0)
        self.last = key
        if self.opening and self.opening_task is None:
            self.opening_task = self.bar.add_task(f"[dim]opening {escape(visible(self.opening))}…[/dim]",
                                                  total=None, rate="")

    def _opened(self):
        if self.opening_task is not None:
            self.bar.remove_task(self.opening_task)
            self.opening_task, self.opening = None, None

    def advanced(self, n):
        self.run_advanced(self.last, n)

    def run_advanced(self, key, n):
        self._opened()
        if key not in self.tasks:
            return
        task, started, done = self.tasks[key]
        done += n
        self.tasks[key] = (task, started, done)
        rate = done / max(time.monotonic() - started, 1e-6)
        self.bar.update(task, advance=n, rate=f"{rate:,.0f} rows/s")
        if self.overall is not None:
            self.rows += n
            overall_rate = self.rows / max(time.monotonic() - self.began, 1e-6)
            self.bar.update(self.overall, rate=f"{self.rows:,} rows, {overall_rate:,.0f} rows/s")

    def run_held(self, run, holder, waiting):
        from rich.text import Text

        what = "waiting for it" if waiting else "trying it again after the others"
        self.bar.console.print(Text(f"{run.run_id}: another sync holds this run ({one_line(holder, 300)}); {what}",
                                    style="yellow"), no_wrap=True, overflow="ellipsis")

    def run_ended(self, result):
        self._opened()
        if self.overall is not None:
            self.bar.update(self.overall, advance=1)
        entry = self.tasks.pop(f"{result.project}/{result.run_id}", None)
        if entry is not None:
            task = entry[0]
            if self.jobs > 1:
                self.bar.remove_task(task)  # the display shows the runs in flight
            elif interrupting():  # Ctrl-C: the bar stays where the run stopped
                self.bar.update(task, rate="[yellow]interrupted[/yellow]")
                return
            elif result.ok:
                self.bar.update(task, completed=self.bar.tasks[self._index(task)].total)
            else:
                self.bar.update(task, rate="[red]FAILED[/red]")
        if not result.ok:
            from rich.text import Text

            style = "yellow" if result.error_kind == "locked" else "red"
            self.bar.console.print(Text(f"{result.run_id}: {one_line(result.error or '', 500)}", style=style),
                                   no_wrap=True, overflow="ellipsis")

    def _index(self, task):
        return next(i for i, t in enumerate(self.bar.tasks) if t.id == task)

    def message(self, text):
        from rich.text import Text

        self.bar.console.print(Text(one_line(text, 500), style="yellow"), no_wrap=True, overflow="ellipsis")


def interrupting() -> bool:
    """True while a Ctrl-C (KeyboardInterrupt) unwinds the sync: the engine still reports the run
    it stopped as ended, and it must not look done."""
    return isinstance(sys.exc_info()[1], KeyboardInterrupt)


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)
