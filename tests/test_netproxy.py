"""The fault proxy itself (tests/netproxy.py), against a real Redis: a black hole is
silence without a close, healing delivers what waited, a cut resets, and ``close``
leaves no thread behind."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.conftest import require
from tests.helpers import REDIS_URL, wait_for
from tests.netproxy import Proxy


def ping(sock: socket.socket) -> bytes:
    sock.sendall(b"PING\r\n")
    return sock.recv(100)


def test_blackhole_is_silence_without_a_close_and_heal_delivers_what_waited() -> None:
    require("redis")
    before = {t.ident for t in threading.enumerate()}
    proxy = Proxy.for_url(REDIS_URL)
    try:
        sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        assert ping(sock) == b"+PONG\r\n"
        proxy.blackhole()
        sock.settimeout(0.3)
        sock.sendall(b"PING\r\n")
        began = time.monotonic()
        with pytest.raises(TimeoutError):  # no reply, and no FIN or RST either
            sock.recv(100)
        assert time.monotonic() - began >= 0.25
        late = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        late.settimeout(0.3)
        with pytest.raises(TimeoutError):  # a new connection is held the same way
            ping(late)
        proxy.heal()
        sock.settimeout(5)
        late.settimeout(5)
        assert sock.recv(100) == b"+PONG\r\n"  # the PING sent into the hole arrives
        assert late.recv(100) == b"+PONG\r\n"
        proxy.cut_all()
        sock.settimeout(5)
        with pytest.raises((ConnectionResetError, BrokenPipeError)):  # an RST, not a FIN
            ping(sock)
        assert proxy.stats.cuts == 2 and proxy.stats.accepted == 2
        sock.close()
        late.close()
    finally:
        proxy.close()
    wait_for(lambda: {t.ident for t in threading.enumerate()} <= before, timeout=5,
             message="every proxy thread ended")


def test_a_rule_that_never_matches_drops_nothing() -> None:
    require("redis")
    with Proxy.for_url(REDIS_URL) as proxy:
        rule = proxy.drop_reply(b"NEVER-SENT")
        sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        assert ping(sock) == b"+PONG\r\n"
        sock.close()
        assert (rule.matched, proxy.stats.replies_dropped, rule.times) == (0, 0, 1)
