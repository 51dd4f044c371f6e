# ruff: noqa: S608 - SQL text is built only from validated, quoted identifiers; values are bound.
"""Async repositories over prism_memory's tables.

A repository is *given* an :class:`~sqlalchemy.ext.asyncio.AsyncSession` and the tables; it builds
statements and executes them, and never commits: the unit of work (``async with session.begin()``)
belongs to the adapter one layer up (:mod:`prism_memory.postgres.store`).

Two styles, chosen per path:

* **ORM, where it is natural and not a hot path.** :class:`WorkingRepository`,
  :class:`ShareGrantRepository` and :class:`TombstoneRepository` go through the typed mapped classes
  of the table set (``tables.orm.WorkingMemory``, ``.ShareGrant``, ``.Tombstone``; see
  :mod:`prism_memory.postgres.orm`): ``session.get`` by primary key; ORM-enabled
  ``insert ... on_conflict``, ``update`` and ``delete`` on the mapped class, rows returned as mapped
  objects (``RETURNING``, ``populate_existing``). Writes stay single statements -- upserts, and the
  working document's conditional ``UPDATE ... WHERE version = :expected`` -- so concurrent writers
  neither collide nor lose updates.
* **Core and hand-written SQL on the hot paths.** :class:`EntryRepository` and
  :class:`IndexingRepository` never build ORM objects: a batch of new entries is one hand-written
  ``INSERT ... SELECT FROM unnest(...)`` (one array parameter per column), other updates are Core
  statements over the Core table; search, neighbours, lineage lookups, claims and vector
  writes are hand-written SQL whose text is built once per table set (:class:`EntrySql`), apart from
  execution, with bound parameters; identifiers come only from validated names and are always
  quoted.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import (
    Table,
    Text,
    any_,
    bindparam,
    delete,
    func,
    literal_column,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession

from ..lexical import BM25_B, BM25_K1, MAX_TERM_CHARS, CorpusStats, tokenize
from ..models import (
    Candidate,
    IndexStatus,
    Lineage,
    MemoryConsent,
    MemoryIdentity,
    MemoryRecord,
    ShareGrant,
    TombstoneReason,
    Vector,
    WorkingMemoryRecord,
)
from ..stores.base import (
    ClaimedEntry,
    EntryLease,
    NewEntry,
    RecallFilter,
    SearchRequest,
    SearchResult,
    Tombstone,
)
from ._engine import decode_vector, encode_vector, encode_vectors
from .orm import ShareGrantRow, WorkingMemoryRow
from .tables import RESOURCE_SHARED, PrismTables

__all__ = [
    "RECORD_COLUMNS",
    "EntryRepository",
    "EntrySql",
    "IndexingRepository",
    "ShareGrantRepository",
    "TombstoneRepository",
    "WorkingRepository",
    "begin_locked_statement",
    "claim_in_statement",
    "claim_statement",
    "claimed_entries",
    "insert_params",
    "inserted_record",
    "lineage_metadata",
    "neighbors_statement",
    "record_from_row",
    "records_statement",
    "search_result",
    "search_statement",
    "thread_lock_key",
    "thread_lock_literal",
    "to_positional",
]

RECORD_COLUMNS: tuple[str, ...] = (
    "tenant_id",
    "resource_id",
    "thread_id",
    "id",
    "text",
    "role",
    "metadata",
    "consent_explicit",
    "consent_source",
    "consent_scope",
    "consent_visible",
    "consent_granted_at",
    "consent_revoked_at",
    "sequence",
    "occurred_at",
    "created_at",
    "written_at",
    "importance",
    "legal_hold",
    "status",
    "revision",
    "attempts",
    "last_error",
    "embedding_model",
)
"""The columns a :class:`~prism_memory.models.MemoryRecord` is read from."""

_LINEAGE_KEY = "_lineage"
_WORKING_NO_THREAD = ""


# ---- row <-> record ----------------------------------------------------------------------------


def lineage_metadata(metadata: Mapping[str, Any], lineage: Lineage | None) -> dict[str, Any]:
    """The stored ``metadata`` document: the entry's metadata plus ``_lineage`` when it has one."""
    stored = json.loads(json.dumps(dict(metadata)))
    if lineage is not None:
        stored[_LINEAGE_KEY] = {"sourceIds": list(lineage.source_ids), "reason": lineage.reason}
    return dict(stored)


def _metadata_json(metadata: Mapping[str, Any], lineage: Lineage | None) -> str:
    """:func:`lineage_metadata` as JSON text, serialised once."""
    if not metadata and lineage is None:
        return "{}"
    stored = dict(metadata)
    if lineage is not None:
        stored[_LINEAGE_KEY] = {"sourceIds": list(lineage.source_ids), "reason": lineage.reason}
    return json.dumps(stored)


