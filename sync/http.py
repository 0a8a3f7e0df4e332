"""What every HTTP target needs, written once: destination identity, the reachability probe,
the one error policy (retryable or permanent) and proxies.

* :func:`destination_url` turns a URL into the identity of a destination: the same server
  spelled ``http://localhost:5000``, ``http://127.0.0.1:5000/`` or ``HTTP://bob:pw@127.0.0.1:5000``
  is one destination, so one cursor (cursors are kept per destination: three spellings used to
  be three cursors, and each replayed the whole run). Scheme and host are lower-cased, the
  loopback names (``localhost``, ``127.0.0.1``, ``::1``) become ``127.0.0.1``, a default port
  (80 for http, 443 for https) is dropped, trailing slashes go and credentials are stripped.
  A local URI (``sqlite:``, ``file:``, a plain path) keeps its text, minus trailing slashes.
* :func:`probe` asks ``url`` whether it answers, the way the target's client would reach it:
  credentials in the URL are sent as HTTP basic auth instead of being left in the host part
  (where ``urllib`` reads them as a port and fails), and a proxy is used per request, never by
  rewriting ``os.environ``. A proxy that does not answer is named in the error, with its
  credentials redacted, so "unreachable" says which hop is dead.
* :func:`classify` is the one retry policy: every adapter turns its client's exceptions into
  :class:`~trackstore.sync.adapter.RetryableError` or
  :class:`~trackstore.sync.adapter.PermanentError` through it, so a 503 or a reset connection
  is retried, and a 401 is not, whatever the target.
* Proxies: ``--proxy`` reaches each client explicitly where the client takes one (the probe;
  wandb's ``Settings(https_proxy=...)``). MLflow's and SwanLab's clients have no proxy
  parameter and read only the standard variables, so their adapters call
  :func:`proxy_environment` when they create their client: it sets ``HTTP(S)_PROXY`` for this
  sync process, and says so in the docstring of each adapter. Nothing else changes
  ``os.environ`` for a proxy (the CLI used to, for every target).
"""

from __future__ import annotations

import base64
import os
import re
import urllib.error
import urllib.request
from urllib.parse import urlsplit, urlunsplit

from trackstore.errors import TargetUnreachableError
from trackstore.store.redact import redact_text, redact_url

LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]", "ip6-localhost"}
DEFAULT_PORTS = {"http": 80, "https": 443}


def is_local_uri(uri: str) -> bool:
    """A store the client opens itself (``sqlite:``, ``file:``, a path), not a server."""
    return uri.startswith(("sqlite:", "file:")) or "://" not in uri


def destination_url(uri: str) -> str:
    """The normalised identity of ``uri`` (see the module docstring)."""
    if is_local_uri(uri):
        return uri.rstrip("/") or uri
    parts = urlsplit(uri.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if host in LOOPBACK:
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host if port is None or DEFAULT_PORTS.get(scheme) == port else f"{host}:{port}"
    path = parts.path.rstrip("/")
    return urlunsplit((scheme, netloc, path, parts.query, ""))


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``http://u:p@h/x`` -> (``http://h/x``, (u, p)); a URL without credentials is returned as is."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    from urllib.parse import unquote

    return (urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)),
            (unquote(parts.username or ""), unquote(parts.password or "")))


def probe(url: str, *, what: str, timeout: float, proxy: str | None = None) -> None:
    """Raise :class:`TargetUnreachableError` unless ``url`` answers below HTTP 500.

    ``what`` names the target in the message (``"MLflow at http://h:5000"``). ``proxy``
    (``--proxy``) overrides the standard proxy variables for this request only.
    """
    bare, creds = split_credentials(url)
    req = urllib.request.Request(bare)
    if creds is not None:
        token = base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    handlers = [urllib.request.ProxyHandler({"http": proxy, "https": proxy})] if proxy else []
    opener = urllib.request.build_opener(*handlers)
    via = proxy or _env_proxy(bare)
    try:
        with opener.open(req, timeout=min(timeout, 10)) as resp:
            status = resp.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (urllib.error.URLError, OSError) as exc:
        reason = redact_text(str(getattr(exc, "reason", exc)))
        hop = f" through the proxy {redact_url(via)} (is the proxy up?)" if via else ""
        raise TargetUnreachableError(f"{what} is unreachable{hop}: {reason}") from None
    if status >= 500:
        raise TargetUnreachableError(f"{what} answered HTTP {status}")


