"""``trackstore ui``: serve a local, read-only dashboard over the store (see trackstore.ui.server).

Starlette and uvicorn (the ``trackstore[ui]`` extra) are imported only when the command runs,
so ``trackstore --help`` and ``trackstore ui --help`` stay fast.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .common import REPLICA_URI, ReaderRootOpt, console


def ui(
    ctx: typer.Context,
    root: ReaderRootOpt = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on. Anything but loopback requires the token printed at start.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on (0: any free port).")] = 8760,
    open_browser: Annotated[bool, typer.Option("--open", help="Open the dashboard in a web browser.")] = False,
    token: Annotated[Optional[str], typer.Option("--token", envvar="TRACKSTORE_UI_TOKEN", help="Require this token (also on loopback). Default: a random one when --host is not loopback, none otherwise.")] = None,
    refresh: Annotated[float, typer.Option("--refresh", min=0, metavar="SECONDS", help="With --root s3://...: bring the local copy of the team store in step this often, so newly replicated runs and points appear (0: only at start).")] = 30.0,
) -> None:
    """Serve a dashboard of the store in the browser: runs, curves, run pages, compare, samples,
    trajectories and histograms, updating live while runs are written.

    Read-only (it writes only its cache, _catalog/, as `runs` does); nothing is
    fetched from the internet (the page and its chart library ship with trackstore). It
    listens on 127.0.0.1; from a laptop, tunnel to it:
    `ssh -L 8760:127.0.0.1:8760 cluster-login` then open http://127.0.0.1:8760/. With --host
    0.0.0.0 (or any other address) it prints a URL with a token, required on every request.
    Over a team store (--root s3://BUCKET/PREFIX) it serves a local copy, brought in step
    every --refresh seconds: the runs table from the run.json files, a run's records fetched
    when a page first shows it. Stop with Ctrl-C. Exit 2 when the port is taken or the extra is
    missing (pip install 'trackstore[ui]').
    """
    from trackstore.errors import UsageError

    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise UsageError("the dashboard needs its extra: pip install 'trackstore[ui]'") from None
    from trackstore.store.layout import resolve_root
    from trackstore.ui.server import serve

    root_path = resolve_root(root, must_exist=True)
    out = console()

    def announce(line: str) -> None:
        out.print(line, markup=False, highlight=False, soft_wrap=True)

    replica = ctx.meta.get(REPLICA_URI)
    detail = bring = None
    if replica is not None:
        from trackstore.read.replica_copy import OnDemand, follow

        # the copy holds the run.json files; a run's parts come in when a page first reads it
        demand = OnDemand(replica)
        bring = demand.bring
        detail = f"a local copy, {f'in step every {refresh:g} s' if refresh else 'as it was at start'}"
        if refresh:
            follow(replica, refresh, runs=demand.runs, report=lambda line: console(stderr=True).print(
                f"trackstore ui: {line}", markup=False, highlight=False, soft_wrap=True))
    serve(root_path, host=host, port=port, token=token, open_browser=open_browser, announce=announce,
          label=replica, detail=detail, bring=bring)
