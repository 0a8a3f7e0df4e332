"""What the dashboard tests share: a store with runs of every record kind, ``trackstore ui`` as a
real subprocess on 127.0.0.1, and a headless Chromium from the system's packages.

The browser tests need ``chromium`` and ``chromedriver`` (Debian: ``apt-get install chromium
chromium-driver``; ``make install-browser`` does it, idempotently); without them they are skipped
with that reason. Selenium is told the driver's path, so it never downloads one.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from tests.helpers import REPO
from tests.servers import free_port

XSS = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>'
ARTIFACTS = REPO / "test-artifacts" / "ui"  # screenshots (git-ignored)
SPIKE_STEP, SPIKE_VALUE, BIG_POINTS = 654_321, 50.0, 1_000_000


def env_for(home: Path) -> dict[str, str]:
    scrub = ("WANDB_", "MLFLOW_", "SWANLAB_", "TRACKSTORE_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(scrub) and "proxy" not in k.lower()}
    # no system metrics in these runs (their tests count keys); a test that wants them sets it to 1
    env.update(HOME=str(home), TRACKSTORE_DISABLE_GIT="1", PYTHONUNBUFFERED="1", TRACKSTORE_SYSTEM_METRICS="0")
    return env


def write_small_runs(root: Path) -> dict[str, str]:
    """Two finished runs ``alpha`` and ``beta`` in project ``rl``: three keys over 200 steps,
    samples at steps 10 and 20 (sample 1 of step 20 answers with :data:`XSS`), trajectories at
    the same steps with tool calls, a histogram key and an artifact. Returns {name: run_id}."""
    import trackstore

    ids = {}
    for name, lr, seed in (("alpha", 1e-6, 0), ("beta", 3e-6, 1)):
        config = {"actor": {"optim": {"lr": lr}}, "model": {"name": "qwen2.5-0.5b"}, "seed": seed}
        with trackstore.init(project="rl", name=name, config=config, tags=["grpo", name], root=root) as run:
            ids[name] = run.run_id
            for step in range(200):
                run.log({"actor/entropy": 1.0 - step / 400 + seed * 0.01, "critic/score/mean": step / 200 + seed * 0.05,
                         "timing_s/step": 2.0 + (step % 7) * 0.1}, step=step)
            for step in (10, 20):
                run.log_samples([{"input": f"question {i} at {step}", "output": XSS if (step, i) == (20, 1) else
                                  f"answer {i} at step {step}", "score": i / 2} for i in range(3)], step=step)
                for i in range(2):
                    with run.trace(step=step, sample_index=i) as tr:
                        with tr.span("user", inputs={"content": f"what is {i} + {step}?"}):
                            pass
                        with tr.span("assistant", kind="llm", inputs=[{"role": "user", "content": f"what is {i} + {step}?"}],
                                     outputs={"content": "let me call the calculator",
                                              "tool_calls": [{"function": {"name": "calculator",
                                                                           "arguments": json.dumps({"expr": f"{i} + {step}"})}}]}):
                            with tr.span("calculator", kind="tool", inputs={"expr": f"{i} + {step}"},
                                         outputs=XSS if (step, i) == (20, 1) else str(i + step)):
                                pass
                        with tr.span("reward", kind="reward", inputs={"answer": i + step}, outputs=float(i)):
                            pass
                        tr.set_reward(float(i))
            import numpy as np

            for step in range(0, 200, 20):
                run.log({"grad/hist": trackstore.Histogram(np.random.default_rng(step).normal(step / 100, 1, 500))}, step=step)
            if name == "alpha":
                art = root.parent / "weights.bin"
                art.write_bytes(b"\x00\x01weights" * 100)
                run.log_artifact(art, name="policy", type="model")
    return ids


BIG_RUN = """
import trackstore
run = trackstore.init(project="big", name="spiky", root={root!r})
for i in range(%d):
    run.log({"loss": 1.0 + (i %% 1000) / 1e4 + (%r if i == %d else 0.0)}, step=i)
