"""The dashboard's HTTP server: a Starlette app over :class:`trackstore.ui.data.Store`, served by uvicorn.

Routes (all ``GET``; the API answers JSON, errors as ``{"error": ...}`` with 400 or 404):

    /                       the page (static/index.html); the rest of the page under /static/
    /api/health             {"ok": true, "root": ...}
    /api/runs               every run: project, id, name, status, tags, times, last step, summary, config
    /api/run?run=P/ID       one run's page: metadata, attempts, writers, counts, artifacts, sync state, keys
    /api/keys?run=..        metric keys of the runs (run= repeated)
    /api/series?run=..&key=K[&x=step|time][&width=N][&lo=..&hi=..]   M4-downsampled curves of one key
    /api/bands?run=..&group=..&key=K[&x=step|time|relative][&width=N][&lo=..&hi=..][&band=minmax|std]
                            each group's mean and band over its runs (group= labels run= one to one)
    /api/csv?run=..&key=K[&x=step|time][&lo=..&hi=..]   every stored point in the range, as CSV
    /api/compare?run=..     config differences and summaries
    /api/samples?run=P/ID[&step=][&split=][&q=][&min=][&max=][&index=][&limit=]
    /api/generations?run=..[&prompt=MD5|&index=N][&split=][&step=][&q=][&limit=]   one prompt's outputs by step
                            and run, aligned; without prompt= or index=, the prompts the runs hold (q= searches)
    /api/trajectories?run=P/ID[&step=][&index=][&limit=]
    /api/histograms?run=P/ID&key=K
    /api/artifact?run=P/ID&name=N&version=V&path=LOGICAL_PATH   a file the run's manifest lists
    /api/images?run=P/ID&key=K            one image key's images per step (for the slider)
    /api/image?run=P/ID&sha256=HEX        an image file of the run, found by its digest alone

The security model (docs/ui.md):

* Read-only: nothing here writes the store's data; the one file written is the catalog cache
  (``_catalog/catalog.sqlite``, docs/format.md section 11), as by every command that lists runs.
  DuckDB may read only files under the root.
* Bound to 127.0.0.1 by default. On any other address a token is required (printed at start,
  given once as ``?token=``, then kept in an HttpOnly, SameSite=Strict cookie, or sent as
  ``Authorization: Bearer``). On loopback, requests must name a loopback ``Host`` (no DNS
  rebinding from a web page).
* A request path holding a ``..`` segment is refused (400) before routing; runs are found among
  the store's runs by id, never opened by a path from the request; artifact files only when the
  manifest lists them and they resolve inside their run folder; image files only by a sha256
  (64 hex digits) from which the server makes the path, inside the run folder, served as
  ``image/png`` or ``image/jpeg`` with ``nosniff``.
* Everything a model or a user wrote travels as JSON and the page puts it in the document as
  text (``textContent``), never as HTML; a Content-Security-Policy allows only the page's own
  scripts, so even injected markup could not run one.
"""

from __future__ import annotations

import ipaddress
import secrets
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, unquote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from trackstore.errors import RunNotFoundError, TrackstoreError, UsageError

from .data import Store

