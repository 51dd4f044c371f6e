"""The tenant of a SQLAlchemy session unit's statements, with row-level security on.

The executor's own statements name their tenant in their parameters (``:tenant``) and set it in
their own round trip (:mod:`prism_memory.postgres.statements.tenancy`). A session unit runs the
repositories' Core and ORM statements (governance, the working document, share grants, the RAG
operations) whose tenant is a bound value of their own: :func:`watch` finds it in each statement
before it runs -- a ``tenant_id`` bind, a ``:tenant`` parameter, or the first primary-key value of
``session.get`` (every primary key but the generations registry's leads with ``tenant_id``) -- and
sets it transaction-locally first when the unit has not set it yet (one more round trip per unit,
not per statement). A statement that names no tenant (a catalog read, a store-wide statement) runs
as it is: under the policies it sees no tenant's rows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import ORMExecuteState

from ..errors import ConfigurationError
from .statements.catalog import CUSTOM_PLANS
from .statements.tenancy import SET_TENANT, one_select, tenant_of

__all__ = ["TenantScoping", "per_tenant", "statement_tenant", "unit_settings", "watch"]

_SET = "prism_memory_tenant"
"""``session.info`` key: the tenant the unit's transaction has set."""


def statement_tenant(state: ORMExecuteState) -> str | None:
    """The one tenant a statement of a session names, or ``None``."""
    params: Any = state.parameters
    if isinstance(params, dict):
        found = tenant_of(params) or _tenant_bind(params)
        if found is not None:
            return found
    statement: Any = state.statement
    compiled = statement.compile(dialect=state.session.get_bind().dialect)
    return _tenant_bind(compiled.params)


def _tenant_bind(params: dict[str, Any]) -> str | None:
    values = {
        value
        for name, value in params.items()
        if isinstance(value, str)
        and (name == "tenant_id" or name.startswith("tenant_id_") or name == "pk_1")
    }
    return values.pop() if len(values) == 1 else None


def watch(session: AsyncSession, tenant: str | None) -> None:
    """Set the tenant of each statement of ``session`` before it runs (see the module
    docstring); ``tenant``: the one the unit already set, if any."""
    sync = session.sync_session
    sync.info[_SET] = tenant

    def before(state: ORMExecuteState) -> None:
        if state.execution_options.get(_SET):
            return  # the setting itself
        found = statement_tenant(state)
        if found is None or sync.info.get(_SET) == found:
            return
        state.session.execute(
            text(SET_TENANT), {"rls_tenant": found}, execution_options={_SET: True}
        )
        sync.info[_SET] = found

    event.listen(sync, "do_orm_execute", before)


async def unit_settings(
    session: AsyncSession, custom_plans: bool, tenant: str | None, watched: bool
) -> None:
    """A unit's transaction-local settings in one statement: custom plans, the tenant; and,
    ``watched`` (row-level security on), each statement's tenant set before it runs."""
    if watched:
        watch(session, tenant)
    parts = ([CUSTOM_PLANS] if custom_plans else []) + ([SET_TENANT] if tenant else [])
    if parts:
        await session.execute(text(one_select(parts)), {"rls_tenant": tenant} if tenant else {})


async def per_tenant(
    each: list[dict[str, Any]],
    run: Callable[[dict[str, Any]], Awaitable[Sequence[Any]]],
    *,
    count: bool = False,
) -> list[Any]:
    """``run`` once per tenant's parameters (:meth:`TenantScoping.split`): the rows of all, or
    with ``count`` the sum of the one-item counts."""
    done = [await run(one) for one in each]
    return [sum(part[0] for part in done)] if count else [row for part in done for row in part]


class TenantScoping:
    """An executor's book for statements that name no single tenant, with row-level security on
    (a transaction may act for one tenant only):

    * a statement over several tenants' rows (``:tenants``: a claim over many threads, the
      results of a batch, a lookup of many keys) runs once per tenant, each run seeing that
      tenant's rows only (:meth:`split`; a claim's ``:limit`` then applies per tenant);
    * a statement keyed by a lease owner alone (``:worker``: releasing its leases) runs once per
      tenant that owner leased rows in through this executor (:meth:`note`).

    ``held``: the connected role is held by the policies (neither superuser nor ``BYPASSRLS``),
    so store-wide work -- the generations' backfill, progress, switch and promotion -- is refused
    (:meth:`refuse_store_wide`) rather than run blind to every tenant but none.
    """

    __slots__ = ("held", "leases")

    def __init__(self) -> None:
        self.held = False
        self.leases: dict[str, set[str]] = {}

    def note(self, params: Mapping[str, Any] | None) -> None:
        """Remember the tenants a statement leased rows in for its ``:worker``."""
        if not params or not isinstance(params.get("worker"), str):
            return
        tenant = tenant_of(params)
        tenants = [tenant] if tenant is not None else params.get("tenants") or []
        if tenants:
            self.leases.setdefault(params["worker"], set()).update(tenants)

    def noted(self, params: Mapping[str, Any] | None) -> str | None:
        """The one tenant ``params`` name (:func:`tenant_of`), its lease noted (:meth:`note`)."""
        tenant = tenant_of(params)
        if tenant is not None:
            self.note(params)
        return tenant

    def split(self, params: Mapping[str, Any] | None) -> list[dict[str, Any]] | None:
        """The per-tenant parameters of a statement that must run once per tenant, or ``None``:
        the same arrays every time, each run for one of their tenants (the policies keep each
        run to its tenant's rows, so positions -- ``WITH ORDINALITY`` -- stay those of the
        whole arrays)."""
        if not params or isinstance(params.get("tenant"), str):
            return None
        tenants = params.get("tenants")
        if isinstance(tenants, list | tuple) and len(set(tenants)) > 1:
            return [{**params, "tenant": t} for t in sorted(set(tenants))]
        worker = params.get("worker")
        if tenants is None and isinstance(worker, str) and worker in self.leases:
            return [{**params, "tenant": t} for t in sorted(self.leases.pop(worker))]
        return None

    def refuse_store_wide(self, action: str) -> None:
        """Raise :class:`ConfigurationError` when the role is held by the policies."""
        if self.held:
            raise ConfigurationError(
                f"{action} reads every tenant's rows, and row-level security holds this role to "
                "one tenant: run it as a role with BYPASSRLS (docs/postgres.md, "
                '"Row-level security")'
            )
