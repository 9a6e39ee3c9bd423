"""A TCP fault proxy for tests: a client talks to a server through it, and the test
decides what the network does to their bytes.

``Proxy(host, port)`` listens on a free loopback port and forwards every connection it
accepts to the target, both ways, one thread per connection (a ``selectors`` loop over
the pair of sockets that wakes every ``TICK`` seconds to see new orders, so each thread
ends within a tick of ``close``). Faults:

* ``drop_reply(match)``: the next client chunk that holds ``match`` (after one that holds
  ``after``, when given) goes to the server; the server's reply to it is read and thrown
  away, and then that connection is cut. The write happened, the answer never comes: the
  outcome-unknown case (reliability research S6). ``then``, when given, runs in the
  proxy between the swallowed reply and the cut, while the client still waits: a test
  can look at the server's state before the client can react.
* ``cut_on(match)``: the matching chunk is not sent; its connection is cut (a request
  lost on the way: nothing happened, and the client cannot know).
* ``blackhole()`` / ``heal()``: every connection (and every new one) stops moving bytes
  in both directions without closing: no FIN, no RST, so the peers see silence, as
  behind a dead router (S7, half-open). The kernel buffers what they send meanwhile and
  ``heal`` lets it through, as TCP's retransmissions would.
* ``cut_all()``: resets every open connection (RST to the client, FIN to the server).

``stats`` counts what happened. ``close()`` (or the context manager) cuts everything,
joins every thread, and raises what a ``then`` hook raised, so a failed check inside the
proxy fails the test.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

TICK = 0.05  # how often an idle pump looks at new orders (blackhole, cut, close)
CHUNK = 65536
# A peer that reads nothing for this long while the proxy has bytes for it ends its
# connection: a send blocked for ever would keep its thread from ever seeing close().
SEND_TIMEOUT = 10.0


@dataclass
class Rule:
    """One ``drop_reply`` order: ``times`` replies still to drop."""

    match: bytes
    after: bytes | None
    times: int
    then: Callable[[], Any] | None
    forward: bool = True  # False: cut the connection instead of sending the chunk
    matched: int = 0


@dataclass
class Stats:
    """What the proxy did so far."""

    accepted: int = 0
    to_server: int = 0  # bytes forwarded client -> server
    to_client: int = 0  # bytes forwarded server -> client
    matched: int = 0  # chunks that matched a drop_reply rule
    replies_dropped: int = 0
    requests_dropped: int = 0  # chunks a cut_on rule kept from the server
    bytes_dropped: int = 0
    cuts: int = 0  # connections cut by a rule or cut_all
    hook_errors: list[BaseException] = field(default_factory=list)


class _Pipe:
    """One proxied connection: the client's socket and ours to the server."""

    def __init__(self, proxy: Proxy, client: socket.socket, server: socket.socket) -> None:
        self.proxy = proxy
        self.client, self.server = client, server
        self.tail = b""  # the end of the previous client chunk: a match may straddle two
        self.seen_after: set[int] = set()  # rules whose ``after`` this connection sent
        self.swallow: Rule | None = None  # the rule whose reply comes next
        self.cut = threading.Event()
        self.closed = False
        self.thread = threading.Thread(target=self.pump, name="netproxy-pipe", daemon=True)

    def pump(self) -> None:
        sel = selectors.DefaultSelector()
        try:
            sel.register(self.client, selectors.EVENT_READ, "client")
            sel.register(self.server, selectors.EVENT_READ, "server")
            while not self.cut.is_set() and not self.proxy.closing.is_set():
                if self.proxy.holed.is_set():
                    self.proxy.healed.wait(TICK)  # read nothing: both kernels buffer
                    continue
                for key, _ in sel.select(TICK):
                    if not self.step(key.data):
                        return
        except (OSError, ValueError):
            pass  # a peer reset, or cut_all closed a socket: the connection is over
        finally:
            sel.close()
            self.close(reset=False)

    def step(self, side: str) -> bool:
        """Moves one chunk from ``side``; False when the connection is over."""
        if side == "client":
            data = self.client.recv(CHUNK)
            if not data:
                return False
            rule = self.inspect(data)
            if rule is not None and not rule.forward:
                with self.proxy.lock:
                    self.proxy.stats.requests_dropped += 1
                self.close(reset=True)
                return False
            self.server.sendall(data)
            with self.proxy.lock:
                self.proxy.stats.to_server += len(data)
            return True
        data = self.server.recv(CHUNK)
        if not data:
            return False
        rule = self.swallow
        if rule is None:
            self.client.sendall(data)
            with self.proxy.lock:
                self.proxy.stats.to_client += len(data)
            return True
        with self.proxy.lock:
            self.proxy.stats.replies_dropped += 1
            self.proxy.stats.bytes_dropped += len(data)
        if rule.then is not None:
            try:
                rule.then()
            except BaseException as exc:  # reported by close(): fails the test
                with self.proxy.lock:
                    self.proxy.stats.hook_errors.append(exc)
        self.close(reset=True)
        return False

    def inspect(self, data: bytes) -> Rule | None:
        """Arms this connection to swallow the next reply when ``data`` matches a rule.
        The end of the previous chunk is searched with it, but a pattern must end inside
        ``data``: one sent before the rule existed does not count."""
        window, start = self.tail + data, len(self.tail)
        self.tail = window[-self.proxy.longest:] if self.proxy.longest else b""
        with self.proxy.lock:
            for n, rule in enumerate(self.proxy.rules):
                if rule.times <= 0:
                    continue
                if rule.after is not None and n not in self.seen_after:
                    at = ends_in(window, start, rule.after)
                    if at < 0:
                        continue
                    self.seen_after.add(n)
                    if rule.match not in window[at:]:
                        continue
                elif ends_in(window, start, rule.match) < 0:
                    continue
                rule.times -= 1
                rule.matched += 1
                self.proxy.stats.matched += 1
                if rule.forward:
                    self.swallow = rule
                return rule
        return None

    def close(self, reset: bool) -> None:
        """Closes both sockets once; with ``reset`` the client gets an RST, the way a
        middlebox that lost the connection's state answers."""
        with self.proxy.lock:
            if self.closed:
                return
            self.closed = True
            if reset:
                self.proxy.stats.cuts += 1
        self.cut.set()
        if reset:
            with contextlib.suppress(OSError):
                self.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.close()