STATIC = Path(__file__).resolve().parent / "static"
COOKIE = "trackstore_ui_token"
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                                 b"img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Guard:
    """ASGI middleware: refuses ``..`` paths, checks the token (or, on loopback, the Host header),
    and adds the security headers to every answer."""

    def __init__(self, app, token: str | None):
        self.app = app
        self.token = token

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        problem = self.refuse(scope)
        if problem is not None:
            return await self.with_headers(problem)(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        return await self.app(scope, receive, send_with_headers)

    @staticmethod
    def with_headers(response: Response) -> Response:
        for k, v in SECURITY_HEADERS:
            response.headers[k.decode()] = v.decode()
        return response

    def refuse(self, scope) -> Response | None:
        raw = scope.get("raw_path") or scope["path"].encode()
        for path in (scope["path"], unquote(raw.decode("latin-1")), unquote(unquote(raw.decode("latin-1")))):
            if any(seg == ".." for seg in path.replace("\\", "/").split("/")):
                return PlainTextResponse("refused: a path may not hold '..'", status_code=400)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.token is None:
            host = headers.get("host", "")
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if name not in LOOPBACK_NAMES:
                return PlainTextResponse("refused: this dashboard answers only to localhost / 127.0.0.1", status_code=403)
            return None
        given = None
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        if given is None and "cookie" in headers:
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(headers["cookie"])
            except Exception:  # noqa: BLE001 - a malformed cookie header is no token
                jar = SimpleCookie()
            if COOKIE in jar:
                given = jar[COOKIE].value
        from_query = False
        if given is None:
            q = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
            if q:
                given, from_query = q[0], True
        if given is None or not secrets.compare_digest(given.encode(), self.token.encode()):
            return PlainTextResponse("token required: open the URL `trackstore ui` printed (it ends in ?token=...)",
                                     status_code=401)
        if from_query and scope["path"] == "/":  # keep it in a cookie and take it out of the address bar
            r = RedirectResponse("/", status_code=303)
            r.set_cookie(COOKIE, self.token, httponly=True, samesite="strict", path="/")
            return r
        return None


class Params:
    """A request's parameters: its query string, or for a POST (a chart of a thousand runs would
    not fit in a URL) its JSON object body, whose lists stand for repeated parameters."""

    def __init__(self, query, body: dict | None = None):
        self.query, self.body = query, body or {}

    @classmethod
    async def of(cls, request: Request) -> Params:
        """A request's parameters; a POST's body must be a JSON object (else :class:`UsageError`)."""
        body = None
        if request.method == "POST":
            try:
                body = await request.json()
            except ValueError:
                raise UsageError("the body must be a JSON object") from None
            if not isinstance(body, dict):
                raise UsageError("the body must be a JSON object")
        return cls(request.query_params, body)

    def get(self, name: str, default: Any = None) -> Any:
        if name in self.body:
            v = self.body[name]
            return None if v is None else str(v)
        return self.query.get(name, default)

    def getlist(self, name: str) -> list[str]:
        if name in self.body:
            v = self.body[name]
            return [str(x) for x in v] if isinstance(v, list) else [str(v)]
        return self.query.getlist(name)


def _runs(store: Store, params: Params, *, one: bool = False) -> list:
    refs = params.getlist("run")
    if not refs:
        raise UsageError("give run=PROJECT/RUN_ID")
    if one and len(refs) != 1:
        raise UsageError("give exactly one run=")
    out = []
    for ref in refs:
        project, _, run_id = ref.rpartition("/")  # run ids hold no '/', projects none either
        out.append(store.run(run_id, project or None))
    store.bring(out)  # over a team store: their parts, fetched before the first read
    return out


def _int(params: Params, name: str, default: int | None = None) -> int | None:
    v = params.get(name)
    if v in (None, ""):
        return default
    try:
        return int(v)
    except ValueError:
        raise UsageError(f"{name} must be an integer") from None


def _float(params: Params, name: str) -> float | None:
    v = params.get(name)
    if v in (None, ""):
        return None
    try:
        return float(v)
    except ValueError:
        raise UsageError(f"{name} must be a number") from None


def create_app(root=None, *, token: str | None = None, label: str | None = None,
               bring: Callable[[list[tuple[str, str]]], None] | None = None) -> Starlette:
    """The dashboard app over the store at ``root``; ``token`` (when given) is required on every
    request; ``label`` is what the page names as served (a team store's ``s3://`` URI, whose
    local copy ``root`` is), else the root's path; ``bring`` fetches runs' parts into that copy
    before a page reads them (:class:`trackstore.read.replica_copy.OnDemand`)."""
    store = Store(root, bring=bring)

    def api(fn):
        async def endpoint(request: Request) -> Response:
            try:
                params = await Params.of(request)
                out = await run_in_threadpool(fn, params)
                if isinstance(out, bytes):  # JSON text made by the data layer
                    return Response(out, media_type="application/json")
                return JSONResponse(out)
            except RunNotFoundError as exc:
                return JSONResponse({"error": str(exc)}, status_code=404)
            except (UsageError, TrackstoreError) as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
        return endpoint

    def health(params: Params) -> dict[str, Any]:
        return {"ok": True, "root": label or str(store.root)}

    async def runs(request: Request) -> Response:
        """The runs table, with an ETag: a page polling an unchanged store gets 304 and no body."""
        try:
            etag, body = await run_in_threadpool(store.runs_payload)
        except TrackstoreError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        headers = {"ETag": etag}  # the page sends it back as If-None-Match (nothing is cached: no-store)
        if etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
            return Response(status_code=304, headers=headers)
        return Response(body, media_type="application/json", headers=headers)

    def run(params: Params) -> dict[str, Any]:
        info = _runs(store, params, one=True)[0]
        return store.run_detail(store.run(info.run_id, info.project, fresh=True))

    def keys(params: Params) -> dict[str, Any]:
        return {"keys": store.keys(_runs(store, params))}

    def series(params: Params) -> bytes:
        key = params.get("key")
        if not key:
            raise UsageError("give key=")
        return store.series_json(_runs(store, params), key, width=_int(params, "width", 1000) or 1000,
                            x=params.get("x", "step"), lo=_float(params, "lo"), hi=_float(params, "hi"))

    def bands(params: Params) -> dict[str, Any]:
        key = params.get("key")
        if not key:
            raise UsageError("give key=")
        labels = params.getlist("group")
        found = _runs(store, params)
        if len(labels) != len(found):
            raise UsageError("give one group= per run= (the run's group label)")
        return store.bands(list(zip(labels, found)), key, width=_int(params, "width", 300) or 300,
                           x=params.get("x", "step"), lo=_float(params, "lo"), hi=_float(params, "hi"),
                           band=params.get("band", "minmax"))

    async def csv(request: Request) -> Response:
        """Every stored point of one key of the runs in a range, as a CSV download."""
        try:
            params = await Params.of(request)
            key = params.get("key")
            if not key:
                raise UsageError("give key=")
            found = await run_in_threadpool(_runs, store, params)
            chunks = store.csv_chunks(found, key, x=params.get("x", "step"), lo=_float(params, "lo"), hi=_float(params, "hi"))
            first = await run_in_threadpool(next, chunks)  # errors in the query answer 400, not a cut download
        except RunNotFoundError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)
        except (UsageError, TrackstoreError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)

        def rest():
            yield first
            yield from chunks
        name = "".join(c if c.isalnum() or c in "._-" else "_" for c in key) or "metric"
        return StreamingResponse(rest(), media_type="text/csv; charset=utf-8",
                                 headers={"Content-Disposition": f'attachment; filename="{name}.csv"'})

    def compare(params: Params) -> dict[str, Any]:
        return store.compare([store.run(r.run_id, r.project, fresh=True) for r in _runs(store, params)])

    def samples(params: Params) -> dict[str, Any]:
        q = params
        return store.samples(_runs(store, params, one=True)[0], step=_int(params, "step"), split=q.get("split") or None,
                             grep=q.get("q") or None, min_score=_float(params, "min"), max_score=_float(params, "max"),
                             sample_index=_int(params, "index"), limit=min(_int(params, "limit", 200) or 200, 2000))

    def generations(params: Params) -> dict[str, Any]:
        return store.generations(_runs(store, params), prompt=params.get("prompt") or None,
                                 sample_index=_int(params, "index"), split=params.get("split") or None,
                                 step=_int(params, "step"), grep=params.get("q") or None, limit=_int(params, "limit"))

    def trajectories(params: Params) -> dict[str, Any]:
        return store.trajectories(_runs(store, params, one=True)[0], step=_int(params, "step"),
                                  sample_index=_int(params, "index"), limit=min(_int(params, "limit", 50) or 50, 500))

    def histograms(params: Params) -> dict[str, Any]:
        key = params.get("key")
        if not key:
            raise UsageError("give key=")
        return store.histograms(_runs(store, params, one=True)[0], key)

    def images(params: Params) -> dict[str, Any]:
        key = params.get("key")
        if not key:
            raise UsageError("give key=")
        return store.images(_runs(store, params, one=True)[0], key)

    def image(request: Request) -> Response:
        try:
            params = Params(request.query_params)
            info = _runs(store, params, one=True)[0]
            path, content_type = store.media_file(info, params.get("sha256", ""))
        except RunNotFoundError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)
        except TrackstoreError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return FileResponse(path, media_type=content_type, content_disposition_type="inline")

    def artifact(request: Request) -> Response:
        try:
            params = Params(request.query_params)
            info = _runs(store, params, one=True)[0]
            q = params
            path = store.artifact_file(info, q.get("name", ""), _int(params, "version", 0) or 0, q.get("path", ""))
        except RunNotFoundError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)
        except TrackstoreError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        # always a download, never rendered by the browser (an .html artifact stays inert)
        return FileResponse(path, media_type="application/octet-stream", filename=path.name,
                            content_disposition_type="attachment")

    def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")

    routes = [
        Route("/", index),
        Route("/api/health", api(health)),
        Route("/api/runs", runs),
        Route("/api/run", api(run)),
        Route("/api/keys", api(keys), methods=["GET", "POST"]),
        Route("/api/series", api(series), methods=["GET", "POST"]),
        Route("/api/bands", api(bands), methods=["GET", "POST"]),
        Route("/api/csv", csv, methods=["GET", "POST"]),
        Route("/api/compare", api(compare)),
        Route("/api/samples", api(samples)),
        Route("/api/generations", api(generations)),
        Route("/api/trajectories", api(trajectories)),
        Route("/api/histograms", api(histograms)),
        Route("/api/artifact", artifact),
        Route("/api/images", api(images)),
        Route("/api/image", image),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes)
    app.state.store = store
    return Guard(app, token)  # type: ignore[return-value]


