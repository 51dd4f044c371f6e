# ruff: noqa: S608 - SQL text is built only from validated, quoted identifiers; values are bound.
"""Lineage and tombstones: the tombstones new rows inherit, the lineage sources of a write and the
dependents of a governance walk."""

from __future__ import annotations

import functools

from ._base import TableSql

__all__ = ["LineageSql"]


class LineageSql(TableSql):
    """Statements over the lineage of entries and their tombstones, for one table set."""

    @functools.cached_property
    def inherit(self) -> str:
        """Store the tombstones new rows inherit from their lineage sources."""
        return (
            f"INSERT INTO {self.invalidation} "
            "(tenant_id, resource_id, thread_id, entry_id, cause_id, reason, created_at) "
            "SELECT :tenant, :resource, :thread, t.entry_id, t.cause_id, t.reason, t.created_at "
            "FROM unnest(CAST(:entries AS text[]), CAST(:causes AS text[]), "
            "CAST(:reasons AS text[]), CAST(:times AS timestamptz[])) "
            "AS t(entry_id, cause_id, reason, created_at) ON CONFLICT DO NOTHING"
        )

    @functools.cached_property
    def lineage_sources(self) -> str:
        """Those of ``:ids`` that exist as entries of the thread, each with its tombstones (one row
        per tombstone; ``cause_id`` null for none), each id once (:meth:`stored_of_ids`)."""
        key = self.key_of("e")
        return (
            f"SELECT e.id, t.cause_id, t.reason, t.created_at FROM (SELECT {key} "
            f"{self.stored_of_ids(key)}) AS e LEFT JOIN {self.invalidation} t "
            "ON t.tenant_id = e.tenant_id AND t.resource_id = e.resource_id "
            "AND t.thread_id = e.thread_id AND t.entry_id = e.id"
        )

    @functools.cached_property
    def dependents(self) -> str:
        """Rows whose lineage names any of ``:ids`` (served by the lineage GIN index)."""
        lineage = "((e.metadata -> '_lineage'::text) -> 'sourceIds'::text)"
        return (
            f"SELECT e.id, {lineage} AS sources FROM {self.entries} e "
            "WHERE e.tenant_id = :tenant AND e.resource_id = :resource AND e.thread_id = :thread "
            f"AND {lineage} ?| CAST(:ids AS text[]) ORDER BY e.id LIMIT :limit"
        )
