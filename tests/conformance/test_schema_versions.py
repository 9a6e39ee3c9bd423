"""Schema versions: what a worker checks at start.

``schema_versions`` reads the newest migration recorded in the tables and the newest this
leaseq ships: equal after ``migrate``, the recorded one older when a migration is missing,
``SchemaMissing`` before any. Redis and memory keep no versions (None).
"""

from __future__ import annotations

import pytest

import leaseq
from tests.helpers import drop_tables, new_prefix


def test_a_migrated_schema_is_what_this_leaseq_needs(q):
    versions = q._schema_versions()
    if q.backend in ("redis", "memory"):
        assert versions is None
        return
    recorded, needed = versions
    assert recorded == needed >= 10


def test_tables_never_created_are_missing(q, url, backend):
    if q.backend in ("memory", "redis"):
        pytest.skip(f"{backend} has no tables to be missing")
    prefix = new_prefix()
    with (leaseq.connect(url, table_prefix=prefix) as fresh,
          pytest.raises(leaseq.SchemaMissing, match="leaseq migrate")):
        fresh._schema_versions()
    drop_tables(backend, prefix)
