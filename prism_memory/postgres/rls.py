"""PostgreSQL row-level security on prism_memory's tenant-keyed tables: a second wall between
tenants, behind the ``tenant_id = :tenant`` every statement names.

Revision ``prism_memory_0014`` puts the policy ``prism_memory_tenant`` on every tenant-keyed table
(:func:`tenant_tables`); enabling it is the deploy's choice: :func:`set_row_level_security` (what
``prism-memory rls enable|disable`` and ``create_postgres_memory_stores(...,
row_level_security=True)`` run; ``ENABLE`` and ``FORCE``, so the tables' owner is held too) and
:func:`row_security_status` (``prism-memory rls status`` and ``doctor``). While it is enabled the
stores set the tenant of every tenant-scoped statement transaction-locally, in the statement's own
round trip (:mod:`prism_memory.postgres.statements.tenancy`). See docs/postgres.md, "Row-level
security".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ConfigurationError
from ._engine import create_engine
from ._errors import sqlstate_of
from ._executor import Executor, SessionUnit
from .statements.tenancy import (
    POLICY_NAME,
    RLS_TABLES,
    ROLE_BYPASSES,
    TENANT_POLICIES,
    alter_row_security,
)
from .tables import DEFAULT_SCHEMA, DEFAULT_TABLE, Names, names_for

__all__ = [
    "RowSecurityStatus",
    "TableSecurity",
    "open_row_security",
    "row_security_status",
    "row_security_url",
    "set_row_level_security",
    "tenant_tables",
]


def tenant_tables(names: Names) -> tuple[str, ...]:
    """The tables keyed by tenant, which carry the policy: every table the revisions own but the
    store-wide generations registry."""
    return tuple(name for name in names.tables if name != names.generations)


@dataclass(frozen=True, slots=True)
class TableSecurity:
    """One tenant-keyed table: ``has_policy`` (revision 0014 ran), ``enabled``, ``forced``."""

    name: str
    has_policy: bool
    enabled: bool
    forced: bool


@dataclass(slots=True)
class RowSecurityStatus:
    """What :func:`row_security_status` found: the connected role and each tenant-keyed table."""

    role: str
    superuser: bool
    bypassrls: bool
    tables: list[TableSecurity] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    """Tenant-keyed tables of the schema that do not exist (a schema before its revisions)."""

    @property
    def enabled(self) -> bool:
        """Every tenant-keyed table exists, has the policy, and has row-level security enabled
        and forced."""
        return (
            not self.missing
            and bool(self.tables)
            and all(t.has_policy and t.enabled and t.forced for t in self.tables)
        )

    @property
    def partly_enabled(self) -> bool:
        """Some table has row-level security enabled (then the stores must set the tenant)."""
        return any(t.enabled for t in self.tables)

    @property
    def exempt(self) -> bool:
        """The connected role bypasses every policy (a superuser, or ``BYPASSRLS``)."""
        return self.superuser or self.bypassrls

    def problems(self) -> list[str]:
        """Why row-level security does not protect these tables on this connection, one line
        each (empty: it does)."""
        found: list[str] = []
        no_policy = [t.name for t in self.tables if not t.has_policy]
        if no_policy:
            found.append(
                f"{len(no_policy)} tenant-keyed tables have no {POLICY_NAME} policy "
                f"({', '.join(no_policy)}): run `prism-memory migrate upgrade head`"
            )
        off = [t.name for t in self.tables if not (t.enabled and t.forced)]
        if off:
            found.append(
                f"row-level security is not enabled and forced on {len(off)} tenant-keyed tables "
                f"({', '.join(off)}): `prism-memory rls enable` turns it on"
            )
        if self.superuser:
            found.append(
                f"connected as {self.role}, a superuser: row-level security never applies to it "
                "(connect the application as a role without SUPERUSER and BYPASSRLS)"
            )
        elif self.bypassrls:
            found.append(
                f"connected as {self.role}, a role with BYPASSRLS: row-level security does not "
                "apply to it (right for a worker or operator role, not for the application)"
            )
        return found

    def describe(self) -> list[str]:
        """One line per table and one for the role (``prism-memory rls status``)."""
        lines = [
            f"{t.name}: policy {'yes' if t.has_policy else 'NO'}, "
            f"{'enabled' if t.enabled else 'disabled'}, {'forced' if t.forced else 'not forced'}"
            for t in self.tables
        ]
        lines.extend(f"{name}: table missing" for name in self.missing)
        exempt = "superuser" if self.superuser else "BYPASSRLS" if self.bypassrls else "held"
        lines.append(f"role {self.role}: {exempt}")
        return lines


async def row_security_status(unit: SessionUnit, names: Names) -> RowSecurityStatus:
    """The row-level security of ``names``' tenant-keyed tables and of the connected role."""
    (role,) = await unit.fetch(ROLE_BYPASSES)
    wanted = list(tenant_tables(names))
    rows = await unit.fetch(
        TENANT_POLICIES, {"schema": names.schema, "tables": wanted, "policy": POLICY_NAME}
    )
    tables = [
        TableSecurity(
            name=row["table_name"],
            has_policy=bool(row["has_policy"]),
            enabled=bool(row["enabled"]),
            forced=bool(row["forced"]),
        )
        for row in rows
    ]
    present = {t.name for t in tables}
    return RowSecurityStatus(
        role=str(role["role_name"]),
        superuser=bool(role["superuser"]),
        bypassrls=bool(role["bypassrls"]),
        tables=tables,
        missing=[name for name in wanted if name not in present],
    )


