"""The test infrastructure works: a real MLflow server (its stop() proves no process of it is left), and a proxy that breaks the network on demand."""

from __future__ import annotations

import socket
import threading
import time

import pytest

import tests.conftest
from tests.proxy import FaultyProxy
from tests.servers import MlflowServer, free_port, unique_experiment_name

if not hasattr(tests.conftest, "mlflow_server"):  # until conftest imports them; importing twice = two servers
    from tests.servers import mlflow_experiment_name, mlflow_proxy, mlflow_server  # noqa: F401


# the session's MLflow server (about 18 s of CPU to start) is started once: every module using it
# stays on one worker under `make test` (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("mlflow_server")


@pytest.fixture
def client_env(monkeypatch):
    """Fail fast: no MLflow client retries (they would resend and hide the fault), no telemetry."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")


def _client(url: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=url)


def _new_run(client, experiment_name: str) -> str:
    exp_id = client.create_experiment(experiment_name)
    return client.create_run(exp_id, start_time=1_700_000_000_000, tags={"trackstore.run_id": "r1"}).info.run_id


def _metrics(key: str, steps: range):
    from mlflow.entities import Metric

    return [Metric(key, float(s) / 2, 1_700_000_000_000 + s, s) for s in steps]


@pytest.fixture
def proxy(mlflow_proxy):
    return mlflow_proxy


# --- the server ------------------------------------------------------------------------------

def test_server_serves_rest_api_and_http_artifacts(mlflow_server, mlflow_experiment_name, client_env):
    from mlflow.entities import Param, RunTag

    client = _client(mlflow_server.url)
    run_id = _new_run(client, mlflow_experiment_name)
    client.log_batch(run_id, metrics=_metrics("loss", range(5)), params=[Param("lr", "0.1")],
                     tags=[RunTag("stage", "test")])
    client.log_text(run_id, "hello", "notes/hello.txt")
    client.set_terminated(run_id, "FINISHED", end_time=1_700_000_100_000)

    history = sorted(client.get_metric_history(run_id, "loss"), key=lambda m: m.step)
    assert [(m.step, m.value, m.timestamp) for m in history] == [
        (s, s / 2, 1_700_000_000_000 + s) for s in range(5)]
    run = client.get_run(run_id)
    assert run.data.params == {"lr": "0.1"}
    assert run.data.tags["stage"] == "test" and run.data.tags["trackstore.run_id"] == "r1"
    assert (run.info.status, run.info.start_time, run.info.end_time) == ("FINISHED", 1_700_000_000_000,
                                                                       1_700_000_100_000)
    assert [a.path for a in client.list_artifacts(run_id, "notes")] == ["notes/hello.txt"]
    uploaded = list(mlflow_server.artifact_dir.rglob("hello.txt"))  # went over HTTP into the server's store
    assert len(uploaded) == 1 and uploaded[0].read_text() == "hello"
    assert mlflow_server.backend_uri.startswith("sqlite:///") and mlflow_server.db_path.exists()


def test_start_failure_reports_server_log(tmp_path):
    broken = MlflowServer(tmp_path, extra_args=["--app-name", "no-such-app"])
    with pytest.raises(RuntimeError, match="exited with code") as info:
        broken.start()
    assert "no-such-app" in str(info.value)  # the server's own error is in the message
    assert not broken.running


def test_experiment_names_are_unique(mlflow_experiment_name):
    names = {unique_experiment_name("a/b c[1]") for _ in range(20)}
    assert len(names) == 20 and all(n.startswith("ts-a-b-c-1-") for n in names)
    assert mlflow_experiment_name.startswith("ts-test_experiment_names_are_unique-")


def test_free_port_is_bindable():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


# --- the proxy -------------------------------------------------------------------------------

def test_proxy_is_transparent_by_default(mlflow_server, proxy, mlflow_experiment_name, client_env):
    client = _client(proxy.url)  # Host: 127.0.0.1:<proxy port> passes MLflow's host check
    run_id = _new_run(client, mlflow_experiment_name)
    client.log_batch(run_id, metrics=_metrics("loss", range(100)))
    assert len(client.get_metric_history(run_id, "loss")) == 100
    stats = proxy.stats()
    assert stats.connections >= 1 and stats.cuts == 0 and stats.refused == 0
    assert stats.bytes_up > 100 * 20 and stats.bytes_down > 0  # 100 metrics went up; answers are gzipped


def test_cut_downstream_loses_the_answer_but_the_server_got_the_request(mlflow_server, proxy,
                                                                       mlflow_experiment_name, client_env):
    direct = _client(mlflow_server.url)
    run_id = _new_run(direct, mlflow_experiment_name)
    via_proxy = _client(proxy.url)

    proxy.cut_after_bytes(0, direction="down")
    with pytest.raises(Exception, match="(?i)connection|reset|aborted|disconnected"):
        via_proxy.log_batch(run_id, metrics=_metrics("loss", range(10)))
    assert proxy.stats().cuts == 1
    assert len(direct.get_metric_history(run_id, "loss")) == 10  # landed, although the client saw a failure

    proxy.reset()
    assert len(via_proxy.get_metric_history(run_id, "loss")) == 10


def test_cut_upstream_truncates_the_request(mlflow_server, proxy, mlflow_experiment_name, client_env):
    direct = _client(mlflow_server.url)
    run_id = _new_run(direct, mlflow_experiment_name)

    proxy.cut_after_bytes(50, direction="up", times=1)
    with pytest.raises(Exception, match="(?i)connection|reset|aborted|disconnected"):
        _client(proxy.url).log_batch(run_id, metrics=_metrics("loss", range(10)))
    assert proxy.stats().cuts == 1
    assert direct.get_metric_history(run_id, "loss") == []
    _client(proxy.url).log_batch(run_id, metrics=_metrics("loss", range(10)))  # `times=1` is spent
    assert len(direct.get_metric_history(run_id, "loss")) == 10


def test_refuse_until_reset_then_recover(mlflow_server, proxy, mlflow_experiment_name, client_env):
    client = _client(proxy.url)
    exp_id = client.create_experiment(mlflow_experiment_name)

    proxy.refuse()
    for _ in range(2):
        with pytest.raises(Exception, match="(?i)connection|reset|aborted|disconnected"):
            client.get_experiment(exp_id)
    assert proxy.stats().refused >= 2

    proxy.reset()
    assert client.get_experiment(exp_id).name == mlflow_experiment_name


def test_refuse_for_a_while_ends_by_itself(mlflow_server, proxy, client_env):
    proxy.refuse(seconds=0.5, mode="close")
    assert _http_get_status(proxy.port) is None
    time.sleep(0.6)
    assert _http_get_status(proxy.port) == 200


def test_delay_slows_but_delivers(mlflow_server, proxy, client_env):
    proxy.delay(0.05)
    assert _http_get_status(proxy.port) == 200
    assert proxy.stats().bytes_down > 0


def _http_get_status(port: int) -> int | None:
    """One ``GET /health`` on a fresh connection; None when the connection breaks."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    except OSError:
        return None
    if not data.startswith(b"HTTP/1.1 "):
        return None
    return int(data.split()[1])