def _split_metadata(stored: Mapping[str, Any]) -> tuple[dict[str, Any], Lineage | None]:
    metadata = dict(stored)
    raw = metadata.pop(_LINEAGE_KEY, None)
    if not isinstance(raw, Mapping) or not raw.get("sourceIds"):
        return metadata, None
    return metadata, Lineage(source_ids=tuple(raw["sourceIds"]), reason=raw.get("reason"))


_CONSENT_COLUMNS = (
    "consent_explicit",
    "consent_source",
    "consent_scope",
    "consent_visible",
    "consent_granted_at",
    "consent_revoked_at",
)


def _consent_values(consent: MemoryConsent | None) -> dict[str, Any]:
    effective = consent if consent is not None else MemoryConsent()
    return {
        "consent_explicit": consent is not None,
        "consent_source": effective.source,
        "consent_scope": effective.scope,
        "consent_visible": effective.visible,
        "consent_granted_at": effective.granted_at,
        "consent_revoked_at": effective.revoked_at,
    }


_DEFAULT_CONSENT = _consent_values(None)
"""The consent columns of an entry remembered without explicit consent."""


def record_from_row(row: Mapping[Any, Any]) -> MemoryRecord:
    """Build a :class:`MemoryRecord` from a row holding :data:`RECORD_COLUMNS` (``metadata`` as
    the decoded document or its JSON text)."""
    stored = row["metadata"]
    if isinstance(stored, str):
        stored = json.loads(stored) if stored != "{}" else None
    metadata, lineage = _split_metadata(stored or {})
    consent = (
        MemoryConsent(
            source=row["consent_source"],
            scope=row["consent_scope"],
            visible=row["consent_visible"],
            granted_at=row["consent_granted_at"],
            revoked_at=row["consent_revoked_at"],
        )
        if row["consent_explicit"]
        else None
    )
    return MemoryRecord(
        tenant_id=row["tenant_id"],
        resource_id=row["resource_id"],
        thread_id=row["thread_id"],
        id=row["id"],
        text=row["text"],
        role=row["role"],
        metadata=metadata,
        consent=consent,
        sequence=int(row["sequence"]),
        occurred_at=row["occurred_at"],
        created_at=row["created_at"],
        written_at=row["written_at"],
        importance=float(row["importance"]),
        lineage=lineage,
        legal_hold=bool(row["legal_hold"]),
        status=row["status"],
        revision=int(row["revision"]),
        attempts=int(row["attempts"]),
        last_error=row["last_error"],
        embedding_model=row["embedding_model"],
    )


def lexical_values(body: str) -> dict[str, Any]:
    """``lexical_terms`` (distinct terms, sorted) and ``term_count`` of a text, for ``text_tsv``."""
    terms = tokenize(body)
    return {"lexical_terms": sorted(set(terms)), "term_count": len(terms)}


