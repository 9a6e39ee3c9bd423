"""The last ended lease of a job: how ``nack``, ``release``, ``snooze`` and ``bury``
record themselves, and what a repeat of one returns.

A lease ends once: by its holder's ``ack`` (the job goes to history as ``completed``), or
its ``nack``, ``release``, ``snooze`` or ``bury``, or by ``reclaim`` when it expired. Every backend
keeps, with the job, the token of the last lease that ended and how (``ended_token`` and
``ended_as``: two columns of ``jobs`` and ``history`` on SQL, two fields of the job's hash
on Redis, two fields of the memory row), written by the statement that ends the lease. A
claim leaves them alone, so while the next lease runs they still name the one before.

A call of ``nack``, ``release``, ``snooze`` or ``bury`` whose lease no longer holds the job is a
repeat of the call that ended that lease (its first reply lost, design §62) when the
job's last ended lease is that very lease and that verb ended it: it returns what the
first call returned and changes nothing. Anything else, ``LeaseLost``. A completed job's
last lease is the one that acked it, so its record names no repeatable lease.
"""

from __future__ import annotations

from typing import Literal, cast

from leaseq._core.job import JobState

Verb = Literal["nack", "release", "snooze", "bury"]
EXPIRED = "expired"
"""``ended_as`` of a lease that ran out and was reclaimed: no holder call to repeat."""


def ended_as(verb: Verb, state: JobState) -> str:
    """The record of a lease that ``verb`` ended, leaving the job ``state`` (what ``nack``
    ``release`` and ``snooze`` returned; ``dead`` for ``bury``): ``"nack:scheduled"``,
    ... The longest, ``"release:scheduled"``, is 17 characters."""
    return f"{verb}:{state}"


def repeated(
    verb: Verb, token: int, ended_token: int | str | None, ended: str | None
) -> JobState | None:
    """What the first call of ``verb`` by lease ``token`` returned, when the job's last
    ended lease (``ended_token``, ``ended``, as stored; None for none) is that lease and
    ``verb`` ended it; None when it is not (the call is stale: ``LeaseLost``)."""
    if ended_token is None or ended is None or int(ended_token) != token:
        return None
    done, _, state = ended.partition(":")
    return cast(JobState, state) if done == verb and state else None
