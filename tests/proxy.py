"""A TCP fault-injection proxy for the network tests: a bad network between a client and a real server.

``FaultyProxy(target_port)`` listens on 127.0.0.1 and forwards bytes, unchanged, to a server on
127.0.0.1 (the ``Host`` header therefore says ``127.0.0.1:<proxy port>``, which MLflow's default
allowed-hosts rule ``127.0.0.1:*`` accepts). By default it is transparent; faults are armed with
explicit parameters or a seeded RNG, so a failing test fails the same way every time:

- ``cut_after_bytes(n, direction)``: on every new connection, the first ``n`` bytes in
  ``direction`` are forwarded and the connection is reset (RST to both sides, SO_LINGER 0) when
  the next byte arrives. ``direction="down"`` (server → client) with ``n=0`` is the case that
  matters most: the server receives and processes the whole request, the client never sees the
  answer. ``"up"`` cuts the request itself (the server sees a truncated request); ``"both"``
  counts both directions against one budget. ``times=k`` cuts only the next ``k`` connections.
- ``cut_every_nth_connection(n, after_bytes, direction)``: connections n, 2n, 3n… are cut.
- ``random_cuts(probability, seed, max_bytes, direction)``: each new connection is cut with
  ``probability``, after a byte count drawn from ``[0, max_bytes]``; decisions come from
  ``random.Random(seed)`` in accept order. ``direction`` may be a tuple such as
  ``("up", "down")``: each cut then picks one, mixing cuts before and after delivery.
- ``link_cuts(min_bytes, max_bytes, seed)``: a link that breaks every ``randint(min, max)``
  bytes of traffic over every connection and both directions; each cut is drawn ``"up"`` (the
  request is cut while sent) or ``"down"`` (the next answer is cut: the server processed it).
- ``refuse(seconds=None)``: new connections are accepted and reset at once (``mode="close"``:
  closed with FIN instead), for ``seconds`` or until ``reset()``.
- ``delay(seconds)``: every forwarded chunk waits ``seconds`` first (a slow link); applies to
  live connections too.
- ``latency(seconds)``: each request waits ``seconds`` once, before its first byte goes up (the
  first client chunk after the server's answer, or on a new connection): a link with that
  round-trip time, whatever the request's size; applies to live connections too.
- ``reset()``: transparent again (live connections keep running).

Arming a cut or a refusal first resets the connections already open (a pooled keep-alive
connection would otherwise dodge the fault); clients see that as a stale pooled connection and
reconnect. If the target is down, a new connection is reset (like a refused connect).

``stats()`` returns counters: connections accepted, refused, cut, upstream connect failures,
bytes forwarded up and down, and connections still open.

Bounded by construction: it connects only to loopback addresses, listens only on 127.0.0.1, and
its threads are daemons that exit within a fraction of a second of ``close()``.
"""

from __future__ import annotations

import ipaddress
import random
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Literal

Direction = Literal["up", "down", "both"]
_CHUNK = 64 * 1024
_POLL_S = 0.05


@dataclass(frozen=True)
class ProxyStats:
    connections: int = 0
    refused: int = 0
    cuts: int = 0
    upstream_failures: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    active: int = 0


@dataclass(frozen=True)
class _Cut:
    after_bytes: int
    direction: Direction


class _Link:
    """The state of :meth:`FaultyProxy.link_cuts` (called under the proxy's lock)."""

    def __init__(self, rng: random.Random, lo: int, hi: int, directions: tuple[str, ...]) -> None:
        self.rng, self.lo, self.hi, self.directions = rng, lo, hi, directions
        self._draw()

    def _draw(self) -> None:
        self.budget = self.rng.randint(self.lo, self.hi)
        self.direction = self.directions[self.rng.randrange(len(self.directions))]
        self.pending = False  # budget spent: the next chunk in `direction` is cut

    def take(self, direction: str, n: int) -> int:
        if self.pending:
            if direction != self.direction:
                return n
            allowed = 0
        elif n < self.budget:
            self.budget -= n
            return n
        elif direction != self.direction:
            self.pending = True
            return n
        else:
            allowed = self.budget
        self._draw()
        return allowed