def _scope_params(scope: MemoryIdentity) -> dict[str, str]:
    return {"tenant": scope.tenant_id, "resource": scope.resource_id, "thread": scope.thread_id}


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# ---- SQL text ------------------------------------------------------------------------------------


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
        # statistics row is the outer side, so an empty corpus still returns one row (candidate
        # columns NULL).
        statement = (
            f"WITH {', '.join(ctes)} "
            f"SELECT {self.columns(json_as_text=True)}, vector_send(e.embedding) AS embedding, "
            f"s.documents, s.total_length, {frequencies}, {pending} "
            f"FROM stats s LEFT JOIN {self.entries} e "
            f"ON e.ctid = ANY(ARRAY({chosen}))"
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
        of one thread (``scoped``), one tenant (``tenant``, the service worker's turns) or any."""
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
        """The claims' second half: lease the ``due`` rows to ``:worker`` and return them."""
        return (
            f"UPDATE {self.entries} e SET claimed_by = :worker, claimed_until = :until FROM due "
            "WHERE e.tenant_id = due.tenant_id AND e.resource_id = due.resource_id "
            "AND e.thread_id = due.thread_id AND e.id = due.id "
            "RETURNING e.tenant_id, e.resource_id, e.thread_id, e.id, e.revision, e.text, "
            "e.attempts, e.sequence"
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
        """Serialise the writers of one thread until the transaction ends (sequence assignment)."""
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
    def complete(self) -> str:
        """Store claimed vectors where the lease (worker, unexpired) and revision still match."""
        return (
            f"UPDATE {self.entries} e SET embedding = v.embedding, status = 'indexed', "
            "embedding_model = CAST(:model AS text), "
            "last_error = NULL, next_attempt_at = NULL, claimed_by = NULL, claimed_until = NULL "
            "FROM unnest(CAST(:tenants AS text[]), CAST(:resources AS text[]), "
            "CAST(:threads AS text[]), CAST(:ids AS text[]), CAST(:revisions AS integer[]), "
            "CAST(:embeddings AS vector[])) "
            "AS v(tenant_id, resource_id, thread_id, id, revision, embedding) "
            "WHERE e.tenant_id = v.tenant_id AND e.resource_id = v.resource_id "
            "AND e.thread_id = v.thread_id AND e.id = v.id AND e.revision = v.revision "
            "AND e.status = 'pending' AND e.claimed_by = :worker AND e.claimed_until > :now"
        )

    @functools.cached_property
    def fail(self) -> str:
        """Record a failure while the lease matches; release the worker's lease either way."""
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
        """The width of some stored vector (unpinned tables keep one width, as pinned ones do)."""
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


def insert_params(
    scope: MemoryIdentity,
    entries: Sequence[NewEntry],
    *,
    now: datetime,
    lease: EntryLease | None,
    vectors: Sequence[Vector] | None,
    model: str | None,
) -> dict[str, Any]:
    """The bound values of :attr:`EntrySql.insert` for ``entries`` (each id once) and their
    checked ``vectors`` (one per entry, or ``None``)."""
    consents = [
        _DEFAULT_CONSENT if entry.consent is None else _consent_values(entry.consent)
        for entry in entries
    ]
    terms: list[str] = []
    counts: list[int] = []
    for entry in entries:  # tokenized once, here (not memoised: a written text is seldom repeated)
        words = tokenize(entry.text)
        terms.append(" ".join(sorted(set(words))))
        counts.append(len(words))
    return {
        **_scope_params(scope),
        "ids": [entry.id for entry in entries],
        "texts": [entry.text for entry in entries],
        "roles": [entry.role for entry in entries],
        "metadata": [_metadata_json(entry.metadata, entry.lineage) for entry in entries],
        **{name: [c[name] for c in consents] for name in _CONSENT_COLUMNS},
        "sequences": [entry.sequence for entry in entries],
        "occurred_at": [entry.occurred_at for entry in entries],
        "importance": [float(entry.importance) for entry in entries],
        "terms": terms,
        "term_counts": counts,
        "leased": [  # a row stored with its vector is never leased
            vectors is None and lease is not None and lease.covers(entry.id) for entry in entries
        ],
        "embeddings": [None] * len(entries) if vectors is None else encode_vectors(vectors),
        "now": now,
        "worker": None if lease is None else lease.worker_id,
        "until": None if lease is None else lease.until,
        "model": model,
    }


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
        params.update(_scope_params(scope))
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


def claimed_entries(
    rows: Iterable[Mapping[Any, Any]], scopes: Sequence[MemoryIdentity] | None = None
) -> list[ClaimedEntry]:
    """The rows a claim returned, in claim order: by sequence, then id (then scope); with
    ``scopes`` (:attr:`EntrySql.claim_in`), scope by scope in their order first."""
    if scopes is None:
        order = sorted(
            rows,
            key=lambda r: (
                r["sequence"],
                r["id"],
                r["tenant_id"],
                r["resource_id"],
                r["thread_id"],
            ),
        )
    else:
        turn = {(s.tenant_id, s.resource_id, s.thread_id): i for i, s in enumerate(scopes)}
        order = sorted(
            rows,
            key=lambda r: (
                turn[(r["tenant_id"], r["resource_id"], r["thread_id"])],
                r["sequence"],
                r["id"],
            ),
        )
    return [
        ClaimedEntry(
            scope=MemoryIdentity(
                tenant_id=row["tenant_id"],
                resource_id=row["resource_id"],
                thread_id=row["thread_id"],
            ),
            id=row["id"],
            revision=int(row["revision"]),
            text=row["text"],
            attempts=int(row["attempts"]),
        )
        for row in order
    ]


def records_statement(
    tables: PrismTables, scope: MemoryIdentity, ids: Sequence[str]
) -> tuple[str, dict[str, Any]]:
    """:attr:`EntrySql.records` and its bound values: the stored records of ``ids``."""
    return EntrySql.for_tables(tables).records, {**_scope_params(scope), "ids": list(ids)}


def inserted_record(
    scope: MemoryIdentity,
    entry: NewEntry,
    sequence: int,
    *,
    now: datetime,
    indexed: bool,
    model: str | None,
) -> MemoryRecord:
    """The record :attr:`EntrySql.insert` stored for ``entry`` at ``sequence``."""
    return MemoryRecord(
        tenant_id=scope.tenant_id,
        resource_id=scope.resource_id,
        thread_id=scope.thread_id,
        id=entry.id,
        text=entry.text,
        role=entry.role,
        metadata=json.loads(json.dumps(dict(entry.metadata))) if entry.metadata else {},
        consent=entry.consent,
        sequence=sequence,
        occurred_at=entry.occurred_at,
        created_at=now,
        written_at=now,
        importance=entry.importance,
        lineage=entry.lineage,
        status="indexed" if indexed else "pending",
        embedding_model=model if indexed else None,
    )


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
_STATUS_SQL: dict[str, str] = {"pending": "pending", "indexed": "indexed", "failed": "failed"}
"""The statuses an SQL text may hold as constants (a key error for anything else)."""

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
        **_scope_params(scope),
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


def search_result(rows: Sequence[Mapping[Any, Any]], terms: Sequence[str]) -> SearchResult:
    """Candidates (record and stored vector), corpus statistics and the thread's pending count
    from rows of :meth:`EntrySql.search` (an empty corpus is one row without a candidate)."""
    if not rows:
        return SearchResult([], CorpusStats())
    first = rows[0]
    ords, counts = first["df_ords"] or [], first["df_counts"] or []
    stats = CorpusStats(
        int(first["documents"]),
        int(first["total_length"]),
        {terms[int(o) - 1]: int(c) for o, c in zip(ords, counts, strict=True)},
    )
    found = [r for r in rows if r["id"] is not None]
    vectors = _vectors([r["embedding"] for r in found])
    # ranking reads a few fields of every candidate; whole records are built for the hits only
    candidates = [
        Candidate.deferred(
            vector,
            thread_id=r["thread_id"],
            id=r["id"],
            text=r["text"],
            sequence=r["sequence"],
            occurred_at=r["occurred_at"],
            importance=r["importance"],
            embedding_model=r["embedding_model"],
            build=functools.partial(record_from_row, r),
        )
        for r, vector in zip(found, vectors, strict=True)
    ]
    return SearchResult(candidates, stats, pending=int(first["pending"]))


def _vectors(sent: Sequence[bytes]) -> Sequence[Vector]:
    """Stored vectors from pgvector's binary format (``vector_send``): one array for the whole
    batch when their dimensions agree (they do in a table of one embedding model)."""
    if not sent:
        return []
    size = len(sent[0])
    if any(len(data) != size for data in sent):
        return [decode_vector(data) for data in sent]
    # each row: dim and an unused word (4 bytes, one float's width), then dim big-endian floats
    matrix = np.frombuffer(b"".join(sent), dtype=">f4").reshape(len(sent), size // 4)
    return list(matrix[:, 1:].astype(np.float32))


def neighbors_statement(
    sql: EntrySql, scope: MemoryIdentity, ranges: Sequence[tuple[int, int]], flt: RecallFilter
) -> tuple[str, dict[str, Any]]:
    """The SQL of :meth:`EntrySql.neighbors` for ``ranges`` and its bound values."""
    statement = sql.neighbors(
        ranges=len(ranges),
        require_consent=flt.require_consent,
        occurred_after=flt.occurred_after is not None,
    )
    params: dict[str, Any] = dict(_scope_params(scope))
    for i, (low, high) in enumerate(ranges):
        params[f"low{i}"], params[f"high{i}"] = int(low), int(high)
    if flt.occurred_after is not None:
        params["occurred_after"] = flt.occurred_after
    return statement, params


# ---- repositories --------------------------------------------------------------------------------


class _Repository:
    """Base: a session to execute on, the tables and their SQL."""

    __slots__ = ("session", "sql", "tables")

    def __init__(self, session: AsyncSession, tables: PrismTables) -> None:
        self.session = session
        self.tables = tables
        self.sql = EntrySql.for_tables(tables)


class EntryRepository(_Repository):
    """Entries: upserts, reads, consent, deletes, lineage and recall queries."""

    __slots__ = ()

    def _scoped(self, scope: MemoryIdentity) -> Any:
        t = self.tables.entries.c
        return (
            (t.tenant_id == scope.tenant_id)
            & (t.resource_id == scope.resource_id)
            & (t.thread_id == scope.thread_id)
        )

    def _record_select(self) -> Any:
        t = self.tables.entries
        return select(*(t.c[name] for name in RECORD_COLUMNS))

    async def lock_thread(self, scope: MemoryIdentity) -> None:
        """Serialise writers of one thread until the transaction ends (sequence assignment)."""
        await self.session.execute(text(self.sql.lock_thread), {"key": thread_lock_key(scope)})

    async def get(self, scope: MemoryIdentity, ids: Sequence[str]) -> list[MemoryRecord]:
        """The records of ``ids`` in scope, in the order of ``ids`` (each once)."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return []
        # ``= ANY(array)``: one statement (prepared once) whatever the number of ids
        stmt = self._record_select().where(
            self._scoped(scope), _in_array(self.tables.entries.c.id, wanted)
        )
        rows = (await self.session.execute(stmt)).mappings()
        found = {row["id"]: record_from_row(row) for row in rows}
        return [found[i] for i in wanted if i in found]

    async def known_ids(self, scope: MemoryIdentity, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that exist as entries in scope."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return set()
        e = self.tables.entries
        stmt = select(e.c.id).where(self._scoped(scope), _in_array(e.c.id, wanted))
        return set((await self.session.execute(stmt)).scalars())

    async def set_consent(
        self, scope: MemoryIdentity, entry_id: str, consent: MemoryConsent
    ) -> MemoryRecord | None:
        """Replace the consent of one entry; ``None`` if it does not exist."""
        t = self.tables.entries
        stmt = (
            update(t)
            .where(self._scoped(scope), t.c.id == entry_id)
            .values(_consent_values(consent))
            .returning(*(t.c[name] for name in RECORD_COLUMNS))
        )
        row = (await self.session.execute(stmt)).mappings().one_or_none()
        return None if row is None else record_from_row(row)

    async def replace_text(
        self,
        scope: MemoryIdentity,
        entry_id: str,
        new_text: str,
        vector: Vector,
        now: datetime,
        model: str | None = None,
    ) -> MemoryRecord | None:
        """New text and vector at once; ``None`` if the entry does not exist."""
        params: dict[str, Any] = {
            **_scope_params(scope),
            "id": entry_id,
            "text": new_text,
            "embedding": vector,
            "now": now,
            "model": model,
            **lexical_values(new_text),
        }
        result = await self.session.execute(text(self.sql.replace_text), params)
        row = result.mappings().one_or_none()
        return None if row is None else record_from_row(row)

    async def set_legal_hold(self, scope: MemoryIdentity, ids: Sequence[str], hold: bool) -> int:
        """Set or clear legal hold; return how many of ``ids`` exist."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return 0
        t = self.tables.entries
        stmt = (
            update(t).where(self._scoped(scope), _in_array(t.c.id, wanted)).values(legal_hold=hold)
        )
        return _rowcount(await self.session.execute(stmt))

    async def delete(self, scope: MemoryIdentity, ids: Sequence[str]) -> int:
        """Really delete ``ids`` in scope; return how many rows went."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return 0
        t = self.tables.entries
        stmt = delete(t).where(self._scoped(scope), _in_array(t.c.id, wanted))
        return _rowcount(await self.session.execute(stmt))

    async def dependents(
        self, scope: MemoryIdentity, source_ids: Sequence[str], limit: int
    ) -> list[tuple[str, tuple[str, ...]]]:
        """Up to ``limit`` entries whose lineage names any of ``source_ids``, ordered by id."""
        wanted = list(dict.fromkeys(source_ids))
        if not wanted or limit == 0:
            return []
        params = {**_scope_params(scope), "ids": wanted, "limit": limit}
        rows = (await self.session.execute(text(self.sql.dependents), params)).all()
        return [(row[0], tuple(row[1] or ())) for row in rows]

    async def search(self, scope: MemoryIdentity, request: SearchRequest) -> SearchResult:
        """Candidate selection for recall, with the corpus statistics (see :meth:`EntrySql.search`)."""
        statement, params, terms = search_statement(self.sql, scope, request)
        rows = (await self.session.execute(text(statement), params)).mappings().all()
        return search_result(rows, terms)

    async def neighbors(
        self, scope: MemoryIdentity, ranges: Sequence[tuple[int, int]], flt: RecallFilter
    ) -> list[MemoryRecord]:
        """Recallable records of the thread within any inclusive sequence range."""
        if not ranges:
            return []
        statement, params = neighbors_statement(self.sql, scope, ranges, flt)
        rows = (await self.session.execute(text(statement), params)).mappings()
        return [record_from_row(row) for row in rows]

    async def list_by_thread(
        self, scope: MemoryIdentity, after: tuple[int, str] | None, limit: int
    ) -> list[MemoryRecord]:
        """Records after ``(sequence, id)``, ordered by both."""
        if limit == 0:
            return []
        t = self.tables.entries
        stmt = self._record_select().where(self._scoped(scope))
        if after is not None:
            stmt = stmt.where(
                (t.c.sequence > after[0]) | ((t.c.sequence == after[0]) & (t.c.id > after[1]))
            )
        stmt = stmt.order_by(t.c.sequence, t.c.id).limit(limit)
        return [record_from_row(row) for row in (await self.session.execute(stmt)).mappings()]

    async def count(self, scope: MemoryIdentity, status: IndexStatus | None = None) -> int:
        """How many entries the thread holds (with ``status``, only those in it)."""
        t = self.tables.entries
        stmt = select(func.count()).select_from(t).where(self._scoped(scope))
        if status is not None:
            # a constant, not a bound value: the plan PostgreSQL caches for the statement (generic
            # after five runs) can then use the partial ``status = 'pending'`` indexes -- with a
            # bound status the generic plan walked the whole thread (3.7x slower on 4,879 rows)
            stmt = stmt.where(t.c.status == literal_column(f"'{_STATUS_SQL[status]}'"))
        return int((await self.session.execute(stmt)).scalar_one())

    async def list_oldest(
        self,
        scope: MemoryIdentity,
        limit: int,
        occurred_before: datetime | None,
        include_held: bool,
    ) -> list[MemoryRecord]:
        """Records ordered by ``(occurred_at, sequence, id)``."""
        if limit == 0:
            return []
        t = self.tables.entries
        stmt = self._record_select().where(self._scoped(scope))
        if occurred_before is not None:
            stmt = stmt.where(t.c.occurred_at < occurred_before)
        if not include_held:
            stmt = stmt.where(t.c.legal_hold.is_(False))
        stmt = stmt.order_by(t.c.occurred_at, t.c.sequence, t.c.id).limit(limit)
        return [record_from_row(row) for row in (await self.session.execute(stmt)).mappings()]

    async def any_width(self) -> int | None:
        """The width of some stored vector, or ``None`` when none is stored."""
        found = (await self.session.execute(text(self.sql.any_width))).scalar_one_or_none()
        return None if found is None else int(found)


class TombstoneRepository(_Repository):
    """Lineage invalidation tombstones, through the mapped class ``tables.orm.Tombstone``."""

    __slots__ = ()

    async def upsert(self, scope: MemoryIdentity, tombstones: Sequence[Tombstone]) -> None:
        """Insert tombstones; an existing ``(entry_id, cause_id, reason)`` takes the new time.

        One ORM-enabled ``INSERT ... ON CONFLICT DO UPDATE`` for the whole batch.
        """
        latest: dict[tuple[str, str, str], Tombstone] = {}
        for tombstone in tombstones:
            latest[(tombstone.entry_id, tombstone.cause_id, tombstone.reason)] = tombstone
        if not latest:
            return
        model = self.tables.orm.Tombstone
        stmt = pg_insert(model).values(
            [
                {
                    "tenant_id": scope.tenant_id,
                    "resource_id": scope.resource_id,
                    "thread_id": scope.thread_id,
                    "entry_id": tombstone.entry_id,
                    "cause_id": tombstone.cause_id,
                    "reason": tombstone.reason,
                    "created_at": tombstone.created_at,
                }
                for tombstone in latest.values()
            ]
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=_primary_key(model.__table__),
            set_={"created_at": stmt.excluded.created_at},
        )
        await self.session.execute(stmt)

    async def remove(self, scope: MemoryIdentity, cause_id: str, reason: TombstoneReason) -> int:
        """Delete the tombstones ``cause_id`` caused with ``reason``; count them."""
        model = self.tables.orm.Tombstone
        stmt = delete(model).where(
            model.tenant_id == scope.tenant_id,
            model.resource_id == scope.resource_id,
            model.thread_id == scope.thread_id,
            model.cause_id == cause_id,
            model.reason == reason,
        )
        return _rowcount(await self.session.execute(stmt))


class ShareGrantRepository(_Repository):
    """Parent -> child share grants, through the mapped class ``tables.orm.ShareGrant``."""

    __slots__ = ()

    @staticmethod
    def _grant(row: ShareGrantRow) -> ShareGrant:
        return ShareGrant(
            tenant_id=row.tenant_id,
            resource_id=row.resource_id,
            parent_thread_id=row.parent_thread_id,
            child_thread_id=row.child_thread_id,
            source_ids=tuple(row.source_ids),
            created_at=row.created_at,
            expires_at=row.expires_at,
        )

    async def put(self, grant: ShareGrant) -> ShareGrant:
        """Create or replace the grant.

        One ORM-enabled ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING``, so concurrent writers
        of the same grant never collide; the returned row lands in the session's identity map.
        """
        model = self.tables.orm.ShareGrant
        stmt = pg_insert(model).values(
            tenant_id=grant.tenant_id,
            resource_id=grant.resource_id,
            parent_thread_id=grant.parent_thread_id,
            child_thread_id=grant.child_thread_id,
            source_ids=list(grant.source_ids),
            created_at=grant.created_at,
            expires_at=grant.expires_at,
        )
        upsert = stmt.on_conflict_do_update(
            index_elements=_primary_key(model.__table__),
            set_={
                "source_ids": stmt.excluded.source_ids,
                "created_at": stmt.excluded.created_at,
                "expires_at": stmt.excluded.expires_at,
            },
        ).returning(model)
        row = (await self.session.scalars(upsert, execution_options=_POPULATE)).one()
        return self._grant(row)

    async def get(self, tenant: str, resource: str, parent: str, child: str) -> ShareGrant | None:
        """The grant, expired or not (``session.get`` by primary key)."""
        row = await self.session.get(self.tables.orm.ShareGrant, (tenant, resource, parent, child))
        return None if row is None else self._grant(row)

    async def delete(self, tenant: str, resource: str, parent: str, child: str) -> int:
        """Delete the grant; 1 if there was one."""
        model = self.tables.orm.ShareGrant
        stmt = delete(model).where(
            model.tenant_id == tenant,
            model.resource_id == resource,
            model.parent_thread_id == parent,
            model.child_thread_id == child,
        )
        return _rowcount(await self.session.execute(stmt))


class IndexingRepository(_Repository):
    """The deferred-indexing ledger on the entries table: claims, results, failures."""

    __slots__ = ()

    async def claim(
        self,
        scope: MemoryIdentity | None,
        *,
        limit: int,
        worker_id: str,
        lease_seconds: float,
        now: datetime,
        tenant_id: str | None = None,
    ) -> list[ClaimedEntry]:
        """Lease up to ``limit`` due pending rows (of ``scope``, else of ``tenant_id``, else of any
        scope), ordered by sequence then id."""
        if limit == 0:
            return []
        statement, params = claim_statement(
            self.sql,
            scope,
            limit=limit,
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            now=now,
            tenant_id=tenant_id,
        )
        return claimed_entries((await self.session.execute(text(statement), params)).mappings())

    async def claim_in(
        self,
        scopes: Sequence[MemoryIdentity],
        *,
        limit: int,
        per_scope: int,
        worker_id: str,
        lease_seconds: float,
        now: datetime,
    ) -> list[ClaimedEntry]:
        """Lease up to ``limit`` due rows of ``scopes``, at most ``per_scope`` each, in one
        statement; the scopes are served in the order given, each scope's rows by sequence."""
        if limit == 0 or per_scope == 0 or not scopes:
            return []
        statement, params = claim_in_statement(
            self.sql,
            scopes,
            limit=limit,
            per_scope=per_scope,
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            now=now,
        )
        rows = (await self.session.execute(text(statement), params)).mappings()
        return claimed_entries(rows, scopes)

    async def complete(
        self,
        items: Sequence[tuple[ClaimedEntry, Vector]],
        *,
        worker_id: str,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Store vectors where lease and revision match (one statement); count them."""
        if not items:
            return 0
        params = {
            "tenants": [item.scope.tenant_id for item, _ in items],
            "resources": [item.scope.resource_id for item, _ in items],
            "threads": [item.scope.thread_id for item, _ in items],
            "ids": [item.id for item, _ in items],
            "revisions": [item.revision for item, _ in items],
            "embeddings": [encode_vector(vector) for _, vector in items],
            "worker": worker_id,
            "now": now,
            "model": model,
        }
        return _rowcount(await self.session.execute(text(self.sql.complete), params))

    async def fail(
        self,
        item: ClaimedEntry,
        *,
        worker_id: str,
        error: str,
        retry_at: datetime | None,
        now: datetime,
    ) -> None:
        """Record a failure while the lease matches; release the lease either way."""
        params = {
            **_scope_params(item.scope),
            "id": item.id,
            "revision": item.revision,
            "worker": worker_id,
            "error": error,
            "retry_at": retry_at,
            "new_status": "pending" if retry_at is not None else "failed",
            "now": now,
        }
        await self.session.execute(text(self.sql.fail), params)

    async def release(self, worker_id: str) -> int:
        """Drop every lease ``worker_id`` holds; count them."""
        return _rowcount(await self.session.execute(text(self.sql.release), {"worker": worker_id}))

    async def requeue_failed(self, scope: MemoryIdentity, ids: Sequence[str] | None) -> int:
        """Failed rows (all of the thread's, or ``ids``) become pending with attempts 0."""
        t = self.tables.entries
        stmt = update(t).where(
            t.c.tenant_id == scope.tenant_id,
            t.c.resource_id == scope.resource_id,
            t.c.thread_id == scope.thread_id,
            t.c.status == "failed",
        )
        if ids is not None:
            wanted = list(dict.fromkeys(ids))
            if not wanted:
                return 0
            stmt = stmt.where(_in_array(t.c.id, wanted))
        stmt = stmt.values(
            status="pending",
            attempts=0,
            last_error=None,
            next_attempt_at=None,
            claimed_by=None,
            claimed_until=None,
        )
        return _rowcount(await self.session.execute(stmt))

    async def status(
        self, scope: MemoryIdentity, ids: Sequence[str]
    ) -> dict[str, tuple[IndexStatus, str | None]]:
        """``id -> (status, last_error)`` for the ids that exist."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return {}
        t = self.tables.entries
        stmt = select(t.c.id, t.c.status, t.c.last_error).where(
            t.c.tenant_id == scope.tenant_id,
            t.c.resource_id == scope.resource_id,
            t.c.thread_id == scope.thread_id,
            # one array parameter, however many ids are watched (no bind-parameter limit)
            _in_array(t.c.id, wanted),
        )
        return {row.id: (row.status, row.last_error) for row in await self.session.execute(stmt)}

    async def store_vectors(
        self,
        scope: MemoryIdentity,
        items: Sequence[tuple[str, int, Vector]],
        model: str | None = None,
    ) -> int:
        """Set vectors where the revision matches (one statement); count them."""
        if not items:
            return 0
        params = {
            **_scope_params(scope),
            "ids": [entry_id for entry_id, _, _ in items],
            "revisions": [int(revision) for _, revision, _ in items],
            "embeddings": [encode_vector(vector) for _, _, vector in items],
            "model": model,
        }
        return _rowcount(await self.session.execute(text(self.sql.store_vectors), params))


class WorkingRepository(_Repository):
    """Versioned working-memory documents (one per tenant, resource and thread or none), through
    the mapped class ``tables.orm.WorkingMemory``.

    Writes stay single statements so concurrent writers never lose an update: an ORM-enabled
    ``INSERT ... ON CONFLICT`` (unconditional write, or create at version 0) or a conditional
    ``UPDATE ... WHERE version = :expected`` (optimistic concurrency), each ``RETURNING`` the
    mapped row.
    """

    __slots__ = ()

    @staticmethod
    def _key(tenant: str, resource: str, thread: str | None) -> tuple[str, str, str]:
        return (tenant, resource, _WORKING_NO_THREAD if thread is None else thread)

    @staticmethod
    def _record(row: WorkingMemoryRow | None) -> WorkingMemoryRecord | None:
        if row is None:
            return None
        return WorkingMemoryRecord(
            version=int(row.version), data=dict(row.data), updated_at=row.updated_at
        )

    async def get(
        self, tenant: str, resource: str, thread: str | None
    ) -> WorkingMemoryRecord | None:
        """The current document, or ``None`` (``session.get`` by primary key, re-read)."""
        row = await self.session.get(
            self.tables.orm.WorkingMemory,
            self._key(tenant, resource, thread),
            populate_existing=True,
        )
        return self._record(row)

    async def put(
        self,
        tenant: str,
        resource: str,
        thread: str | None,
        data: Mapping[str, Any],
        *,
        expected_version: int | None,
        now: datetime,
    ) -> WorkingMemoryRecord | None:
        """Write the next version atomically; ``None`` when ``expected_version`` did not match."""
        model = self.tables.orm.WorkingMemory
        tenant, resource, thread_key = self._key(tenant, resource, thread)
        document = dict(data)
        if expected_version is None or expected_version == 0:
            stmt = pg_insert(model).values(
                tenant_id=tenant,
                resource_id=resource,
                thread_key=thread_key,
                version=1,
                data=document,
                updated_at=now,
            )
            index = _primary_key(model.__table__)
            if expected_version is None:
                upsert = stmt.on_conflict_do_update(
                    index_elements=index,
                    set_={
                        "version": model.version + 1,
                        "data": stmt.excluded.data,
                        "updated_at": stmt.excluded.updated_at,
                    },
                )
            else:
                upsert = stmt.on_conflict_do_nothing(index_elements=index)
            written = await self.session.scalars(
                upsert.returning(model), execution_options=_POPULATE
            )
            return self._record(written.one_or_none())
        conditional = (
            update(model)
            .where(
                model.tenant_id == tenant,
                model.resource_id == resource,
                model.thread_key == thread_key,
                model.version == expected_version,
            )
            .values(version=model.version + 1, data=document, updated_at=now)
            .returning(model)
        )
        found = await self.session.scalars(conditional, execution_options=_POPULATE)
        return self._record(found.one_or_none())

    async def version(self, tenant: str, resource: str, thread: str | None) -> int:
        """The current version, 0 when there is no document."""
        found = await self.get(tenant, resource, thread)
        return 0 if found is None else found.version


_POPULATE: dict[str, Any] = {"populate_existing": True}
"""Rows an ORM statement returns replace what the identity map held (the database wins)."""


def _primary_key(table: Table) -> list[str]:
    """The primary-key column names of ``table`` (the ``ON CONFLICT`` target)."""
    return [column.name for column in table.primary_key]


def _in_array(column: Any, values: Sequence[str]) -> Any:
    """``column = ANY(:array)``: one bound parameter however many values (``IN`` binds one each,
    and a statement may bind at most 32,767)."""
    return column == any_(bindparam(None, list(values), type_=ARRAY(Text)))


def _rowcount(result: Any) -> int:
    count = getattr(result, "rowcount", -1)
    return max(int(count), 0)