def _env_proxy(url: str) -> str | None:
    """The proxy the standard variables select for ``url`` (None when bypassed or unset)."""
    host = urlsplit(url).hostname or ""
    if urllib.request.proxy_bypass(host):
        return None
    return urllib.request.getproxies().get(urlsplit(url).scheme)


# ---------------------------------------------------------------------------- errors: one policy
#: HTTP statuses worth a retry: the request may succeed later (time-outs, rate limits, a server
#: that is restarting or overloaded, a gateway between)
RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
#: error codes some servers send instead of a status (MLflow's REST errors)
RETRYABLE_CODES = frozenset({"TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED", "RESOURCE_EXHAUSTED"})
#: words of a client's message that mean the connection, not the request, failed
TRANSIENT_WORDS = ("timed out", "timeout", "connection", "max retries exceeded", "remotedisconnected",
                   "badstatusline", "temporarily", "network is unreachable", "name resolution",
                   "database is locked", "failed with exception")
_STATUS_IN_TEXT = re.compile(r"(?:status(?: code)?|http|error code|response code)\D{0,12}?\b([45]\d\d)\b"
                             r"|\b([45]\d\d) (?:client |server )?error")
_AUTH_WORDS = ("api key", "api_key", "unauthorized", "unauthenticated", "forbidden", "permission denied",
               "not logged in", "invalid credentials")


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an SDK's exception carries, where it says: ``status_code``,
    ``response.status_code`` (requests, httpx) or ``get_http_status_code()`` (MLflow)."""
    for get in (lambda: exc.get_http_status_code(), lambda: exc.status_code,  # type: ignore[attr-defined]
                lambda: exc.response.status_code):  # type: ignore[attr-defined]
        try:
            value = get()
        except Exception:
            continue
        if isinstance(value, int) and 100 <= value <= 599:
            return value
    return None


def classify(exc: BaseException, message: str) -> Exception:
    """The one retry policy of every target: ``exc`` as :class:`RetryableError` (the engine
    retries with backoff, reconciling first) or :class:`PermanentError` (this run stops), with
    ``message`` (already free of secrets) as its text.

    Retryable: connection trouble and time-outs (``ConnectionError``, ``TimeoutError``, a socket
    ``OSError``), the statuses of :data:`RETRYABLE_STATUS` and codes of :data:`RETRYABLE_CODES`,
    and messages that say the connection failed (:data:`TRANSIENT_WORDS`). Permanent:
    authentication and permission (401, 403, or the words of a missing key), any other 4xx, and
    everything else: retrying what was refused cannot help, and an unknown error is not hidden
    behind retries. A status is read from the exception, else from its text only where the text
    says it is one (``status 503``, ``HTTP 429``, ``503 Server Error``): a port such as
    ``:54013`` or a step number is not a status.
    """
    from .adapter import PermanentError, RetryableError

    if isinstance(exc, (RetryableError, PermanentError)):
        return exc
    text = str(exc).lower()
    status = http_status(exc)
    if status is None:
        m = _STATUS_IN_TEXT.search(text)
        status = int(m.group(1) or m.group(2)) if m else None
    code = getattr(exc, "error_code", None)
    if status in (401, 403) or any(w in text for w in _AUTH_WORDS):
        return PermanentError(message)
    if status in RETRYABLE_STATUS or code in RETRYABLE_CODES:
        return RetryableError(message)
    if isinstance(exc, (ConnectionError, TimeoutError)) or (
            isinstance(exc, OSError) and not isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError,
                                                              NotADirectoryError))):
        return RetryableError(message)
    if status is not None and 400 <= status < 500:
        return PermanentError(message)
    if any(w in text for w in TRANSIENT_WORDS):
        return RetryableError(message)
    if code == "INTERNAL_ERROR" and status is None:  # MLflow: a server-side failure without a status
        return RetryableError(message)
    return PermanentError(message)


def proxy_environment(proxy: str | None) -> None:
    """For a client that takes no proxy parameter (MLflow, SwanLab): point the standard proxy
    variables of this process at ``proxy`` (``--proxy``); nothing when it is None."""
    if proxy:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            os.environ[name] = proxy
