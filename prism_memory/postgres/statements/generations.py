# ruff: noqa: S608 - SQL text is built only from validated, quoted identifiers; values are bound.
"""Vector generations (revision ``prism_memory_0011``): the registry of embedding models, the
backfill claims and kept vectors of a model, its progress, the switch, the promotion and the drop.

An entry's vector of a model is its own ``embedding`` when it records that model
(:meth:`~._base.TableSql.own_vector_of`), else the one kept for it in the vectors table, *current*
when it holds a vector (``embedding IS NOT NULL``) of the entry's current ``revision``; only
current vectors count, are ranked, or make a switch ready (:meth:`~._base.TableSql.current_vector`).
"""

from __future__ import annotations

import functools

from ._base import TableSql

__all__ = ["GenerationSql"]

_GENERATION = "model, width, role, active, started_at, switched_at"


class GenerationSql(TableSql):
    """The statements of the vector generations of one table set."""

    @functools.cached_property
    def registry(self) -> str:
        """Every registered generation, the primary first (a table of a row or two)."""
        return (
            f"SELECT {_GENERATION} FROM {self.generations} "
            "ORDER BY role = 'shadow', started_at, model"
        )

    @functools.cached_property
    def lock_registry(self) -> str:
        """Serialise registrations (``start_generation``) without blocking readers."""
        return f"LOCK TABLE {self.generations} IN SHARE ROW EXCLUSIVE MODE"

    @functools.cached_property
    def register(self) -> str:
        """Register a generation unless its model is (the caller checked the rest under
        :attr:`lock_registry`)."""
        return (
            f"INSERT INTO {self.generations} ({_GENERATION}) "
            "VALUES (CAST(:model AS text), CAST(:width AS integer), CAST(:role AS text), "
            "CAST(:active AS boolean), CAST(:now AS timestamptz), NULL) "
            "ON CONFLICT (model) DO NOTHING"
        )

    @functools.lru_cache(maxsize=2)  # noqa: B019 - bounded
    def claim(self, *, after: bool) -> str:
        """Lease up to ``:limit`` indexed entries, in key order (after the cursor ``:after_*``
        with ``after``), whose own vector is of another model, that hold no current vector of
        ``:model`` beside it either and whose vector row is not
        leased unexpired: a walk of the entries' primary key with one probe of the vectors' per
        row. The entries are locked ``FOR NO KEY UPDATE SKIP LOCKED`` (a concurrent claimer
        skips them instead of waiting) and the lease is an ``INSERT ... ON CONFLICT DO UPDATE``
        that only takes a vector row whose lease has expired and which is not current, checked
        again on the row the conflict found: two workers never both hold one ``(entry, model)``.
        """
        cursor = (
            "AND ROW(e.tenant_id, e.resource_id, e.thread_id, e.id) > ROW(CAST(:after_tenant AS "
            "text), CAST(:after_resource AS text), CAST(:after_thread AS text), "
            "CAST(:after_id AS text)) "
            if after
            else ""
        )
        return (
            "WITH due AS (SELECT e.tenant_id, e.resource_id, e.thread_id, e.id, e.revision, "
            f"e.text, e.sequence FROM {self.entries} e WHERE e.status = 'indexed' {cursor}"
            f"AND NOT {self.own_vector_of('e')} AND NOT EXISTS (SELECT 1 FROM {self.vectors} v WHERE v.tenant_id = e.tenant_id "
            "AND v.resource_id = e.resource_id AND v.thread_id = e.thread_id "
            "AND v.entry_id = e.id AND v.model = CAST(:model AS text) "
            "AND ((v.revision = e.revision AND v.embedding IS NOT NULL) "
            "OR v.claimed_until > CAST(:now AS timestamptz))) "
            "ORDER BY e.tenant_id, e.resource_id, e.thread_id, e.id LIMIT :limit "
            "FOR NO KEY UPDATE OF e SKIP LOCKED), "
            f"leased AS (INSERT INTO {self.vectors} AS w (tenant_id, resource_id, thread_id, "
            "entry_id, model, revision, embedding, claimed_by, claimed_until) "
            "SELECT tenant_id, resource_id, thread_id, id, CAST(:model AS text), revision, NULL, "
            "CAST(:worker AS text), CAST(:until AS timestamptz) FROM due "
            "ON CONFLICT (tenant_id, resource_id, thread_id, entry_id, model) DO UPDATE SET "
            "claimed_by = excluded.claimed_by, claimed_until = excluded.claimed_until "
            "WHERE (w.claimed_until IS NULL OR w.claimed_until <= CAST(:now AS timestamptz)) "
            "AND (w.embedding IS NULL OR w.revision <> excluded.revision) "
            "RETURNING w.tenant_id, w.resource_id, w.thread_id, w.entry_id, w.claimed_until) "
            "SELECT d.tenant_id, d.resource_id, d.thread_id, d.id, d.revision, d.text, "
            "0 AS attempts, d.sequence, l.claimed_until FROM due d JOIN leased l "
            "ON l.tenant_id = d.tenant_id AND l.resource_id = d.resource_id "
            "AND l.thread_id = d.thread_id AND l.entry_id = d.id "
            "ORDER BY d.tenant_id, d.resource_id, d.thread_id, d.id"
        )

    @functools.cached_property
    def store(self) -> str:
        """Store each item's vector of ``:model`` where its entry still has the item's revision
        and its own vector is of another model (one primary-key probe per item), replacing the
        vector of the model kept for the entry and releasing its lease; the lease of an item
        whose entry has another revision now is released too (``released``). The statement's
        row count is the insert's: the vectors stored."""
        items = (
            "unnest(CAST(:tenants AS text[]), CAST(:resources AS text[]), "
            "CAST(:threads AS text[]), CAST(:ids AS text[]), CAST(:revisions AS integer[]))"
        )
        # an item whose entry has another revision now (its text changed) is not stored, and
        # its lease -- taken for the old text -- goes, so the entry is claimed again at once
        released = (
            f"WITH released AS (UPDATE {self.vectors} AS r SET claimed_by = NULL, "
            f"claimed_until = NULL FROM {items} AS i(tenant_id, resource_id, thread_id, id, "
            "revision) WHERE r.tenant_id = i.tenant_id AND r.resource_id = i.resource_id "
            "AND r.thread_id = i.thread_id AND r.entry_id = i.id "
            "AND r.model = CAST(:model AS text) AND r.claimed_until IS NOT NULL "
            f"AND NOT EXISTS (SELECT 1 FROM {self.entries} e WHERE e.tenant_id = i.tenant_id "
            "AND e.resource_id = i.resource_id AND e.thread_id = i.thread_id AND e.id = i.id "
            "AND e.revision = i.revision) RETURNING 1) "
        )
        return (
            f"{released}INSERT INTO {self.vectors} AS w (tenant_id, resource_id, thread_id, "
            "entry_id, model, revision, embedding, claimed_by, claimed_until) "
            "SELECT e.tenant_id, e.resource_id, e.thread_id, e.id, CAST(:model AS text), "
            "e.revision, i.embedding, NULL, NULL "
            "FROM unnest(CAST(:tenants AS text[]), CAST(:resources AS text[]), "
            "CAST(:threads AS text[]), CAST(:ids AS text[]), CAST(:revisions AS integer[]), "
            "CAST(:embeddings AS vector[])) "
            "AS i(tenant_id, resource_id, thread_id, id, revision, embedding) "
            f"JOIN {self.entries} e ON e.tenant_id = i.tenant_id "
            "AND e.resource_id = i.resource_id AND e.thread_id = i.thread_id AND e.id = i.id "
            f"AND e.revision = i.revision AND NOT {self.own_vector_of('e')} "
            "ON CONFLICT (tenant_id, resource_id, thread_id, entry_id, model) DO UPDATE SET "
            "revision = excluded.revision, embedding = excluded.embedding, "
            "claimed_by = NULL, claimed_until = NULL"
        )

    @functools.cached_property
    def progress(self) -> str:
        """The role of ``:model`` (NULL: not registered), the indexed entries, how many hold a
        current vector of it, and how many more have a vector row of it leased unexpired
        (whole-table counts)."""
        current = self.current_vector("e")
        return (
            f"SELECT (SELECT role FROM {self.generations} WHERE model = CAST(:model AS text)) "
            f"AS role, (SELECT count(*) FROM {self.entries} WHERE status = 'indexed') AS entries, "
            f"(SELECT count(*) FROM {self.entries} e WHERE e.status = 'indexed' AND {current}) "
            f"AS current, (SELECT count(*) FROM {self.entries} e JOIN {self.vectors} v "
            "ON v.tenant_id = e.tenant_id AND v.resource_id = e.resource_id "
            "AND v.thread_id = e.thread_id AND v.entry_id = e.id "
            "AND v.model = CAST(:model AS text) "
            f"WHERE e.status = 'indexed' AND NOT {current} "
            "AND v.claimed_until > CAST(:now AS timestamptz)) AS leased"
        )

    @functools.cached_property
    def switch(self) -> str:
        """Make ``:model`` the active generation, in one statement: ``missing`` counts the
        indexed entries without a current vector of it in the statement's snapshot written at or
        before ``:horizon`` (all of them when it is NULL), ``recent`` those written after it,
        and the flip happens only when ``missing`` is 0 or ``:force``. The old active row is
        switched off first (``off``, which the flip's condition reads, so it runs to its end
        before): the unique partial index on ``active`` never sees two active rows. One row:
        ``found`` (0: not registered), ``missing``, and the generation as it is now when the
        flip happened (NULL columns when refused)."""
        return (
            f"WITH target AS (SELECT model, role FROM {self.generations} "
            "WHERE model = CAST(:model AS text)), "
            "missing AS (SELECT count(*) FILTER (WHERE CAST(:horizon AS timestamptz) IS NULL "
            "OR e.written_at <= CAST(:horizon AS timestamptz)) AS n, count(*) AS every "
            f"FROM {self.entries} e WHERE e.status = 'indexed' "
            f"AND EXISTS (SELECT 1 FROM target) AND NOT {self.current_vector('e')}), "
            "go AS (SELECT 1 FROM target WHERE CAST(:force AS boolean) "
            "OR (SELECT n FROM missing) = 0), "
            f"off AS (UPDATE {self.generations} SET active = false "
            "WHERE active AND model <> CAST(:model AS text) AND EXISTS (SELECT 1 FROM go) "
            "RETURNING model), "
            f"flipped AS (UPDATE {self.generations} SET active = true, switched_at = CASE "
            "WHEN active THEN switched_at ELSE CAST(:now AS timestamptz) END "
            "WHERE model = CAST(:model AS text) AND EXISTS (SELECT 1 FROM go) "
            f"AND (SELECT count(*) FROM off) >= 0 RETURNING {_GENERATION}) "
            "SELECT (SELECT count(*) FROM target) AS found, (SELECT n FROM missing) AS missing, "
            "(SELECT every - n FROM missing) AS recent, "
            "f.model, f.width, f.role, f.active, f.started_at, f.switched_at "
            "FROM (SELECT 1) AS one LEFT JOIN flipped f ON true"
        )

    @functools.cached_property
    def promote(self) -> str:
        """Swap up to ``:limit`` indexed entries' vectors, in key order: those whose own vector
        is of another model and that hold a current vector of ``:model`` beside it (locked
        ``FOR NO KEY UPDATE SKIP LOCKED``, so a writer of the row is never waited for). The own
        vector is kept under its model (``kept``; one that records none, under the primary's),
        the vector of ``:model`` becomes the entry's own (``moved``) and its row beside the
        entry goes (``cleared``); the revision, status and text stay. One row: how many moved.
        """
        return (
            f"WITH primary_model AS (SELECT model FROM {self.generations} "
            "WHERE role = 'primary'), "
            "moving AS (SELECT e.tenant_id, e.resource_id, e.thread_id, e.id, e.revision, "
            "e.embedding AS own, COALESCE(e.embedding_model, (SELECT model FROM primary_model)) "
            f"AS own_model, v.embedding AS promoted FROM {self.entries} e "
            f"JOIN {self.vectors} v ON v.tenant_id = e.tenant_id "
            "AND v.resource_id = e.resource_id AND v.thread_id = e.thread_id "
            "AND v.entry_id = e.id AND v.model = CAST(:model AS text) "
            "AND v.revision = e.revision AND v.embedding IS NOT NULL "
            f"WHERE e.status = 'indexed' AND NOT {self.own_vector_of('e')} "
            "ORDER BY e.tenant_id, e.resource_id, e.thread_id, e.id LIMIT :limit "
            "FOR NO KEY UPDATE OF e SKIP LOCKED), "
            f"kept AS (INSERT INTO {self.vectors} AS w (tenant_id, resource_id, thread_id, "
            "entry_id, model, revision, embedding, claimed_by, claimed_until) "
            "SELECT tenant_id, resource_id, thread_id, id, own_model, revision, own, NULL, NULL "
            f"FROM moving WHERE own IS NOT NULL AND own_model IN (SELECT model FROM "
            f"{self.generations}) "
            "ON CONFLICT (tenant_id, resource_id, thread_id, entry_id, model) DO UPDATE SET "
            "revision = excluded.revision, embedding = excluded.embedding, "
            "claimed_by = NULL, claimed_until = NULL RETURNING 1), "
            f"moved AS (UPDATE {self.entries} e SET embedding = m.promoted, "
            # the own vector's later windows are of the old model: they go with it
            "embedding_model = CAST(:model AS text), window_embeddings = NULL FROM moving m "
            "WHERE e.tenant_id = m.tenant_id AND e.resource_id = m.resource_id "
            "AND e.thread_id = m.thread_id AND e.id = m.id RETURNING 1), "
            f"cleared AS (DELETE FROM {self.vectors} v USING moving m "
            "WHERE v.tenant_id = m.tenant_id AND v.resource_id = m.resource_id "
            "AND v.thread_id = m.thread_id AND v.entry_id = m.id "
            "AND v.model = CAST(:model AS text) RETURNING 1) "
            "SELECT (SELECT count(*) FROM moved) AS moved, (SELECT count(*) FROM kept) AS kept, "
            "(SELECT count(*) FROM cleared) AS cleared"
        )

    @functools.cached_property
    def finish_promotion(self) -> str:
        """Make ``:model`` the primary generation and the primary a shadow one, in one
        statement, when ``:model`` is the active shadow generation and no indexed entry's own
        vector is of another model (``left``, counted in the statement's snapshot). One row:
        ``left`` and whether the roles swapped."""
        return (
            f"WITH target AS (SELECT model FROM {self.generations} "
            "WHERE model = CAST(:model AS text) AND role = 'shadow' AND active), "
            f"remaining AS (SELECT count(*) AS n FROM {self.entries} e "
            f"WHERE e.status = 'indexed' AND NOT {self.own_vector_of('e')}), "
            "go AS (SELECT 1 FROM target WHERE (SELECT n FROM remaining) = 0), "
            f"demoted AS (UPDATE {self.generations} SET role = 'shadow' "
            "WHERE role = 'primary' AND EXISTS (SELECT 1 FROM go) RETURNING model), "
            f"promoted AS (UPDATE {self.generations} SET role = 'primary' "
            "WHERE model = CAST(:model AS text) AND EXISTS (SELECT 1 FROM go) "
            "AND (SELECT count(*) FROM demoted) >= 0 RETURNING model) "
            "SELECT (SELECT n FROM remaining) AS left, (SELECT count(*) FROM promoted) AS swapped"
        )

    @functools.cached_property
    def drop(self) -> str:
        """Delete the shadow generation ``:model`` unless it is active or an entry's own vector
        is of it (its kept vectors go with it, ``ON DELETE CASCADE``). One row: its role and
        whether it was active (NULL: not registered), how many entries' own vectors are of it,
        how many vectors it held, and whether it was deleted."""
        own = (
            f"SELECT 1 FROM {self.entries} e WHERE e.embedding_model = CAST(:model AS text) "
            "AND e.embedding IS NOT NULL"
        )
        return (
            f"WITH target AS (SELECT role, active FROM {self.generations} "
            "WHERE model = CAST(:model AS text)), "
            f"gone AS (DELETE FROM {self.generations} WHERE model = CAST(:model AS text) "
            f"AND role = 'shadow' AND NOT active AND NOT EXISTS ({own}) RETURNING model) "
            "SELECT (SELECT role FROM target) AS role, (SELECT active FROM target) AS active, "
            f"(SELECT count(*) FROM ({own}) AS o) AS own, "
            f"(SELECT count(*) FROM {self.vectors} WHERE model = CAST(:model AS text) "
            "AND embedding IS NOT NULL) AS vectors, (SELECT count(*) FROM gone) AS dropped"
        )
