# ruff: noqa: S608 - SQL text is built only from validated, quoted identifiers; values are bound.
"""Vector generations (revision ``prism_memory_0011``): the registry of embedding models, a
shadow model's backfill claims and vectors, its progress, the switch and the drop.

A shadow vector is *current* when it holds a vector (``embedding IS NOT NULL``) of its entry's
current ``revision``; only current vectors count, are ranked, or make a switch ready.
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
        with ``after``), that hold no current vector of ``:model`` and whose vector row is not
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
            f"AND NOT EXISTS (SELECT 1 FROM {self.vectors} v WHERE v.tenant_id = e.tenant_id "
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
        (one primary-key probe per item), replacing the entry's vector of the model and
        releasing its lease."""
        return (
            f"INSERT INTO {self.vectors} AS w (tenant_id, resource_id, thread_id, entry_id, "
            "model, revision, embedding, claimed_by, claimed_until) "
            "SELECT e.tenant_id, e.resource_id, e.thread_id, e.id, CAST(:model AS text), "
            "e.revision, i.embedding, NULL, NULL "
            "FROM unnest(CAST(:tenants AS text[]), CAST(:resources AS text[]), "
            "CAST(:threads AS text[]), CAST(:ids AS text[]), CAST(:revisions AS integer[]), "
            "CAST(:embeddings AS vector[])) "
            "AS i(tenant_id, resource_id, thread_id, id, revision, embedding) "
            f"JOIN {self.entries} e ON e.tenant_id = i.tenant_id "
            "AND e.resource_id = i.resource_id AND e.thread_id = i.thread_id AND e.id = i.id "
            "AND e.revision = i.revision "
            "ON CONFLICT (tenant_id, resource_id, thread_id, entry_id, model) DO UPDATE SET "
            "revision = excluded.revision, embedding = excluded.embedding, "
            "claimed_by = NULL, claimed_until = NULL"
        )

    @functools.cached_property
    def progress(self) -> str:
        """The role of ``:model`` (NULL: not registered), the indexed entries, how many hold a
        current vector of it, and how many more are leased unexpired (whole-table counts)."""
        mine = (
            f"FROM {self.entries} e JOIN {self.vectors} v ON v.tenant_id = e.tenant_id "
            "AND v.resource_id = e.resource_id AND v.thread_id = e.thread_id "
            "AND v.entry_id = e.id AND v.model = CAST(:model AS text) "
            "WHERE e.status = 'indexed'"
        )
        current = "(v.revision = e.revision AND v.embedding IS NOT NULL)"
        return (
            f"SELECT (SELECT role FROM {self.generations} WHERE model = CAST(:model AS text)) "
            f"AS role, (SELECT count(*) FROM {self.entries} WHERE status = 'indexed') AS entries, "
            f"(SELECT count(*) {mine} AND {current}) AS current, "
            f"(SELECT count(*) {mine} AND NOT {current} "
            "AND v.claimed_until > CAST(:now AS timestamptz)) AS leased"
        )

    @functools.cached_property
    def switch(self) -> str:
        """Make ``:model`` the active generation, in one statement: ``missing`` counts the
        indexed entries without a current vector of it (none for the primary) in the statement's
        snapshot, and the flip happens only when it is 0 or ``:force``. The old active row is
        switched off first (``off``, which the flip's condition reads, so it runs to its end
        before): the unique partial index on ``active`` never sees two active rows. One row:
        ``found`` (0: not registered), ``missing``, and the generation as it is now when the
        flip happened (NULL columns when refused)."""
        return (
            f"WITH target AS (SELECT model, role FROM {self.generations} "
            "WHERE model = CAST(:model AS text)), "
            f"missing AS (SELECT count(*) AS n FROM {self.entries} e WHERE e.status = 'indexed' "
            "AND EXISTS (SELECT 1 FROM target WHERE target.role = 'shadow') "
            f"AND NOT {self.current_vector('e')}), "
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
            "f.model, f.width, f.role, f.active, f.started_at, f.switched_at "
            "FROM (SELECT 1) AS one LEFT JOIN flipped f ON true"
        )

    @functools.cached_property
    def drop(self) -> str:
        """Delete the shadow generation ``:model`` unless it is active (its vectors go with it,
        ``ON DELETE CASCADE``). One row: its role and whether it was active (NULL: not
        registered), how many vectors it held, and whether it was deleted."""
        return (
            f"WITH target AS (SELECT role, active FROM {self.generations} "
            "WHERE model = CAST(:model AS text)), "
            f"gone AS (DELETE FROM {self.generations} WHERE model = CAST(:model AS text) "
            "AND role = 'shadow' AND NOT active RETURNING model) "
            "SELECT (SELECT role FROM target) AS role, (SELECT active FROM target) AS active, "
            f"(SELECT count(*) FROM {self.vectors} WHERE model = CAST(:model AS text) "
            "AND embedding IS NOT NULL) AS vectors, (SELECT count(*) FROM gone) AS dropped"
        )
