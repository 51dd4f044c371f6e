# ruff: noqa: S608 - SQL text is built only from validated, quoted identifiers; values are bound.
"""The bulk import: a per-connection staging table, the threads' locks and one set-based insert."""

from __future__ import annotations

import functools

from ..._entry_fields import stage_types
from ._base import TableSql, quote, windows_of

__all__ = ["ImportSql"]


class ImportSql(TableSql):
    """The bulk import's statements for one table set."""

    @functools.cached_property
    def import_stage(self) -> str:
        """The bulk import's staging table (:data:`~prism_memory._entry_fields.STAGE_COLUMNS`, declared with the entry):
        temporary, one per connection, emptied at every commit, so a batch's binary ``COPY`` lands
        in a table no other session sees and that never outlives its transaction's rows."""
        columns = ", ".join(f"{name} {kind}" for name, kind in stage_types())
        return f"CREATE TEMP TABLE IF NOT EXISTS {self.stage} ({columns}) ON COMMIT DELETE ROWS"

    @functools.cached_property
    def import_begin(self) -> str:
        """How the bulk import's transaction begins: ``READ COMMITTED`` (it must see what the
        writer that held a thread's lock before it committed) and :attr:`import_stage`, in one
        round trip."""
        return f"BEGIN ISOLATION LEVEL READ COMMITTED; {self.import_stage}"

    @functools.cached_property
    def stage(self) -> str:
        """The staging table's name (in ``pg_temp``), derived from the entries table's."""
        return "pg_temp." + quote(self.entries.rsplit(".", 1)[-1].strip('"') + "_import")

    @functools.cached_property
    def lock_threads(self) -> str:
        """:attr:`lock_thread` for every thread of ``:keys`` (:func:`thread_lock_key`), in one
        order (sorted keys), so two imports sharing threads cannot deadlock."""
        return (
            "SELECT count(pg_advisory_xact_lock(hashtextextended(k, 0))) FROM "
            "(SELECT DISTINCT k FROM unnest(CAST(:keys AS text[])) AS u(k) ORDER BY k) AS s"
        )

    @functools.cached_property
    def import_insert(self) -> str:
        """The staged batch in one statement, run under :attr:`lock_threads`: :attr:`insert`'s
        rules for rows of many threads at once. Ids that exist are left out (one primary-key
        descent per staged row, :meth:`stored_key`); the new rows get their sequences per thread in staging order --
        an explicit one as given, otherwise one past the largest so far (the thread's, read on
        the ``(scope, sequence)`` index, or an earlier row's of the batch) -- and are inserted
        ``indexed`` where a vector came with them, else ``pending`` (unleased); tombstones an
        earlier, forgotten entry of the same id left behind are deleted. Returns how many rows
        were inserted, and how many of them pending."""
        key = ("tenant_id", "resource_id", "thread_id")
        partition = ", ".join(f"f.{c}" for c in key)
        before = (
            f"PARTITION BY {partition} ORDER BY f.ord "
            "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING"
        )
        same = " AND ".join(f"e.{c} = f.{c}" for c in key)
        return (
            f"WITH fresh AS (SELECT f.*, count(*) FILTER (WHERE f.sequence IS NULL) OVER w "
            f"AS autos FROM {self.stage} f WHERE NOT {self.stored_key(self.key_of('f'))} "
            f"WINDOW w AS ({before})), "
            f"tops AS (SELECT f.tenant_id, f.resource_id, f.thread_id, coalesce((SELECT "
            f"max(e.sequence) FROM {self.entries} e WHERE {same}), -1) AS v "
            "FROM (SELECT DISTINCT tenant_id, resource_id, thread_id FROM fresh) f), "
            "numbered AS (SELECT f.*, coalesce(f.sequence, f.autos + 1 + "
            "greatest(t.v, max(f.sequence - f.autos) OVER w)) AS seq FROM fresh f "
            "JOIN tops t USING (tenant_id, resource_id, thread_id) "
            f"WINDOW w AS ({before})), "
            f"inserted AS (INSERT INTO {self.entries} (tenant_id, resource_id, thread_id, id, "
            "text, role, metadata, consent_explicit, consent_source, consent_scope, "
            "consent_visible, consent_granted_at, consent_revoked_at, sequence, occurred_at, "
            "created_at, written_at, importance, legal_hold, status, revision, attempts, "
            "embedding, embedding_model, window_embeddings, text_tsv, term_count) "
            "SELECT n.tenant_id, n.resource_id, n.thread_id, n.id, n.text, n.role, n.metadata, "
            "n.consent_explicit, n.consent_source, n.consent_scope, n.consent_visible, "
            "n.consent_granted_at, n.consent_revoked_at, n.seq, n.occurred_at, "
            "CAST(:now AS timestamptz), CAST(:now AS timestamptz), n.importance, false, "
            "CASE WHEN n.embedding IS NULL THEN 'pending' ELSE 'indexed' END, 1, 0, "
            "n.embedding, CASE WHEN n.embedding IS NOT NULL THEN n.embedding_model END, "
            f"{windows_of('n.ord')}, "
            "array_to_tsvector(string_to_array(n.terms, ' ')), n.term_count "
            "FROM numbered n ORDER BY n.ord "
            "RETURNING tenant_id, resource_id, thread_id, id, status), "
            f"cleared AS (DELETE FROM {self.invalidation} t USING inserted i "
            "WHERE t.tenant_id = i.tenant_id AND t.resource_id = i.resource_id "
            "AND t.thread_id = i.thread_id AND t.entry_id = i.id) "
            "SELECT count(*) AS inserted, count(*) FILTER (WHERE status = 'pending') AS pending "
            "FROM inserted"
        )
