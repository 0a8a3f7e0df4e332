"""The test servers (tests/servers.py) never outlive the process that started them: a pytest
killed with SIGKILL leaves no server behind (its watchdog ends the group), and a server
stopped normally takes its watchdog with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# a stand-in for the tests' servers: a ServerGroup of two processes (a leader and its child)
STARTER = textwrap.dedent("""
    import subprocess, sys, time
    sys.path.insert(0, {repo!r})
    from tests.servers import ServerGroup

    class Sleeper(ServerGroup):
        NAME = "sleeper"

        def start(self):
            self._proc = subprocess.Popen([sys.executable, "-c",
                                           "import subprocess, sys, time; subprocess.Popen(['sleep', '600']); time.sleep(600)"],
                                          start_new_session=True)
            self._leash()

    server = Sleeper()
    server.start()
    print(server.pid, flush=True)
    if sys.argv[1] == "stop":
        time.sleep(0.5)
        server.stop(grace=5)
        print("stopped", flush=True)
    time.sleep(600)
""")


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
        return True
    except ProcessLookupError:
        return False


def wait_until(what, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if what():
            return True
        time.sleep(0.05)
    return False


def watchdogs_of(group: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if len(argv) > 3 and argv[1] == b"-c" and b"os.killpg(group" in argv[2] and argv[3] == str(group).encode():
                found.append(int(entry.name))
    return found


def test_a_starter_killed_with_sigkill_leaves_no_server_behind(tmp_path):
    starter = subprocess.Popen([sys.executable, "-c", STARTER.format(repo=str(REPO)), "kill"], stdout=subprocess.PIPE,
                               text=True)
    try:
        group = int(starter.stdout.readline())
        assert wait_until(lambda: len(watchdogs_of(group)) == 1)
        time.sleep(0.3)  # the leader's child exists too
        assert group_alive(group)
        starter.send_signal(signal.SIGKILL)
        starter.wait()
        assert wait_until(lambda: not group_alive(group)), "the server outlived the process that started it"
        assert wait_until(lambda: not watchdogs_of(group))
    finally:
        starter.kill()
        starter.wait()


def test_a_server_stopped_normally_takes_its_watchdog_with_it(tmp_path):
    starter = subprocess.Popen([sys.executable, "-c", STARTER.format(repo=str(REPO)), "stop"], stdout=subprocess.PIPE,
                               text=True)
    try:
        group = int(starter.stdout.readline())
        assert starter.stdout.readline().strip() == "stopped"
        assert not group_alive(group) and not watchdogs_of(group)
    finally:
        starter.kill()
        starter.wait()
