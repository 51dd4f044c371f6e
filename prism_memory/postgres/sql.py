# ruff: noqa: S608 - SQL text is built only from validated, quoted identifiers; values are bound.
"""The SQL text of the hot paths, built once per table set and apart from execution.

:class:`EntrySql` holds every hand-written statement over the entries and tombstones tables; the
functions beside it pick a statement's shape and bind its values (``search_statement``,
``neighbors_statement``, ``claim_statement``…) and rewrite ``:name`` binds for the asyncpg driver
(:func:`to_positional`). Identifiers come only from validated names and are always quoted; values
are always bound. Each statement's docstring says which index it expects.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..lexical import BM25_B, BM25_K1, MAX_TERM_CHARS
from ..models import (
    MemoryIdentity,
)
from ..stores.base import (
    RecallFilter,
    SearchRequest,
)
from .rows import RECORD_COLUMNS, scope_params
from .tables import RESOURCE_SHARED, PrismTables

__all__ = [
    "EntrySql",
    "begin_locked_statement",
    "claim_in_statement",
    "claim_statement",
    "neighbors_statement",
    "records_statement",
    "search_statement",
    "thread_lock_key",
    "thread_lock_literal",
    "to_positional",
]


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class EntrySql:
    """Hand-written SQL for one table set; built once, executed by the repositories."""

    entries: str
    invalidation: str

    @staticmethod
    @functools.lru_cache(maxsize=64)
    def for_tables(tables: PrismTables) -> EntrySql:
        """The SQL builder of ``tables`` (cached)."""
        schema = _quote(tables.names.schema)
        return EntrySql(
            entries=f"{schema}.{_quote(tables.names.entries)}",
            invalidation=f"{schema}.{_quote(tables.names.invalidation)}",
        )

    @staticmethod
    def columns(alias: str = "e", *, json_as_text: bool = False) -> str:
        """The record columns, qualified by ``alias``; ``json_as_text`` reads ``metadata`` as its
        JSON text, for :func:`record_from_row` to parse only when a record is built."""
        return ", ".join(
            f"CAST({alias}.metadata AS text) AS metadata"
            if json_as_text and name == "metadata"
            else f"{alias}.{_quote(name)}"
            for name in RECORD_COLUMNS
        )

    @staticmethod
    def _row_rules(*, require_consent: bool, occurred_after: bool, alias: str) -> list[str]:
        """The rules of :func:`~prism_memory.stores.rules.is_recallable` that read the row alone."""
        e = alias
        parts = [
            f"{e}.status = 'indexed'",
            f"{e}.consent_visible",
            f"{e}.consent_revoked_at IS NULL",
            f"NOT {e}.legal_hold",
        ]
        if require_consent:
            parts.append(f"{e}.consent_explicit")
        if occurred_after:
            parts.append(f"{e}.occurred_at >= :occurred_after")
        return parts

    def recallable(self, *, require_consent: bool, occurred_after: bool, alias: str = "e") -> str:
        """:func:`prism_memory.stores.rules.is_recallable` as a SQL predicate over ``alias``.

        Indexed; visible, not revoked, not on legal hold; explicitly consented when required; not
        before the retention window; and no tombstone on the row itself or on any lineage source in
        the row's own thread that invalidates it (any reason, except ``corrected`` only when newer
        than ``written_at``). The tombstones are probed per row: for rows of any thread (the
        neighbours, a parent's shared rows, resource-wide recall); a search reads its own thread's
        tombstones once instead (:meth:`search`).
        """
        e = alias
        parts = self._row_rules(
            require_consent=require_consent, occurred_after=occurred_after, alias=alias
        )
        parts.append(
            # entries without lineage (most of them) skip the tombstone probe altogether
            f"((({e}.metadata -> '_lineage'::text) -> 'sourceIds'::text) IS NULL OR "
            f"NOT EXISTS (SELECT 1 FROM {self.invalidation} t "
            f"WHERE t.tenant_id = {e}.tenant_id AND t.resource_id = {e}.resource_id "
            f"AND t.thread_id = {e}.thread_id "
            f"AND t.entry_id IN (SELECT jsonb_array_elements_text("
            f"(({e}.metadata -> '_lineage'::text) -> 'sourceIds'::text))) "
            f"AND (t.reason <> 'corrected' OR t.created_at > {e}.written_at)))"
        )
        # the row's own tombstone excludes it too (fail closed: a crash or a failing hook between
        # a tombstone and its data change can never leave the entry recallable)
        parts.append(
            f"NOT EXISTS (SELECT 1 FROM {self.invalidation} o "
            f"WHERE o.tenant_id = {e}.tenant_id AND o.resource_id = {e}.resource_id "
            f"AND o.thread_id = {e}.thread_id AND o.entry_id = {e}.id "
            f"AND (o.reason <> 'corrected' OR o.created_at > {e}.written_at))"
        )
        return " AND ".join(parts)

    @functools.lru_cache(maxsize=32)  # noqa: B019 - bounded; instances are few and cached themselves
    def search(
        self,
        *,
        require_consent: bool,
        occurred_after: bool,
        shared: bool,
        lexical: bool,
        resource_wide: bool = False,
    ) -> str:
        """Candidate selection, corpus statistics and the pending count in one statement (see
        ``SearchRequest``); it always returns at least one row.

        ``dead`` reads the thread's tombstones once (primary-key range) and folds them into one
        *kill time* per entry id (a ``jsonb`` object, NULL when the thread has none):
        ``infinity`` when any tombstone of a reason other than ``corrected`` names it, else its
        newest correction. A row is invalidated exactly when its own or one of its lineage sources'
        kill time is later than its ``written_at`` (:func:`prism_memory.stores.rules.invalidates`).
        Each row is tested by a key lookup in that one object, never by a join or an index probe
        per row, so the plan cannot depend on estimates: the same plan is right for a 13-row and a
        13,000-row thread, and a cached generic plan stays as good as a custom one.

        ``eligible`` is the corpus: one scan of the scope's B-tree range (``ix_scope``) applying the
        exclusion rules, materialised as narrow rows — distance, term count and, with query terms,
        the ordinals of the terms the row's ``text_tsv`` holds. Both legs and the statistics read
        it, so the scope is scanned once. The distance is wrapped
        (``COALESCE(NULLIF(..., 'NaN'), 1)``: a zero vector is unrelated), which also keeps the HNSW
        index out of per-thread recall: the sort is exact, so a filter can never make it
        under-return. The lexical leg orders by :func:`prism_memory.lexical.leg_score`, written
        here operation by operation in float8 so that both backends select the same rows.

        ``resource_wide`` adds the travelling (``user``/``profile``) rows of the resource's other
        threads, read through the partial index ``ix_resource_shared`` (whose predicate,
        :data:`~prism_memory.postgres.tables.RESOURCE_SHARED`, is repeated verbatim) and sorted
        exactly like the thread's own rows, so it cannot under-return either. A granted parent row
        that travels is then read by that pool only, so each row counts once. Rows of other threads
        are tested against their own thread's tombstones (:meth:`recallable`).

        ``pending`` counts the thread's rows still waiting for a vector (the partial pending
        index), so a recall needs no second round trip for ``RecallResult.pending``.
        """
        where = self.recallable(require_consent=require_consent, occurred_after=occurred_after)
        lineage = "((e.metadata -> '_lineage'::text) -> 'sourceIds'::text)"
        own_where = " AND ".join(
            [
                *self._row_rules(
                    require_consent=require_consent, occurred_after=occurred_after, alias="e"
                ),
                "(d.kills IS NULL OR (NOT COALESCE(CAST(d.kills ->> e.id AS timestamptz) "
                f"> e.written_at, false) AND ({lineage} IS NULL OR NOT EXISTS (SELECT 1 FROM "
                f"jsonb_array_elements_text({lineage}) AS src(id) "
                "WHERE CAST(d.kills ->> src.id AS timestamptz) > e.written_at))))",
            ]
        )
        distance = "COALESCE(NULLIF(e.embedding <=> :query, 'NaN'::float8), 1.0)"
        own = "e.tenant_id = :tenant AND e.resource_id = :resource AND e.thread_id = :thread"
        parent = (
            "e.tenant_id = :tenant AND e.resource_id = :resource AND e.thread_id = :parent "
            "AND e.id = ANY(CAST(:shared_ids AS text[]))"
        )
        # (FROM, WHERE) of each pool; the thread's own rows join its tombstones' kill times
        pools = [(f"dead d CROSS JOIN {self.entries} e", f"{own} AND {own_where}")]
        if shared:
            # with a resource-wide recall, granted rows that travel come in through that pool
            granted = parent + (" AND e.consent_scope = 'thread'" if resource_wide else "")
            pools.append((f"{self.entries} e", f"{granted} AND {where}"))
        if resource_wide:
            pools.append(
                (
                    f"{self.entries} e",
                    "e.tenant_id = :tenant AND e.resource_id = :resource "
                    f"AND e.thread_id <> :thread AND e.{RESOURCE_SHARED[1:-1]} AND {where}",
                )
            )
        # Ordinals (1-based, in the order of :terms, which is sorted) of the query terms the row has;
        # rows without any (most of them) skip the per-term probes.
        matched = (
            ", CASE WHEN e.text_tsv @@ CAST(:any_term AS tsquery) THEN ARRAY("
            "SELECT q.ord FROM unnest(CAST(:term_queries AS tsquery[])) WITH ORDINALITY AS q(tsq, ord) "
            "WHERE e.text_tsv @@ q.tsq ORDER BY q.ord) ELSE '{}'::bigint[] END AS matched"
            if lexical
            else ""
        )
        eligible = " UNION ALL ".join(
            f"SELECT e.ctid AS row_ctid, e.id, e.sequence, {distance} AS distance, "
            f"e.term_count{matched} "
            f"FROM {source} WHERE {pool} AND e.embedding IS NOT NULL"
            for source, pool in pools
        )
        ctes = [
            "dead AS (SELECT jsonb_object_agg(k.entry_id, k.kill) AS kills FROM ("
            "SELECT entry_id, max(CASE WHEN reason = 'corrected' THEN created_at "
            f"ELSE 'infinity'::timestamptz END) AS kill FROM {self.invalidation} "
            "WHERE tenant_id = :tenant AND resource_id = :resource AND thread_id = :thread "
            "GROUP BY entry_id) AS k)",
            f"eligible AS MATERIALIZED ({eligible})",
            "stats AS (SELECT count(*) AS documents, "
            "COALESCE(sum(term_count), 0) AS total_length FROM eligible)",
            "nearest_top AS (SELECT row_ctid FROM eligible "
            "ORDER BY distance, sequence, id LIMIT :limit)",
        ]
        chosen = "SELECT row_ctid FROM nearest_top"
        frequencies = "NULL::bigint[] AS df_ords, NULL::bigint[] AS df_counts"
        if lexical:
            k1, b = f"CAST({BM25_K1!r} AS float8)", f"CAST({BM25_B!r} AS float8)"
            idf = (
                "ln(CAST(1.0 AS float8) + (CAST(s.documents - f.df AS float8) + CAST(0.5 AS float8))"
                " / (CAST(f.df AS float8) + CAST(0.5 AS float8)))"
            )
            average = "(CAST(s.total_length AS float8) / CAST(s.documents AS float8))"
            ctes += [
                # only the rows that hold a query term are unnested (most hold none)
                "frequencies AS (SELECT m.ord, count(*) AS df FROM (SELECT matched FROM eligible "
                "WHERE cardinality(matched) > 0) AS el, unnest(el.matched) AS m(ord) "
                "GROUP BY m.ord)",
                f"weights AS (SELECT f.ord, {idf} AS idf FROM frequencies f CROSS JOIN stats s)",
                "lexical_top AS (SELECT el.row_ctid FROM eligible el CROSS JOIN stats s "
                "WHERE cardinality(el.matched) > 0 ORDER BY "
                "(SELECT sum(w.idf ORDER BY w.ord) FROM weights w WHERE w.ord = ANY(el.matched))"
                f" * ({k1} + CAST(1.0 AS float8)) / (CAST(1.0 AS float8) + {k1} * "
                f"(CAST(1.0 AS float8) - {b} + {b} * el.term_count / {average})) DESC, "
                "el.sequence, el.id LIMIT :limit)",
            ]
            chosen += " UNION SELECT row_ctid FROM lexical_top"
            frequencies = (
                "ARRAY(SELECT ord FROM frequencies ORDER BY ord) AS df_ords, "
                "ARRAY(SELECT df FROM frequencies ORDER BY ord) AS df_counts"
            )
        pending = (
            f"(SELECT count(*) FROM {self.entries} p WHERE p.status = 'pending' "
            "AND p.tenant_id = :tenant AND p.resource_id = :resource AND p.thread_id = :thread) "
            "AS pending"
        )
        # The re-fetch reads the chosen rows by their physical address (a TID scan): ``ctid`` is
        # stable within the statement's one snapshot, and it needs no index descent. Joined on the
        # primary key, the planner (estimating one row per CTE) chose a merge join that walked the
        # key from the start of the resource -- every thread before the recalled one; written as
        # ``(thread_id, id) IN (...)`` it walked the thread's scope index per candidate. The
        # tenant and resource are tested again on the rows read: free here, and a row address is
        # only unique within one physical table (a table split into shards by tenant has one per
        # shard). They are tested outside the ``OFFSET 0`` fence: inside it the address is the only
        # condition, so the read is a TID scan whatever the statistics say (before the table had
        # any, the planner walked the resource's scope range and filtered it by address). The
        # statistics row is the outer side, so an empty corpus still returns one row (candidate
        # columns NULL).
        statement = (
            f"WITH {', '.join(ctes)} "
            f"SELECT {self.columns(json_as_text=True)}, vector_send(e.embedding) AS embedding, "
            f"s.documents, s.total_length, {frequencies}, {pending} "
            f"FROM stats s LEFT JOIN (SELECT * FROM {self.entries} e "
            f"WHERE e.ctid = ANY(ARRAY({chosen})) OFFSET 0) AS e "
            "ON e.tenant_id = :tenant AND e.resource_id = :resource"
        )
        # The scope's keys reach the plan as init-plan parameters: still index keys, but estimated
        # alike for every thread, so a custom plan costs what the generic one does and PostgreSQL
        # (plan_cache_mode auto) keeps the generic plan -- no planning per recall, whatever mix of
        # thread sizes a connection has seen.
        return _SCOPE_KEY.sub(r"(SELECT CAST(:\1 AS text))", statement)

    @functools.lru_cache(maxsize=32)  # noqa: B019 - bounded
    def neighbors(self, *, ranges: int, require_consent: bool, occurred_after: bool) -> str:
        """Recallable rows of the thread whose sequence lies in any of ``ranges`` inclusive ranges."""
        where = self.recallable(require_consent=require_consent, occurred_after=occurred_after)
        within = " OR ".join(f"e.sequence BETWEEN :low{i} AND :high{i}" for i in range(ranges))
        return (
            f"SELECT {self.columns()} FROM {self.entries} e "
            "WHERE e.tenant_id = :tenant AND e.resource_id = :resource AND e.thread_id = :thread "
            f"AND ({within}) AND {where} ORDER BY e.sequence, e.id"
        )

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
        per tombstone; ``cause_id`` null for none), by primary key."""
        return (
            f"SELECT e.id, t.cause_id, t.reason, t.created_at FROM {self.entries} e "
            f"LEFT JOIN {self.invalidation} t ON t.tenant_id = e.tenant_id "
            "AND t.resource_id = e.resource_id AND t.thread_id = e.thread_id AND t.entry_id = e.id "
            "WHERE e.tenant_id = :tenant AND e.resource_id = :resource AND e.thread_id = :thread "
            "AND e.id = ANY(CAST(:ids AS text[]))"
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

    @functools.lru_cache(maxsize=4)  # noqa: B019 - bounded
    def claim(self, *, scoped: bool, tenant: bool = False) -> str:
        """Lease due pending rows with ``FOR UPDATE SKIP LOCKED`` (never one row to two workers);
        of one thread (``scoped``), one tenant (``tenant``, the service worker's turns) or any.
        Index: the partial pending indexes -- by thread (``ix_pending_scope``), by tenant
        (``ix_pending_tenant``) or over all (``ix_pending``), each holding pending rows only."""
        scope = (
            "AND tenant_id = :tenant AND resource_id = :resource AND thread_id = :thread "
            if scoped
            else "AND tenant_id = :tenant "
            if tenant
            else ""
        )
        return (
            f"WITH due AS (SELECT tenant_id, resource_id, thread_id, id FROM {self.entries} "
            f"WHERE status = 'pending' {scope}"
            "AND (next_attempt_at IS NULL OR next_attempt_at <= :now) "
            "AND (claimed_until IS NULL OR claimed_until <= :now) "
            "ORDER BY sequence, id, tenant_id, resource_id, thread_id LIMIT :limit "
            f"FOR UPDATE SKIP LOCKED) {self._lease_due}"
        )

    @functools.cached_property
    def claim_in(self) -> str:
        """Lease due pending rows of many threads in one statement (a shared indexing loop's
        claim): for each thread of the arrays, in their order, its ``:each`` oldest due rows (one
        probe of the scope index or the pending-by-tenant index per thread), ``:limit`` in all."""
        return (
            "WITH due AS (SELECT d.tenant_id, d.resource_id, d.thread_id, d.id FROM "
            "unnest(CAST(:tenants AS text[]), CAST(:resources AS text[]), "
            "CAST(:threads AS text[])) AS s(tenant_id, resource_id, thread_id) "
            "CROSS JOIN LATERAL (SELECT tenant_id, resource_id, thread_id, id "
            f"FROM {self.entries} WHERE tenant_id = s.tenant_id "
            "AND resource_id = s.resource_id AND thread_id = s.thread_id AND status = 'pending' "
            "AND (next_attempt_at IS NULL OR next_attempt_at <= :now) "
            "AND (claimed_until IS NULL OR claimed_until <= :now) "
            "ORDER BY sequence, id LIMIT :each FOR UPDATE SKIP LOCKED) d LIMIT :limit) "
            f"{self._lease_due}"
        )

    @functools.cached_property
    def _lease_due(self) -> str:
        """The claims' second half: lease the ``due`` rows to ``:worker`` and return them (one
        primary-key probe per row)."""
        return (
            f"UPDATE {self.entries} e SET claimed_by = :worker, claimed_until = :until FROM due "
            "WHERE e.tenant_id = due.tenant_id AND e.resource_id = due.resource_id "
            "AND e.thread_id = due.thread_id AND e.id = due.id "
            "RETURNING e.tenant_id, e.resource_id, e.thread_id, e.id, e.revision, e.text, "
            "e.attempts, e.sequence, e.claimed_until"
        )

    @functools.cached_property
    def release(self) -> str:
        """Drop every lease ``:worker`` holds on pending rows (the partial index on
        ``claimed_by``, revision ``prism_memory_0008``, finds them without a table scan)."""
        return (
            f"UPDATE {self.entries} SET claimed_by = NULL, claimed_until = NULL "
            "WHERE claimed_by = :worker AND status = 'pending'"
        )

    @functools.cached_property
    def records(self) -> str:
        """The records of ``:ids`` in the thread (primary key)."""
        return (
            f"SELECT {self.columns()} FROM {self.entries} e WHERE e.tenant_id = :tenant "
            "AND e.resource_id = :resource AND e.thread_id = :thread "
            "AND e.id = ANY(CAST(:ids AS text[]))"
        )

    @functools.cached_property
    def lock_thread(self) -> str:
        """Serialise the writers of one thread until the transaction ends (sequence assignment).
        No table: a transaction-scoped advisory lock on the hash of the thread's key."""
        return "SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"

    @functools.cached_property
    def insert(self) -> str:
        """One batch of new entries in one statement, run under :attr:`lock_thread`.

        The rows arrive as parallel arrays (``unnest ... WITH ORDINALITY``: one bound parameter per
        column however many rows). Ids that exist are left out (never rewritten: ``ON CONFLICT DO
        NOTHING`` semantics, exact because every writer of the thread holds the lock); the new rows get
        their sequences in input order -- an explicit one as given, otherwise one past the largest
        so far (the thread's, read on the ``(scope, sequence)`` index, or an earlier row's of this
        batch) -- and are inserted ``indexed`` where a vector came with them, else ``pending``
        (leased where ``leased``); tombstones an earlier, forgotten entry of the same id left behind
        are deleted. Returns ``id, sequence`` of the inserted rows.
        """
        scope = "tenant_id = :tenant AND resource_id = :resource AND thread_id = :thread"
        before = "ORDER BY ord ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING"
        return (
            "WITH input AS (SELECT * FROM unnest(CAST(:ids AS text[]), CAST(:texts AS text[]), "
            "CAST(:roles AS text[]), CAST(:metadata AS jsonb[]), "
            "CAST(:consent_explicit AS boolean[]), CAST(:consent_source AS text[]), "
            "CAST(:consent_scope AS text[]), CAST(:consent_visible AS boolean[]), "
            "CAST(:consent_granted_at AS timestamptz[]), "
            "CAST(:consent_revoked_at AS timestamptz[]), CAST(:sequences AS bigint[]), "
            "CAST(:occurred_at AS timestamptz[]), CAST(:importance AS double precision[]), "
            "CAST(:terms AS text[]), CAST(:term_counts AS integer[]), "
            "CAST(:leased AS boolean[]), CAST(:embeddings AS vector[])) WITH ORDINALITY "
            "AS i(id, text, role, metadata, consent_explicit, consent_source, consent_scope, "
            "consent_visible, consent_granted_at, consent_revoked_at, sequence, occurred_at, "
            "importance, terms, term_count, leased, embedding, ord)), "
            # the ids that exist: one lookup for the batch, on the primary key (before a table
            # is first analysed the planner may walk the thread's (scope, sequence) range once
            # instead; a correlated NOT EXISTS against the table walked it once per row)
            f"existing AS (SELECT id FROM {self.entries} WHERE {scope} "
            "AND id = ANY(CAST(:ids AS text[]))), "
            # autos: how many new rows before this one take an automatic sequence
            "fresh AS (SELECT i.*, count(*) FILTER (WHERE i.sequence IS NULL) OVER w AS autos "
            "FROM input i WHERE NOT EXISTS (SELECT 1 FROM existing x WHERE x.id = i.id) "
            f"WINDOW w AS ({before})), "
            f"top AS (SELECT coalesce(max(sequence), -1) AS v FROM {self.entries} WHERE {scope}), "
            # an automatic sequence is one past the largest so far: the thread's top or an earlier
            # explicit sequence, each plus the automatic rows in between
            "numbered AS (SELECT f.*, coalesce(f.sequence, f.autos + 1 + "
            "greatest(top.v, max(f.sequence - f.autos) OVER w)) AS seq FROM fresh f, top "
            f"WINDOW w AS ({before})), "
            f"inserted AS (INSERT INTO {self.entries} (tenant_id, resource_id, thread_id, id, "
            "text, role, metadata, consent_explicit, consent_source, consent_scope, "
            "consent_visible, consent_granted_at, consent_revoked_at, sequence, occurred_at, "
            "created_at, written_at, importance, legal_hold, status, revision, attempts, "
            "claimed_by, claimed_until, embedding, embedding_model, text_tsv, term_count) "
            "SELECT :tenant, :resource, :thread, n.id, n.text, n.role, n.metadata, "
            "n.consent_explicit, n.consent_source, n.consent_scope, n.consent_visible, "
            "n.consent_granted_at, n.consent_revoked_at, n.seq, n.occurred_at, "
            "CAST(:now AS timestamptz), CAST(:now AS timestamptz), n.importance, false, "
            "CASE WHEN n.embedding IS NULL THEN 'pending' ELSE 'indexed' END, 1, 0, "
            "CASE WHEN n.leased THEN CAST(:worker AS text) END, "
            "CASE WHEN n.leased THEN CAST(:until AS timestamptz) END, n.embedding, "
            "CASE WHEN n.embedding IS NOT NULL THEN CAST(:model AS text) END, "
            "array_to_tsvector(string_to_array(n.terms, ' ')), n.term_count "
            # no ON CONFLICT: under the lock ``existing`` is exact, and a speculative insertion
            # costs about a third of the statement; a row some other writer slipped in without
            # the lock fails the whole statement (unique violation), it never half-applies
            "FROM numbered n ORDER BY n.ord RETURNING id, sequence), "
            f"cleared AS (DELETE FROM {self.invalidation} WHERE {scope} "
            "AND entry_id IN (SELECT id FROM inserted)) "
            "SELECT id, sequence FROM inserted"
        )

    @functools.cached_property
    def known_keys(self) -> str:
        """Which ``(tenant, resource, thread, id)`` of the arrays exist (one primary-key probe
        each); returns their ordinals (1-based)."""
        return (
            "SELECT k.ord FROM unnest(CAST(:tenants AS text[]), CAST(:resources AS text[]), "
            "CAST(:threads AS text[]), CAST(:ids AS text[])) WITH ORDINALITY "
            "AS k(tenant_id, resource_id, thread_id, id, ord) WHERE EXISTS (SELECT 1 FROM "
            f"{self.entries} e WHERE e.tenant_id = k.tenant_id AND e.resource_id = k.resource_id "
            "AND e.thread_id = k.thread_id AND e.id = k.id)"
        )

    @functools.cached_property
    def models_of(self) -> str:
        """The recorded models of the threads of the arrays (ordinal, model; one row per distinct
        pair), each thread read on its ``(scope, sequence)`` index range."""
        return (
            "SELECT DISTINCT k.ord, e.embedding_model FROM unnest(CAST(:tenants AS text[]), "
            "CAST(:resources AS text[]), CAST(:threads AS text[])) WITH ORDINALITY "
            f"AS k(tenant_id, resource_id, thread_id, ord) JOIN {self.entries} e "
            "ON e.tenant_id = k.tenant_id AND e.resource_id = k.resource_id "
            "AND e.thread_id = k.thread_id WHERE e.embedding_model IS NOT NULL"
        )

    @functools.cached_property
    def import_stage(self) -> str:
        """The bulk import's staging table (:data:`~prism_memory.postgres.rows.STAGE_COLUMNS`):
        temporary, one per connection, emptied at every commit, so a batch's binary ``COPY`` lands
        in a table no other session sees and that never outlives its transaction's rows."""
        return (
            f"CREATE TEMP TABLE IF NOT EXISTS {self.stage} (tenant_id text, resource_id text, "
            "thread_id text, id text, text text, role text, metadata jsonb, "
            "consent_explicit boolean, consent_source text, consent_scope text, "
            "consent_visible boolean, consent_granted_at timestamptz, "
            "consent_revoked_at timestamptz, sequence bigint, occurred_at timestamptz, "
            "importance double precision, terms text, term_count integer, embedding vector, "
            "embedding_model text, ord bigint) ON COMMIT DELETE ROWS"
        )

    @functools.cached_property
    def stage(self) -> str:
        """The staging table's name (in ``pg_temp``), derived from the entries table's."""
        return "pg_temp." + _quote(self.entries.rsplit(".", 1)[-1].strip('"') + "_import")

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
        probe per staged row); the new rows get their sequences per thread in staging order --
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
            f"AS autos FROM {self.stage} f WHERE NOT EXISTS (SELECT 1 FROM {self.entries} e "
            f"WHERE {same} AND e.id = f.id) WINDOW w AS ({before})), "
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
            "embedding, embedding_model, text_tsv, term_count) "
            "SELECT n.tenant_id, n.resource_id, n.thread_id, n.id, n.text, n.role, n.metadata, "
            "n.consent_explicit, n.consent_source, n.consent_scope, n.consent_visible, "
            "n.consent_granted_at, n.consent_revoked_at, n.seq, n.occurred_at, "
            "CAST(:now AS timestamptz), CAST(:now AS timestamptz), n.importance, false, "
            "CASE WHEN n.embedding IS NULL THEN 'pending' ELSE 'indexed' END, 1, 0, "
            "n.embedding, CASE WHEN n.embedding IS NOT NULL THEN n.embedding_model END, "
            "array_to_tsvector(string_to_array(n.terms, ' ')), n.term_count "
            "FROM numbered n ORDER BY n.ord "
            "RETURNING tenant_id, resource_id, thread_id, id, status), "
            f"cleared AS (DELETE FROM {self.invalidation} t USING inserted i "
            "WHERE t.tenant_id = i.tenant_id AND t.resource_id = i.resource_id "
            "AND t.thread_id = i.thread_id AND t.entry_id = i.id) "
            "SELECT count(*) AS inserted, count(*) FILTER (WHERE status = 'pending') AS pending "
            "FROM inserted"
        )

    @functools.cached_property
    def complete(self) -> str:
        """Store claimed vectors where the lease (worker, unexpired, and the very lease the claim
        set when it names one) and revision still match (one primary-key probe per row)."""
        return (
            f"UPDATE {self.entries} e SET embedding = v.embedding, status = 'indexed', "
            "embedding_model = CAST(:model AS text), "
            "last_error = NULL, next_attempt_at = NULL, claimed_by = NULL, claimed_until = NULL "
            "FROM unnest(CAST(:tenants AS text[]), CAST(:resources AS text[]), "
            "CAST(:threads AS text[]), CAST(:ids AS text[]), CAST(:revisions AS integer[]), "
            "CAST(:embeddings AS vector[]), CAST(:leases AS timestamptz[])) "
            "AS v(tenant_id, resource_id, thread_id, id, revision, embedding, lease_until) "
            "WHERE e.tenant_id = v.tenant_id AND e.resource_id = v.resource_id "
            "AND e.thread_id = v.thread_id AND e.id = v.id AND e.revision = v.revision "
            "AND e.status = 'pending' AND e.claimed_by = :worker AND e.claimed_until > :now "
            "AND (v.lease_until IS NULL OR e.claimed_until = v.lease_until)"
        )

    @functools.cached_property
    def fail(self) -> str:
        """Record a failure while the lease matches; release the worker's lease either way
        (primary key)."""
        ok = "(revision = :revision AND status = 'pending' AND claimed_until > :now)"
        return (
            f"UPDATE {self.entries} SET "
            f"attempts = CASE WHEN {ok} THEN attempts + 1 ELSE attempts END, "
            f"last_error = CASE WHEN {ok} THEN CAST(:error AS text) ELSE last_error END, "
            f"status = CASE WHEN {ok} THEN CAST(:new_status AS text) ELSE status END, "
            f"next_attempt_at = CASE WHEN {ok} THEN CAST(:retry_at AS timestamptz) "
            "ELSE next_attempt_at END, "
            "claimed_by = NULL, claimed_until = NULL "
            "WHERE tenant_id = :tenant AND resource_id = :resource AND thread_id = :thread "
            "AND id = :id AND claimed_by = :worker"
        )

    @functools.cached_property
    def store_vectors(self) -> str:
        """Re-index: store vectors where the revision matches, drop leases."""
        return (
            f"UPDATE {self.entries} e SET embedding = v.embedding, status = 'indexed', "
            "embedding_model = CAST(:model AS text), "
            "last_error = NULL, next_attempt_at = NULL, claimed_by = NULL, claimed_until = NULL "
            "FROM unnest(CAST(:ids AS text[]), CAST(:revisions AS integer[]), "
            "CAST(:embeddings AS vector[])) AS v(id, revision, embedding) "
            "WHERE e.tenant_id = :tenant AND e.resource_id = :resource AND e.thread_id = :thread "
            "AND e.id = v.id AND e.revision = v.revision"
        )

    @functools.cached_property
    def replace_text(self) -> str:
        """New text and its vector at once: revision + 1, indexed, ``written_at = now``."""
        return (
            f"UPDATE {self.entries} e SET text = :text, embedding = :embedding, "
            "embedding_model = CAST(:model AS text), "
            "text_tsv = array_to_tsvector(CAST(:lexical_terms AS text[])), "
            "term_count = :term_count, "
            "revision = e.revision + 1, status = 'indexed', attempts = 0, last_error = NULL, "
            "next_attempt_at = NULL, claimed_by = NULL, claimed_until = NULL, written_at = :now "
            "WHERE e.tenant_id = :tenant AND e.resource_id = :resource AND e.thread_id = :thread "
            f"AND e.id = :id RETURNING {self.columns()}"
        )

    @functools.cached_property
    def any_width(self) -> str:
        """The width of some stored vector (unpinned tables keep one width, as pinned ones do);
        no index: the first row with a vector of a sequential scan."""
        return (
            f"SELECT vector_dims(embedding) FROM {self.entries} WHERE embedding IS NOT NULL LIMIT 1"
        )


