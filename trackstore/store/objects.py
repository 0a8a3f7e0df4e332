"""A folder of objects: an S3-compatible bucket prefix or a filesystem path, behind one small API.

The team store (a *replica*: docs/format.md section 12, docs/team-store.md) lives in such a
folder. Its writer (the ``store`` sync target), its readers (``--root s3://...``) and its gc use
this module and nothing else to reach it. What it promises:

* :func:`open_location` takes ``s3://BUCKET/PREFIX`` or a path (``file://`` or plain) and gives
  an :class:`ObjectFolder`. S3 goes through obstore (a well-kept Rust client: typed create-only
  writes, no directory-marker objects); its endpoint, region and credentials come from the
  standard AWS variables (``AWS_ENDPOINT_URL`` or ``AWS_ENDPOINT_URL_S3``, ``AWS_REGION`` or
  ``AWS_DEFAULT_REGION``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
  ``AWS_SESSION_TOKEN``) or from the named profile ``AWS_PROFILE`` in ``~/.aws/credentials``
  and ``~/.aws/config`` (``AWS_SHARED_CREDENTIALS_FILE``, ``AWS_CONFIG_FILE``). An ``http://``
  endpoint is allowed as given.
* :attr:`ObjectFolder.url` is credential-free (``s3://bucket/prefix`` plus the endpoint's host,
  user info removed, or ``file:///abs/path``): it names a destination and may be printed and
  stored. Secrets never appear in it, in an error message or on disk.
* :meth:`ObjectFolder.put_new` is create-only: S3 ``If-None-Match: *``; a path: the bytes go to
  a hidden temp name in the same folder (``.<name>.<hex>.tmp``, which no ``*.parquet`` glob
  matches), are fsynced, and are hard-linked to the final name, which fails if it exists (on a
  filesystem without hard links: renamed, after checking the name is free); the folder is
  fsynced. Either way a reader sees the whole object or nothing, and an object once
  written is never replaced by this call. :meth:`ObjectFolder.put` replaces atomically (S3 PUT;
  a path: temp file and rename).
* Errors come out as trackstore's: a connection that fails or is cut is
  :class:`~trackstore.errors.RetryableError` (the caller's engine retries and reconciles);
  access denied, a missing bucket, a read-only or full filesystem are
  :class:`~trackstore.errors.TargetRefusedError` (exit 10); missing credentials are
  :class:`~trackstore.errors.UsageError` (exit 2). Each is one line naming :attr:`url`.
* obstore is imported only when an ``s3://`` folder is opened (the ``trackstore[team]`` extra).
"""

from __future__ import annotations

import configparser
import errno
import os
import re
import secrets
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

from ..errors import RetryableError, TargetRefusedError, TargetUnreachableError, UsageError
from .atomic import fsync_dir
from .layout import TMP_SUFFIX

S3_SCHEME = "s3://"
FILE_SCHEME = "file://"


def is_remote(uri: str | os.PathLike | None) -> bool:
    """Whether ``uri`` names an object store (``s3://``) rather than a path."""
    return isinstance(uri, str) and uri.startswith(S3_SCHEME)


@dataclass(frozen=True)
class ObjectInfo:
    """One object of a listing: its key relative to the folder, size in bytes and entity tag."""

    key: str
    size: int
    etag: str