def serve(root=None, *, host: str = "127.0.0.1", port: int = 8760, token: str | None = None, open_browser: bool = False,
          announce=print, label: str | None = None, detail: str | None = None,
          bring: Callable[[list[tuple[str, str]]], None] | None = None) -> None:
    """Serve the dashboard until interrupted. A non-loopback ``host`` gets a token (a new random
    one unless given); the URL to open is announced first, with what is served (``label``, else
    the root's path; the page names it too) and ``detail`` about it."""
    import socket

    import uvicorn

    if token is None and not is_loopback(host):
        token = secrets.token_urlsafe(24)
    app = create_app(root, token=token, label=label, bring=bring)
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (try another --port)") from None
    sock.listen(128)
    bound = sock.getsockname()[1]
    query = f"?token={token}" if token else ""
    wildcard = host.strip("[]") in ("0.0.0.0", "::")
    # a wildcard address is where the server listens, not where a browser can reach it: name
    # the machine for other machines, and loopback for this one
    shown = socket.gethostname() if wildcard else f"[{host.strip('[]')}]" if family == socket.AF_INET6 else host
    url = f"http://{shown}:{bound}/{query}"
    local = f"http://{'[::1]' if family == socket.AF_INET6 else '127.0.0.1'}:{bound}/{query}"
    what = label or app.app.state.store.root  # type: ignore[attr-defined]
    announce(f"trackstore ui: serving {what} ({'; '.join(filter(None, ['read-only', detail]))}) at {url}")
    if wildcard:
        announce(f"listening on every interface; on this machine: {local}")
        url = local  # what --open opens
    if token:
        announce("a token is required: share this URL only with people who may read every run of the store")
    announce("press Ctrl-C to stop")
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=2)
    uvicorn.Server(config).run(sockets=[sock])
