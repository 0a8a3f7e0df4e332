"""What every HTTP target needs, written once: destination identity and the reachability probe.

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
"""

from __future__ import annotations

import base64
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
