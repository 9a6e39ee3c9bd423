"""The DDL ``leaseq schema --dialect`` prints, for teams that own their migrations: every
migration in order, then the SQL enqueue entry where the dialect has one."""

from __future__ import annotations

from leaseq.backends._sql.plan import load_migrations

PACKAGES = {
    "postgres": "leaseq.backends.postgres",
    "mysql": "leaseq.backends.mysql",
    "sqlite": "leaseq.backends.sqlite",
}
"""Dialect name (``leaseq schema --dialect``) to the package holding its migrations."""


def ddl(dialect: str, table_prefix: str) -> str:
    """The schema of ``dialect`` under ``table_prefix``, as one script a database's own
    client runs (statements end in ``;``; MySQL's procedure between ``DELIMITER`` lines,
    since the mysql client splits at ``;`` unless told otherwise)."""
    parts: list[str] = []
    for version, name, statements in load_migrations(PACKAGES[dialect], table_prefix):
        parts.append(f"-- leaseq migration {version:04d}_{name} ({dialect})")
        parts.extend(sql.rstrip() + ";\n" for sql in statements)
    if dialect != "sqlite":
        parts.append(_routine(dialect, table_prefix))
    return "\n".join(parts)


def _routine(dialect: str, table_prefix: str) -> str:
    from leaseq.backends._sql.routine import ROUTINE_SIGNATURE, routine_text

    text, mark = routine_text(dialect, table_prefix)
    head = (f"-- leaseq's SQL enqueue entry, {table_prefix}enqueue "
            "(docs/enqueue-from-sql-and-http.md)")
    if dialect == "mysql":
        return f"{head}\nDELIMITER //\n{text}\n//\nDELIMITER ;\n"
    return (f"{head}\n{text};\n\n"
            f"COMMENT ON FUNCTION {table_prefix}enqueue{ROUTINE_SIGNATURE} IS '{mark}';\n")