def _rst_close(sock: socket.socket) -> None:
    """Close with SO_LINGER 0, so the peer gets a TCP RST instead of an orderly FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class _Connection:
    """One client connection and its upstream twin, pumped by one thread with select()."""

    def __init__(self, proxy: FaultyProxy, client: socket.socket, upstream: socket.socket,
                 cut: _Cut | None) -> None:
        self.proxy, self.client, self.upstream, self.cut = proxy, client, upstream, cut
        self.sent = {"up": 0, "down": 0}
        self.last = "down"  # direction of the last chunk: an "up" chunk after a "down" one starts a request
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._pump, daemon=True, name="faulty-proxy-conn")

    def _budget(self, direction: str) -> float:
        """Bytes that may still pass in ``direction`` before the cut."""
        cut = self.cut
        if cut is None:
            return float("inf")
        if cut.direction == "both":
            return cut.after_bytes - self.sent["up"] - self.sent["down"]
        return cut.after_bytes - self.sent[direction] if cut.direction == direction else float("inf")

    def _pump(self) -> None:
        peers = {self.client: (self.upstream, "up"), self.upstream: (self.client, "down")}
        open_readers = [self.client, self.upstream]
        reset = False
        try:
            while open_readers and not self.stop.is_set():
                readable, _, _ = select.select(open_readers, [], [], _POLL_S)
                for src in readable:
                    dst, direction = peers[src]
                    data = src.recv(_CHUNK)
                    if not data:  # orderly EOF: pass the half-close on
                        open_readers.remove(src)
                        try:
                            dst.shutdown(socket.SHUT_WR)
                        except OSError:
                            pass
                        continue
                    budget = self._budget(direction) if self.proxy._link is None else \
                        self.proxy._link_take(direction, len(data))
                    allowed = data if len(data) <= budget else data[:max(0, int(budget))]
                    if self.proxy._delay_s and self.stop.wait(self.proxy._delay_s):
                        return
                    if direction == "up" and self.last == "down" and self.proxy._latency_s:
                        if self.stop.wait(self.proxy._latency_s):
                            return
                    self.last = direction
                    if allowed:
                        dst.sendall(allowed)
                        self.sent[direction] += len(allowed)
                        self.proxy._count(f"bytes_{direction}", len(allowed))
                    if len(allowed) < len(data):
                        self.proxy._count("cuts")
                        reset = True
                        return
        except OSError:
            reset = True
        finally:
            if reset or self.stop.is_set():
                _rst_close(self.client)
                _rst_close(self.upstream)
            else:
                self.client.close()
                self.upstream.close()
            self.proxy._forget(self)


class FaultyProxy:
    """A transparent-by-default TCP proxy from 127.0.0.1:<port> to a loopback server, with faults on demand."""

    def __init__(self, target_host: str = "127.0.0.1", target_port: int = 0) -> None:
        if not ipaddress.ip_address(target_host).is_loopback:
            raise ValueError(f"FaultyProxy only forwards to loopback addresses, not {target_host!r}")
        if not 0 < target_port < 65536:
            raise ValueError(f"target_port must be a TCP port, not {target_port!r}")
        self.target = (target_host, target_port)
        self._lock = threading.Lock()
        self._stats = ProxyStats()
        self._conns: set[_Connection] = set()
        self._closed = threading.Event()
        self._delay_s = 0.0
        self._latency_s = 0.0
        self._refuse_until = 0.0
        self._refuse_mode = "reset"
        self._policy = None  # callable(connection_index) -> _Cut | None
        self._link: _Link | None = None  # link_cuts(): a byte budget over every connection
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.settimeout(_POLL_S)
        self.port: int = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True, name="faulty-proxy-accept")
        self._started = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # lifecycle -------------------------------------------------------------------------------

    def start(self) -> FaultyProxy:
        if not self._started:
            self._listener.listen(64)
            self._acceptor.start()
            self._started = True
        return self

    def close(self) -> None:
        """Stop accepting, reset every open connection and wait (briefly) for the threads."""
        self._closed.set()
        if self._started:
            self._acceptor.join(timeout=2)
        self._listener.close()
        self.drop_connections()

    def __enter__(self) -> FaultyProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # faults ----------------------------------------------------------------------------------

    def cut_after_bytes(self, n: int, direction: Direction = "down", times: int | None = None) -> None:
        """Cut each new connection (or the next ``times`` ones) when byte ``n + 1`` would pass in ``direction``."""
        cut = self._make_cut(n, direction)
        if times is None:
            self._arm(lambda _i: cut)
        else:
            remaining = [times]

            def policy(_i: int) -> _Cut | None:
                if remaining[0] <= 0:
                    return None
                remaining[0] -= 1
                return cut

            self._arm(policy)

    def cut_every_nth_connection(self, nth: int, after_bytes: int = 0, direction: Direction = "down") -> None:
        """Cut connections number nth, 2·nth, … counted from now (1-based)."""
        if nth < 1:
            raise ValueError("nth must be >= 1")
        cut = self._make_cut(after_bytes, direction)
        counter = [0]

        def policy(_i: int) -> _Cut | None:
            counter[0] += 1
            return cut if counter[0] % nth == 0 else None

        self._arm(policy)

    def random_cuts(self, probability: float, seed: int, max_bytes: int | dict[str, int] = 0,
                    direction: Direction | tuple[Direction, ...] = "down") -> None:
        """Cut each new connection with ``probability`` after ``randint(0, max_bytes)`` bytes; reproducible by ``seed``.

        ``direction`` may be a tuple (e.g. ``("up", "down")``): each cut connection then draws
        its direction from it, so one run sees requests cut before the server got them *and*
        answers lost after it processed them. ``max_bytes`` may be a dict per direction (small
        requests but large answers: ``{"up": 3000, "down": 60000}``).
        """
        if not 0.0 <= probability <= 1.0:
            raise ValueError("probability must be within [0, 1]")
        choices = direction if isinstance(direction, tuple) else (direction,)
        limits = max_bytes if isinstance(max_bytes, dict) else {d: max_bytes for d in choices}
        for d in choices:
            self._make_cut(limits[d], d)  # validates
        rng = random.Random(seed)

        def policy(_i: int) -> _Cut | None:
            hit = rng.random() < probability
            if len(choices) == 1:  # the draws of the single-direction form, unchanged
                return _Cut(rng.randint(0, limits[choices[0]]), choices[0]) if hit else None
            d = choices[rng.randrange(len(choices))]
            return _Cut(rng.randint(0, limits[d]), d) if hit else None

        self._arm(policy)

    def link_cuts(self, min_bytes: int, max_bytes: int, seed: int,
                  direction: tuple[Direction, ...] = ("up", "down")) -> None:
        """A link that breaks every ``randint(min_bytes, max_bytes)`` bytes of traffic, counted over
        both directions and every connection; reproducible by ``seed``. Each cut draws its
        direction from ``direction``: ``"up"`` cuts the request being sent (the server never
        gets it whole), ``"down"`` waits for the next bytes of an answer and cuts there (the
        server got and processed the request; the client never learns it)."""
        if not 0 < min_bytes <= max_bytes:
            raise ValueError("need 0 < min_bytes <= max_bytes")
        rng = random.Random(seed)
        with self._lock:
            self._link = _Link(rng, min_bytes, max_bytes, direction)
        self.drop_connections()

    def _link_take(self, direction: str, n: int) -> int:
        """How many of ``n`` bytes in ``direction`` pass before the link's next cut (``n``: none)."""
        with self._lock:
            link = self._link
            if link is None:
                return n
            return link.take(direction, n)

    def refuse(self, seconds: float | None = None, mode: Literal["reset", "close"] = "reset") -> None:
        """Reset (or close) every new connection at once, for ``seconds`` or until ``reset()``."""
        if mode not in ("reset", "close"):
            raise ValueError("mode must be 'reset' or 'close'")
        with self._lock:
            self._refuse_until = float("inf") if seconds is None else time.monotonic() + seconds
            self._refuse_mode = mode
        self.drop_connections()

    def delay(self, seconds: float) -> None:
        """Wait ``seconds`` before forwarding each chunk (both directions, live connections included)."""
        if seconds < 0:
            raise ValueError("delay must be >= 0")
        self._delay_s = float(seconds)

    def latency(self, seconds: float) -> None:
        """Wait ``seconds`` once per request, before its first byte is forwarded (a round trip)."""
        if seconds < 0:
            raise ValueError("latency must be >= 0")
        self._latency_s = float(seconds)

    def reset(self) -> None:
        """Back to transparent for new connections; counters and live connections are kept."""
        with self._lock:
            self._policy = None
            self._link = None
            self._refuse_until = 0.0
            self._delay_s = 0.0
            self._latency_s = 0.0

    def drop_connections(self) -> None:
        """Reset every open connection now (new ones are unaffected)."""
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            conn.stop.set()
        for conn in conns:
            conn.thread.join(timeout=2)
            if conn.thread.is_alive():  # stuck in sendall to a peer that stopped reading
                for sock in (conn.client, conn.upstream):
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                conn.thread.join(timeout=2)

    def stats(self) -> ProxyStats:
        with self._lock:
            return ProxyStats(**{**self._stats.__dict__, "active": len(self._conns)})

    # internals -------------------------------------------------------------------------------

    @staticmethod
    def _make_cut(n: int, direction: str) -> _Cut:
        if n < 0:
            raise ValueError("byte count must be >= 0")
        if direction not in ("up", "down", "both"):
            raise ValueError("direction must be 'up', 'down' or 'both'")
        return _Cut(n, direction)  # type: ignore[arg-type]

    def _arm(self, policy) -> None:
        with self._lock:
            self._policy = policy
        self.drop_connections()

    def _count(self, field: str, amount: int = 1) -> None:
        with self._lock:
            self._stats = ProxyStats(**{**self._stats.__dict__, field: getattr(self._stats, field) + amount})

    def _forget(self, conn: _Connection) -> None:
        with self._lock:
            self._conns.discard(conn)

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.setblocking(True)
            self._handle(client)

    def _handle(self, client: socket.socket) -> None:
        with self._lock:
            index = self._stats.connections
            refusing = time.monotonic() < self._refuse_until
            mode = self._refuse_mode
            cut = None if refusing or self._policy is None else self._policy(index)
        self._count("connections")
        if refusing:
            self._count("refused")
            if mode == "reset":
                _rst_close(client)
            else:
                client.close()
            return
        try:
            upstream = socket.create_connection(self.target, timeout=5)
            upstream.settimeout(None)
        except OSError:
            self._count("upstream_failures")
            _rst_close(client)
            return
        conn = _Connection(self, client, upstream, cut)
        with self._lock:
            if self._closed.is_set():
                _rst_close(client)
                _rst_close(upstream)
                return
            self._conns.add(conn)
        conn.thread.start()