def thread_lock_key(scope: MemoryIdentity) -> str:
    """The text :attr:`EntrySql.lock_thread` hashes into the thread's advisory lock."""
    return "\x1f".join((scope.tenant_id, scope.resource_id, scope.thread_id))


def begin_locked_statement(scope: MemoryIdentity) -> str:
    """``BEGIN ISOLATION LEVEL READ COMMITTED`` and :attr:`EntrySql.lock_thread` for ``scope`` as one
    simple-query message (one round trip; the lock key is inlined by :func:`thread_lock_literal`,
    so it hashes to the same lock as the bound form)."""
    return (
        "BEGIN ISOLATION LEVEL READ COMMITTED; "
        f"SELECT pg_advisory_xact_lock(hashtextextended({thread_lock_literal(scope)}, 0))"
    )


def thread_lock_literal(scope: MemoryIdentity) -> str:
    """:func:`thread_lock_key` as an escaped ``E''`` string literal (backslashes doubled, quotes
    doubled: the same text under any ``standard_conforming_strings``)."""
    key = thread_lock_key(scope).replace("\\", "\\\\").replace("'", "''")
    return f"E'{key}'"


def claim_statement(
    sql: EntrySql,
    scope: MemoryIdentity | None,
    *,
    limit: int,
    worker_id: str,
    lease_seconds: float,
    now: datetime,
    tenant_id: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """:meth:`EntrySql.claim` for ``scope`` (else ``tenant_id``, else any scope) and its bound
    values."""
    params: dict[str, Any] = {
        "now": now,
        "until": now + timedelta(seconds=lease_seconds),
        "worker": worker_id,
        "limit": limit,
    }
    if scope is not None:
        params.update(scope_params(scope))
    elif tenant_id is not None:
        params["tenant"] = tenant_id
    statement = sql.claim(scoped=scope is not None, tenant=scope is None and tenant_id is not None)
    return statement, params


def claim_in_statement(
    sql: EntrySql,
    scopes: Sequence[MemoryIdentity],
    *,
    limit: int,
    per_scope: int,
    worker_id: str,
    lease_seconds: float,
    now: datetime,
) -> tuple[str, dict[str, Any]]:
    """:attr:`EntrySql.claim_in` for ``scopes`` (each once, in turn order) and its bound values."""
    return sql.claim_in, {
        "tenants": [scope.tenant_id for scope in scopes],
        "resources": [scope.resource_id for scope in scopes],
        "threads": [scope.thread_id for scope in scopes],
        "now": now,
        "until": now + timedelta(seconds=lease_seconds),
        "worker": worker_id,
        "each": per_scope,
        "limit": limit,
    }


def records_statement(
    tables: PrismTables, scope: MemoryIdentity, ids: Sequence[str]
) -> tuple[str, dict[str, Any]]:
    """:attr:`EntrySql.records` and its bound values: the stored records of ``ids``."""
    return EntrySql.for_tables(tables).records, {**scope_params(scope), "ids": list(ids)}


@functools.lru_cache(maxsize=256)
def to_positional(statement: str) -> tuple[str, tuple[str, ...]]:
    """Rewrite ``:name`` binds (never ``::casts``) into asyncpg's ``$n``; return the names in order.

    Lets a read go to the asyncpg driver directly, where the statement is prepared once per
    connection and cached by asyncpg.
    """
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${names.setdefault(match.group(1), len(names) + 1)}"

    return _BIND.sub(number, statement), tuple(names)


_BIND = re.compile(r"(?<![:\w]):([A-Za-z_][A-Za-z0-9_]*)")


_SCOPE_KEY = re.compile(r"(?<![:\w]):(tenant|resource|thread|parent)(?!\w)")


def search_statement(
    sql: EntrySql, scope: MemoryIdentity, request: SearchRequest
) -> tuple[str, dict[str, Any], list[str]]:
    """The candidate SQL of ``request`` (see :meth:`EntrySql.search`), its bound values and the
    query terms in the order the statement numbers them."""
    flt = request.filter
    shared = request.shared
    use_shared = shared is not None and shared.thread_id != scope.thread_id and bool(shared.ids)
    # Only terms tokenize() can produce can match; longer ones could not even be tsquery lexemes.
    terms = sorted(t for t in request.terms if 0 < len(t) <= MAX_TERM_CHARS)
    statement = sql.search(
        require_consent=flt.require_consent,
        occurred_after=flt.occurred_after is not None,
        shared=use_shared,
        lexical=bool(terms),
        resource_wide=request.resource_wide,
    )
    params: dict[str, Any] = {
        **scope_params(scope),
        "query": request.vector,
        "limit": request.limit,
    }
    if flt.occurred_after is not None:
        params["occurred_after"] = flt.occurred_after
    if use_shared and shared is not None:
        params["parent"] = shared.thread_id
        params["shared_ids"] = list(dict.fromkeys(shared.ids))
    if terms:
        # one quoted lexeme each (tokenize() yields \w+ runs; a caller's odd term is escaped)
        queries = ["'" + t.replace("\\", "\\\\").replace("'", "''") + "'" for t in terms]
        params["term_queries"] = queries
        params["any_term"] = " | ".join(queries)
    return statement, params, terms


def neighbors_statement(
    sql: EntrySql, scope: MemoryIdentity, ranges: Sequence[tuple[int, int]], flt: RecallFilter
) -> tuple[str, dict[str, Any]]:
    """The SQL of :meth:`EntrySql.neighbors` for ``ranges`` and its bound values."""
    statement = sql.neighbors(
        ranges=len(ranges),
        require_consent=flt.require_consent,
        occurred_after=flt.occurred_after is not None,
    )
    params: dict[str, Any] = dict(scope_params(scope))
    for i, (low, high) in enumerate(ranges):
        params[f"low{i}"], params[f"high{i}"] = int(low), int(high)
    if flt.occurred_after is not None:
        params["occurred_after"] = flt.occurred_after
    return statement, params