run.finish()
print(run.run_id)
""" % (BIG_POINTS, SPIKE_VALUE, SPIKE_STEP)
BIG_RUN = BIG_RUN.replace("{", "{{").replace("}", "}}").replace("{{root!r}}", "{root!r}")


LIVE_RUN = """
import os, time, trackstore
run = trackstore.init(project="live", name="growing", root={root!r}, flush_interval=0.3)
print(run.run_id, flush=True)
step = 0
while not os.path.exists({stop!r}):
    run.log({{"live/value": float(step)}}, step=step)
    step += 1
    time.sleep(0.05)
run.finish()
"""


class UiServer:
    """``trackstore ui`` in a subprocess on 127.0.0.1 and a free port; ``stop()`` ends it."""

    def __init__(self, root: Path, home: Path, *args: str, host: str = "127.0.0.1"):
        self.port = free_port()
        self.host = host
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trackstore.cli.main", "ui", "--root", str(root), "--host", host,
             "--port", str(self.port), *args],
            env=env_for(home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.banner = self.proc.stdout.readline()  # printed once the socket listens
        if "serving" not in self.banner:
            self.stop()
            raise RuntimeError(f"trackstore ui did not start: {self.banner}")
        self.url = f"http://127.0.0.1:{self.port}/"

    def request(self, path: str, headers: dict | None = None) -> tuple[int, dict, bytes]:
        """A raw HTTP GET (the path is sent exactly as given, nothing normalised)."""
        con = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            con.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
            hdrs = {"Host": f"127.0.0.1:{self.port}", **(headers or {})}
            for k, v in hdrs.items():
                con.putheader(k, v)
            con.endheaders()
            r = con.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            con.close()

    def json(self, path: str, headers: dict | None = None):
        status, _h, body = self.request(path, headers)
        assert status == 200, (path, status, body[:300])
        return json.loads(body)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()


def chromium_paths() -> tuple[str, str] | None:
    """(browser, driver) from the system, or None."""
    browser = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)
    driver = shutil.which("chromedriver") or next((p for p in ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")
                                                   if os.path.exists(p)), None)
    return (browser, driver) if browser and driver else None


def start_browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    browser, driver = chromium_paths()  # type: ignore[misc]
    opts = Options()
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1000",
              "--no-first-run", "--disable-extensions", "--disable-background-networking"):
        opts.add_argument(a)
    opts.binary_location = browser
    return webdriver.Chrome(options=opts, service=Service(driver))


def require_chromium() -> None:
    """Skip the calling test module, saying why, when the dashboard's extra, Selenium or the
    system's Chromium and chromedriver are missing."""
    import pytest

    pytest.importorskip("starlette")
    pytest.importorskip("selenium")
    if chromium_paths() is None:
        pytest.skip("chromium and chromedriver are not installed (make install-browser, or apt-get install chromium "
                    "chromium-driver)", allow_module_level=True)


@contextmanager
def serving(root: Path, home: Path, *args: str, host: str = "127.0.0.1"):
    """``trackstore ui`` over ``root`` for the duration of the block."""
    s = UiServer(root, home, *args, host=host)
    try:
        yield s
    finally:
        s.stop()


def load(browser, url: str, *, fresh_storage: bool = False) -> None:
    """Open ``url`` in a full page load, never a same-document navigation: a module's browser is
    often on the dashboard already, where going to another ``#fragment`` only fires a hash change
    (and the ``refresh()`` tests used to add after it once timed out in chromedriver, "aborted by
    navigation"). ``fresh_storage``: the page's localStorage emptied first, as a first visit."""
    if fresh_storage:
        browser.get(url)
        browser.execute_script("localStorage.clear();")
    browser.get("about:blank")
    browser.get(url)


def open_page(browser, server, fragment: str = "") -> None:
    """The dashboard at ``#fragment``, loaded afresh with nothing kept from the last test."""
    load(browser, server.url + ("#" + fragment if fragment else ""), fresh_storage=True)


@contextmanager
def chromium():
    """A headless Chromium (1,400 x 1,000) for the duration of the block; screenshots go to ARTIFACTS."""
    d = start_browser()
    d.set_page_load_timeout(30)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield d
    finally:
        d.quit()


def wait_for(fn, timeout: float = 20.0, interval: float = 0.1, what: str = "condition"):
    """Poll ``fn()`` until it returns something truthy; that value, or AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except Exception as exc:  # noqa: BLE001 - the page may still be rendering
            last = exc
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")
