"""In-process wake-ups: a worker hears at once when its own process enqueues.

Clients call ``notify`` after an enqueue; workers ``subscribe`` for the database and
table prefix they serve. Nothing crosses process boundaries here: other processes are
woken by PostgreSQL NOTIFY or by their next poll.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

Callback = Callable[[Sequence[str]], None]
_subscribers: dict[tuple[str, str], list[Callback]] = {}
_lock = threading.Lock()


def key(url: str, prefix: str) -> tuple[str, str]:
    return url, prefix


def subscribe(where: tuple[str, str], callback: Callback) -> Callable[[], None]:
    """Call ``callback(queues)`` after each local enqueue to ``where``; returns an
    unsubscribe function."""
    with _lock:
        _subscribers.setdefault(where, []).append(callback)

    def unsubscribe() -> None:
        with _lock:
            callbacks = _subscribers.get(where, [])
            if callback in callbacks:
                callbacks.remove(callback)

    return unsubscribe


def notify(where: tuple[str, str], queues: Sequence[str]) -> None:
    callbacks = _subscribers.get(where)
    if callbacks:
        for callback in list(callbacks):
            callback(queues)