async def schema_tenant_tables(unit: SessionUnit, schema: str) -> list[str]:
    """Every table of ``schema`` with a ``tenant_id`` column, found in the catalog."""
    return await unit.column(RLS_TABLES, {"schema": schema})


async def set_row_level_security(
    unit: SessionUnit, names: Names, *, enable: bool
) -> RowSecurityStatus:
    """Enable (and force) or disable row-level security on every tenant-keyed table of
    ``names``, in the caller's transaction; returns the status after. Enabling needs the
    policies of revision ``prism_memory_0014`` (else :class:`ConfigurationError`, nothing
    changed) and the tables' owner (else :class:`ConfigurationError` naming what to do)."""
    before = await row_security_status(unit, names)
    if enable and (before.missing or not all(t.has_policy for t in before.tables)):
        raise ConfigurationError(
            "the tenant policies of revision prism_memory_0014 are missing: run "
            "`prism-memory migrate upgrade head` first (enabling row-level security without them "
            "would refuse every row)"
        )
    for table in before.tables:
        if table.enabled == enable and table.forced == enable:
            continue
        try:
            await unit.execute(alter_row_security(names.schema, table.name, enable=enable))
        except Exception as exc:
            if sqlstate_of(exc) == "42501":  # insufficient_privilege: not the owner
                raise ConfigurationError(
                    f"only the owner of {names.schema}.{table.name} (or a superuser) may turn "
                    "row-level security on or off: run `prism-memory rls` as the role that ran "
                    "the migrations"
                ) from None
            raise
    return await row_security_status(unit, names)


async def row_security_url(
    url: str, *, schema: str = DEFAULT_SCHEMA, table: str = DEFAULT_TABLE, enable: bool | None
) -> RowSecurityStatus:
    """``prism-memory rls``: enable (``True``), disable (``False``) or only report (``None``) row-
    level security on the schema's tenant-keyed tables, on one connection to ``url``."""
    names = names_for(schema, table)
    executor = Executor(create_engine(url, pooled=False), owns_engine=True)
    try:
        async with executor.unit("row_level_security", writes=enable is not None) as unit:
            if enable is None:
                return await row_security_status(unit, names)
            return await set_row_level_security(unit, names, enable=enable)
    finally:
        await executor.close()


async def open_row_security(
    executor: Executor, names: Names, wanted: bool | None
) -> tuple[bool, bool]:
    """The factories' ``row_level_security`` option: whether the stores must set the tenant of
    their statements, and whether the connected role is held by the policies. ``None`` follows
    the database (set it when a tenant-keyed table has row-level security enabled and the role is
    held by it); ``True`` enables it first where it is not (needs the tables' owner) and always
    sets it; ``False`` never sets it -- refused with :class:`ConfigurationError` when the tables
    enforce policies on the connected role, which would then read and write nothing."""
    async with executor.unit("row_level_security", writes=bool(wanted)) as unit:
        status = await row_security_status(unit, names)
        if wanted and not status.enabled:
            status = await set_row_level_security(unit, names, enable=True)
    held = status.partly_enabled and not status.exempt
    if wanted is False and held:
        raise ConfigurationError(
            "row_level_security=False, but the tables enforce row-level security on this role: "
            "the stores would find no rows (pass True or None, or connect as a BYPASSRLS role)"
        )
    return bool(wanted) or (wanted is None and held), held
