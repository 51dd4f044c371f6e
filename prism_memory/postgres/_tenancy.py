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

from typing import Any

from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import ORMExecuteState

from .statements.tenancy import SET_TENANT, tenant_of

__all__ = ["statement_tenant", "watch"]

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