class ObjectFolder:
    """The interface both kinds of folder implement (see the module docstring)."""

    url: str

    def put_new(self, key: str, data: bytes) -> bool:
        """Write ``key`` only if it does not exist; False (nothing written) when it did."""
        raise NotImplementedError

    def put(self, key: str, data: bytes) -> None:
        """Write ``key``, replacing it atomically when it exists."""
        raise NotImplementedError

    def get(self, key: str) -> bytes | None:
        """``key``'s bytes, or None when it does not exist."""
        raise NotImplementedError

    def listing(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object under ``prefix`` (a folder-like key prefix, ``""`` for all), recursively."""
        raise NotImplementedError

    def delete(self, keys: list[str]) -> None:
        """Delete ``keys``; one that is already gone is not an error."""
        raise NotImplementedError

    def check(self) -> None:
        """Raise the module's errors when the folder cannot be read (a cheap request)."""
        raise NotImplementedError


# ---------------------------------------------------------------------------- a filesystem path
class PathFolder(ObjectFolder):
    """A folder on a (possibly shared) filesystem."""

    def __init__(self, path: Path):
        self.path = path
        self.url = path.as_uri()

    def _file(self, key: str) -> Path:
        if not key or key.startswith("/") or any(p in ("", ".", "..") for p in key.split("/")):
            raise ValueError(f"not an object key: {key!r}")
        return self.path.joinpath(*key.split("/"))

    def put_new(self, key: str, data: bytes) -> bool:
        final = self._file(key)
        with self._refusals():
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp = final.with_name(f".{final.name}.{secrets.token_hex(4)}{TMP_SUFFIX}")
            try:
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                try:
                    os.link(tmp, final)
                except FileExistsError:
                    return False
                except OSError as exc:
                    if exc.errno not in _NO_HARD_LINKS:
                        raise
                    # a filesystem without hard links (some FUSE and object-backed mounts): a
                    # rename after a look. Two writers of one name hold the same rows (a part's
                    # name is its rows' range), so the rare race can only put equal bytes there.
                    if final.exists():
                        return False
                    os.rename(tmp, final)
            finally:
                try:
                    tmp.unlink()
                except OSError:
                    pass
            fsync_dir(final.parent)
            return True

    def put(self, key: str, data: bytes) -> None:
        from .atomic import write_bytes_atomic

        final = self._file(key)
        with self._refusals():
            final.parent.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(final, data)

    def get(self, key: str) -> bytes | None:
        try:
            return self._file(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def listing(self, prefix: str = "") -> Iterator[ObjectInfo]:
        top = self._file(prefix.rstrip("/")) if prefix.strip("/") else self.path
        for folder, dirs, files in os.walk(top):
            dirs.sort()
            rel = Path(folder).relative_to(self.path).as_posix()
            for name in sorted(files):
                if name.startswith(".") and name.endswith(TMP_SUFFIX):
                    continue  # a write in progress or left by a killed one: never an object
                try:
                    st = os.stat(os.path.join(folder, name))
                except FileNotFoundError:
                    continue
                key = name if rel == "." else f"{rel}/{name}"
                yield ObjectInfo(key, st.st_size, f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}")

    def delete(self, keys: list[str]) -> None:
        with self._refusals():
            parents = set()
            for key in keys:
                f = self._file(key)
                try:
                    f.unlink()
                except FileNotFoundError:
                    pass
                parents.add(f.parent)
            for folder in sorted(parents, key=lambda p: len(p.parts), reverse=True):
                _remove_empty_up_to(folder, self.path)

    def check(self) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise TargetRefusedError(f"{self.url} is a file, not a folder")

    @contextmanager
    def _refusals(self):
        try:
            yield
        except OSError as exc:
            if exc.errno in (errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM):
                raise TargetRefusedError(f"{self.url}: {exc.strerror or exc}") from None
            raise


#: what os.link raises on a filesystem that has no hard links
_NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.ENOSYS, errno.EMLINK}


def _remove_empty_up_to(folder: Path, top: Path) -> None:
    while folder != top and top in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


# ---------------------------------------------------------------------------- S3
class S3Folder(ObjectFolder):
    """A prefix of an S3-compatible bucket, through obstore."""

    def __init__(self, bucket: str, prefix: str, settings: dict[str, str], endpoint: str | None, *,
                 timeout: float = 30.0):
        from obstore.store import S3Store

        self.bucket, self.prefix = bucket, prefix.strip("/")
        where = f"s3://{bucket}/{self.prefix}".rstrip("/")
        self.url = f"{where} at {_shown_endpoint(endpoint)}" if endpoint else where
        client = {"timeout": f"{max(1, int(timeout))}s", "connect_timeout": "5s"}
        if endpoint and endpoint.startswith("http://"):
            client["allow_http"] = "true"
        config = dict(settings)
        if endpoint:
            config["endpoint"] = endpoint
        # obstore's own retries are short: the sync engine owns retrying (with reconcile first)
        from datetime import timedelta

        retry = {"max_retries": 2, "retry_timeout": timedelta(seconds=max(5.0, timeout)),
                 "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2)}}
        self._store = S3Store(bucket, prefix=self.prefix or None, config=config,  # type: ignore[arg-type]
                              client_options=client, retry_config=retry)  # type: ignore[arg-type]

    def put_new(self, key: str, data: bytes) -> bool:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        with self._errors(key):
            try:
                obstore.put(self._store, key, data, mode="create")
            except (AlreadyExistsError, PreconditionError):
                return False
            return True

    def put(self, key: str, data: bytes) -> None:
        import obstore

        with self._errors(key):
            obstore.put(self._store, key, data)

    def get(self, key: str) -> bytes | None:
        import obstore

        with self._errors(key):
            try:
                return bytes(obstore.get(self._store, key).bytes())
            except FileNotFoundError:
                return None

    def listing(self, prefix: str = "") -> Iterator[ObjectInfo]:
        import obstore

        with self._errors(prefix or "/"):
            for batch in obstore.list(self._store, prefix=prefix.strip("/") or None):
                for o in batch:
                    yield ObjectInfo(o["path"], int(o["size"]), str(o.get("e_tag") or ""))

    def delete(self, keys: list[str]) -> None:
        import obstore

        with self._errors("delete"):
            for start in range(0, len(keys), 1000):
                try:
                    obstore.delete(self._store, keys[start:start + 1000])
                except FileNotFoundError:
                    pass

    def check(self) -> None:
        import obstore

        with self._errors("/"):
            next(iter(obstore.list(self._store, chunk_size=1)), None)

    @contextmanager
    def _errors(self, key: str):
        """obstore's exceptions as trackstore's, one line each, credentials never in them."""
        from obstore import exceptions as ox

        try:
            yield
        except FileNotFoundError:
            raise
        except (ox.PermissionDeniedError, ox.UnauthenticatedError) as exc:
            raise TargetRefusedError(f"{self.url}: access denied ({_first_line(exc)}); check AWS_ACCESS_KEY_ID, "
                                     "AWS_SECRET_ACCESS_KEY or AWS_PROFILE and the bucket's policy") from None
        except ox.GenericError as exc:
            text = str(exc)
            if "NoSuchBucket" in text or "bucket does not exist" in text.lower():
                raise TargetRefusedError(f"{self.url}: no such bucket {self.bucket!r}") from None
            # a status 403 standing alone: a cut connection's text holds the signed request, whose
            # X-Amz-Date (20261207T005403Z) or a port may contain those digits
            if re.search(r"(?<!\w)403(?!\w)", text) or any(
                    w in text for w in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch")):
                raise TargetRefusedError(f"{self.url}: access denied ({_first_line(exc)}); check "
                                         "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or AWS_PROFILE") from None
            raise RetryableError(f"{self.url}: {_first_line(exc)}") from None
        except ox.BaseError as exc:
            raise RetryableError(f"{self.url}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    """The few words of an obstore error that say what happened: the S3 error code when the
    server sent one, else the client's last clause (its messages hold whole requests)."""
    from .redact import redact_text

    text = " ".join(str(exc).split("\n\n")[0].split())
    code = re.search(r"<Code>([^<]{1,80})</Code>", text)
    if code:
        status = re.search(r"\b([45]\d\d) [A-Z][A-Za-z ]+?:", text)
        return f"{code.group(1)}{f', HTTP {status.group(1)}' if status else ''}"
    for marker in ("HTTP error: ", "Server returned non-2xx status code: "):
        if marker in text:
            text = text[text.rindex(marker) + len(marker):]
            break
    return redact_text(text[:200])


def _shown_endpoint(endpoint: str) -> str:
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}" if parts.scheme else host


# ---------------------------------------------------------------------------- opening
def open_location(uri: str | os.PathLike, *, timeout: float = 30.0, env: dict[str, str] | None = None) -> ObjectFolder:
    """The folder ``uri`` names: ``s3://BUCKET[/PREFIX]``, ``file:///path`` or a path."""
    text = os.fspath(uri)
    if text.startswith(S3_SCHEME):
        bucket, _, prefix = text[len(S3_SCHEME):].partition("/")
        if "@" in bucket:  # s3://KEY:SECRET@bucket: never echo it
            raise UsageError("an S3 location holds no credentials: use s3://BUCKET/PREFIX with AWS_ACCESS_KEY_ID "
                             "and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)")
        if not bucket or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{1,254}", bucket):
            raise UsageError(f"{text!r} is not an S3 location: use s3://BUCKET/PREFIX")
        if any(p in (".", "..") for p in prefix.split("/")):
            raise UsageError(f"{text!r}: a prefix may not hold '.' or '..' parts")
        import importlib.util

        # the missing client first: a user who sets credentials must not meet a second error then
        if importlib.util.find_spec("obstore") is None:
            raise UsageError("s3:// locations need the obstore client: pip install 'trackstore[team]'")
        settings, endpoint = s3_settings(os.environ if env is None else env)
        return S3Folder(bucket, prefix, settings, endpoint, timeout=timeout)
    if "://" in text and not text.startswith(FILE_SCHEME):
        raise UsageError(f"{text!r}: only s3://BUCKET/PREFIX and filesystem paths are supported")
    if text.startswith(FILE_SCHEME):
        text = urlsplit(text).path
    return PathFolder(Path(text).expanduser().absolute())


def s3_settings(env) -> tuple[dict[str, str], str | None]:
    """obstore settings and the endpoint from the AWS variables and the named profile.

    Raises :class:`UsageError` when no credentials are found (anonymous access is
    ``AWS_SKIP_SIGNATURE=true``). The returned dict holds secrets: it goes to the client only.
    """
    profile_name = env.get("AWS_PROFILE")
    profile = _profile(env, profile_name) if profile_name else {}
    key = env.get("AWS_ACCESS_KEY_ID") or profile.get("aws_access_key_id")
    secret = env.get("AWS_SECRET_ACCESS_KEY") or profile.get("aws_secret_access_key")
    token = env.get("AWS_SESSION_TOKEN") or profile.get("aws_session_token")
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or profile.get("region") or "us-east-1"
    endpoint = (env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or profile.get("endpoint_url")
                or None)
    settings: dict[str, str] = {"region": region}
    anonymous = str(env.get("AWS_SKIP_SIGNATURE", "")).lower() in ("1", "true", "yes")
    if anonymous:
        settings["skip_signature"] = "true"
    elif key and secret:
        settings.update(access_key_id=key, secret_access_key=secret)
        if token:
            settings["session_token"] = token
    elif not _has_other_credentials(env):
        where = f"profile {profile_name!r}" if profile_name else "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
        raise UsageError(f"no S3 credentials: set {where} (or AWS_PROFILE), or AWS_SKIP_SIGNATURE=true "
                         "for a public bucket")
    return settings, endpoint


def _has_other_credentials(env) -> bool:
    """Credentials obstore finds itself: a web identity (Kubernetes), a container or instance role."""
    return bool(env.get("AWS_WEB_IDENTITY_TOKEN_FILE") or env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
                or env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI") or env.get("AWS_EC2_METADATA_ENABLED"))


def _profile(env, name: str) -> dict[str, str]:
    """The keys of profile ``name`` from the shared credentials and config files (INI)."""
    home = Path(env.get("HOME") or Path.home())
    found: dict[str, str] = {}
    for path, section in ((env.get("AWS_CONFIG_FILE") or home / ".aws" / "config",
                           name if name == "default" else f"profile {name}"),
                          (env.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials", name)):
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(path, encoding="utf-8")
        except configparser.Error as exc:
            raise UsageError(f"{path}: not a valid AWS file ({type(exc).__name__})") from None
        if parser.has_section(section):
            found.update({k: v.strip() for k, v in parser.items(section) if v.strip()})
    if not found:
        raise UsageError(f"AWS_PROFILE={name!r}: no such profile in ~/.aws/credentials or ~/.aws/config")
    return found


def check_reachable(folder: ObjectFolder) -> None:
    """Raise :class:`TargetUnreachableError` when the folder's server does not answer."""
    try:
        folder.check()
    except RetryableError as exc:
        raise TargetUnreachableError(f"cannot reach {exc}") from None