def _cut_pattern(target_port: int, arm) -> list[bool]:
    with FaultyProxy("127.0.0.1", target_port) as p:
        arm(p)
        return [_http_get_status(p.port) is None for _ in range(12)]


def test_seeded_random_cuts_repeat_exactly(mlflow_server):
    first = _cut_pattern(mlflow_server.port, lambda p: p.random_cuts(0.5, seed=7, max_bytes=40))
    again = _cut_pattern(mlflow_server.port, lambda p: p.random_cuts(0.5, seed=7, max_bytes=40))
    assert first == again and any(first) and not all(first)


def test_every_nth_connection_is_cut(mlflow_server):
    assert _cut_pattern(mlflow_server.port, lambda p: p.cut_every_nth_connection(3)) == [
        False, False, True] * 4


def test_target_down_resets_the_client(client_env):
    with FaultyProxy("127.0.0.1", free_port()) as p:
        assert _http_get_status(p.port) is None
        assert p.stats().upstream_failures == 1


def test_only_loopback_targets():
    with pytest.raises(ValueError, match="loopback"):
        FaultyProxy("10.0.0.1", 80)
    with pytest.raises(ValueError):
        FaultyProxy("127.0.0.1", 0)


def test_close_stops_threads_and_listener(mlflow_server):
    p = FaultyProxy("127.0.0.1", mlflow_server.port).start()
    held = socket.create_connection(("127.0.0.1", p.port))  # an idle open connection
    deadline = time.monotonic() + 5
    while p.stats().active == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    p.close()
    assert p.stats().active == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("faulty-proxy") and t.is_alive()]
    held.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", p.port), timeout=2)
