"""A dead router for tests (S7, half-open connections): a process in a network namespace
of its own reaches a server on this host's loopback through a router namespace that can
be told to drop every packet, silently, both ways.

Why not just the userspace proxy (``tests/netproxy.py``)? When a proxy stops forwarding,
its own kernel still ACKs what the client sends and answers the client's keepalive
probes: TCP keepalives and ``tcp_user_timeout`` can never fire through it, only
application-level read timeouts. Here the packets vanish in a hop between the two
kernels, as behind a dead router or a firewall that lost its state: neither endpoint
gets an ACK, an RST or an ICMP error, so the client's kernel sees exactly what it would
see in production.

Layout (three namespaces, addresses only inside them, all removed by ``close``)::

    client (W) 10.X.Y.1 --veth-- 10.X.Y.2 router (R) 10.X.Y.5 --veth-- 10.X.Y.6 proxy (P)

The proxy's listening socket lives in P (made there with ``setns`` from a short-lived
thread), while the proxy itself runs in this process and forwards each connection to the
real server on 127.0.0.1. ``blackhole()`` puts a ``tbf`` qdisc with a 1-byte bucket on
both of R's interfaces: every packet is larger than the bucket, so R drops it (netem is
the usual tool, but this machine's kernel has no ``sch_netem``; a drop in the client's or
server's own qdisc would not do either, since TCP counts a local drop as congestion and
keeps probing without counting the probe as lost). ``heal()`` removes it.

Needs root (``ip netns``, ``tc``: iproute2). ``run(argv)`` gives the argv that runs a
command inside W; ``url_for(url)`` the URL that reaches the server through the router.
"""

from __future__ import annotations

import ctypes
import os
import random
import shutil
import socket
import subprocess
import threading
from urllib.parse import urlsplit, urlunsplit

from tests.netproxy import Proxy

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def available() -> str | None:
    """Why a dead router cannot be made here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"needs {tool} (iproute2)"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, timeout=30)


def _listen_in(ns: str, host: str) -> socket.socket:
    """A listening TCP socket on ``host`` inside namespace ``ns``. A socket belongs to the
    namespace it was made in, for life, so a thread switches there, makes it, and ends."""
    made: list[socket.socket | BaseException] = []

    def make() -> None:
        try:
            with open(f"/var/run/netns/{ns}") as target:
                if _libc.setns(target.fileno(), CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns({ns})")
            made.append(socket.create_server((host, 0)))
        except BaseException as exc:  # reported to the caller below
            made.append(exc)

    # The thread's namespace dies with it; the process's own threads are untouched.
    thread = threading.Thread(target=make, name="netns-listen")
    thread.start()
    thread.join(10)
    result = made[0]
    if isinstance(result, BaseException):
        raise result
    return result


class DeadRouter:
    """See the module docstring. ``target``: the server on this host's loopback."""

    def __init__(self, target_host: str, target_port: int) -> None:
        tag = f"{os.getpid() % 10000}{random.randrange(100):02d}"
        self.w, self.r, self.p = f"lqw{tag}", f"lqr{tag}", f"lqp{tag}"
        net = random.randrange(1, 250)
        sub = random.randrange(0, 63) * 4
        self.base = f"10.{200 + net % 50}.{sub // 4}"
        self.addr_w, self.addr_rw = f"{self.base}.1", f"{self.base}.2"
        self.addr_rp, self.addr_p = f"{self.base}.5", f"{self.base}.6"
        self.holed = False
        self.proxy: Proxy | None = None
        try:
            self._build()
            listener = _listen_in(self.p, self.addr_p)
            self.proxy = Proxy(target_host, target_port, listener=listener)
        except BaseException:
            self.close()
            raise

    @classmethod
    def for_url(cls, url: str) -> DeadRouter:
        parts = urlsplit(url)
        default = {"postgresql": 5432, "postgres": 5432, "mysql": 3306, "redis": 6379}
        return cls(parts.hostname or "127.0.0.1", parts.port or default[parts.scheme])

    def _build(self) -> None:
        for ns in (self.w, self.r, self.p):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", self.w, "link", "add", "w0", "type", "veth", "peer", "name", "rw0",
            "netns", self.r)
        _ip("-n", self.p, "link", "add", "p0", "type", "veth", "peer", "name", "rp0",
            "netns", self.r)
        for ns, dev, addr in ((self.w, "w0", self.addr_w), (self.r, "rw0", self.addr_rw),
                              (self.r, "rp0", self.addr_rp), (self.p, "p0", self.addr_p)):
            _ip("-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
        _ip("-n", self.w, "route", "add", "default", "via", self.addr_rw)
        _ip("-n", self.p, "route", "add", "default", "via", self.addr_rp)
        subprocess.run(["ip", "netns", "exec", self.r, "sysctl", "-qw",
                        "net.ipv4.ip_forward=1"], check=True, capture_output=True, timeout=30)

    def run(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the client namespace (``ip netns exec`` execs it: the
        process's pid is the command's)."""
        return ["ip", "netns", "exec", self.w, *argv]

    def url_for(self, url: str) -> str:
        """``url`` with its host and port replaced by the proxy's, behind the router."""
        assert self.proxy is not None
        parts = urlsplit(url)
        user = parts.netloc.rpartition("@")[0]
        where = f"{self.addr_p}:{self.proxy.port}"
        return urlunsplit(parts._replace(netloc=f"{user}@{where}" if user else where))

    def blackhole(self) -> None:
        """Every packet through the router is dropped from now on, both ways."""
        for dev in ("rw0", "rp0"):
            subprocess.run(["tc", "-n", self.r, "qdisc", "replace", "dev", dev, "root", "tbf",
                            "rate", "1kbit", "burst", "1", "latency", "1ms"],
                           check=True, capture_output=True, timeout=30)
        self.holed = True

    def heal(self) -> None:
        """Packets flow again; what the endpoints retransmit gets through."""
        for dev in ("rw0", "rp0"):
            subprocess.run(["tc", "-n", self.r, "qdisc", "del", "dev", dev, "root"],
                           check=False, capture_output=True, timeout=30)
        self.holed = False

    def close(self) -> None:
        """Stops the proxy and removes the namespaces (their veths go with them)."""
        try:
            if self.proxy is not None:
                self.heal()
                self.proxy.close()
        finally:
            for ns in (self.w, self.r, self.p):
                _ip("netns", "del", ns, check=False)

    def __enter__(self) -> DeadRouter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