def ends_in(window: bytes, start: int, pattern: bytes) -> int:
    """Where the first ``pattern`` in ``window`` that ends past ``start`` ends, else -1."""
    at = window.find(pattern, max(0, start - len(pattern) + 1))
    return -1 if at < 0 else at + len(pattern)


class Proxy:
    """A fault-injecting TCP proxy on 127.0.0.1 (see the module docstring).

    Args:
        target_host: The server's address.
        target_port: The server's port.
    """

    def __init__(self, target_host: str, target_port: int,
                 listener: socket.socket | None = None) -> None:
        self.target = (target_host, target_port)
        self.lock = threading.Lock()
        self.stats = Stats()
        self.rules: list[Rule] = []
        self.longest = 0
        self.pipes: list[_Pipe] = []
        self.closing = threading.Event()
        self.holed = threading.Event()
        self.healed = threading.Event()
        self.healed.set()
        # ``listener``: a listening socket made elsewhere (tests/netns.py makes one in a
        # network namespace of its own); default: a free loopback port.
        self.listener = listener or socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(TICK)
        self.port: int = self.listener.getsockname()[1]
        self.acceptor = threading.Thread(target=self.accept, name="netproxy-accept",
                                         daemon=True)
        self.acceptor.start()

    @classmethod
    def for_url(cls, url: str) -> Proxy:
        """A proxy in front of the server a ``scheme://[user@]host:port/...`` URL names."""
        parts = urlsplit(url)
        default = {"postgresql": 5432, "postgres": 5432, "mysql": 3306, "redis": 6379}
        return cls(parts.hostname or "127.0.0.1", parts.port or default[parts.scheme])

    def url_for(self, url: str) -> str:
        """``url`` with its host and port replaced by this proxy's."""
        parts = urlsplit(url)
        user = parts.netloc.rpartition("@")[0]
        netloc = f"{user}@127.0.0.1:{self.port}" if user else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def accept(self) -> None:
        while not self.closing.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # the listener was closed
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()  # the server is down: the client sees its connection end
                continue
            for sock in (client, server):
                sock.settimeout(SEND_TIMEOUT)  # recv only runs once select says ready
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pipe = _Pipe(self, client, server)
            with self.lock:
                self.stats.accepted += 1
                self.pipes = [p for p in self.pipes if p.thread.is_alive()]
                self.pipes.append(pipe)
            pipe.thread.start()

    def drop_reply(self, match: bytes, times: int = 1, *, after: bytes | None = None,
                   then: Callable[[], Any] | None = None) -> Rule:
        """Forward the next ``times`` client chunks holding ``match`` (on a connection
        that sent ``after`` first, when given), swallow the server's reply to each, run
        ``then``, and cut that connection. Returns the rule (its ``matched`` count)."""
        rule = Rule(match, after, times, then)
        with self.lock:
            self.rules.append(rule)
            self.longest = max(self.longest, len(match), len(after or b""))
        return rule

    def cut_on(self, match: bytes, times: int = 1, *, after: bytes | None = None) -> Rule:
        """Cut the connection of each of the next ``times`` client chunks holding
        ``match`` instead of sending it: the request never reaches the server, and the
        client cannot tell this from a lost reply."""
        rule = Rule(match, after, times, None, forward=False)
        with self.lock:
            self.rules.append(rule)
            self.longest = max(self.longest, len(match), len(after or b""))
        return rule

    def blackhole(self) -> None:
        """Stop moving bytes on every connection, without closing any."""
        self.healed.clear()
        self.holed.set()

    def heal(self) -> None:
        """Move bytes again (what the peers sent meanwhile goes through)."""
        self.holed.clear()
        self.healed.set()

    def cut_all(self) -> None:
        """Reset every open connection."""
        with self.lock:
            pipes = list(self.pipes)
        for pipe in pipes:
            pipe.close(reset=True)

    def close(self) -> None:
        """Cut every connection, stop every thread, and raise what a ``then`` raised."""
        self.closing.set()
        self.heal()
        with contextlib.suppress(OSError):
            self.listener.close()
        self.acceptor.join(5)
        self.cut_all()
        with self.lock:
            pipes = list(self.pipes)
        for pipe in pipes:
            pipe.thread.join(5)
        alive = [p for p in pipes if p.thread.is_alive()] + (
            [self.acceptor] if self.acceptor.is_alive() else [])
        assert not alive, f"netproxy: {len(alive)} threads did not stop"
        if self.stats.hook_errors:
            raise self.stats.hook_errors[0]

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
