# ruff: noqa: S608 - SQL text is built only from validated, quoted identifiers; values are bound.
"""Recall's statements: the candidate search with its corpus statistics, and the neighbours.

Each statement's docstring says which index it expects; :func:`search_statement` and
:func:`neighbors_statement` pick a statement's shape and bind its values.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from ..._columns import RANKED_COLUMNS
from ..._windowed import WINDOW_MARGIN
from ...lexical import BM25_B, BM25_K1, MAX_TERM_CHARS
from ...models import MemoryIdentity
from ...stores.base import RecallFilter, SearchRequest
from ..rows import DEFERRED_COLUMNS, scope_params
from ..tables import RESOURCE_SHARED
from ._base import TableSql, quote

__all__ = ["RecallSql", "neighbors_statement", "search_statement"]

# ---- the scope's keys --------------------------------------------------------------------------
# In :meth:`RecallSql.search` the resource and thread keys reach the plan as init-plan parameters:
# still index keys, but estimated alike for every thread, so a custom plan costs what the generic
# one does and PostgreSQL (plan_cache_mode auto) keeps the generic plan -- no planning per recall,
# whatever mix of thread sizes a connection has seen. The tenant stays a plain
# ``tenant_id = :tenant`` equality, which a shard router (Citus) prunes by: measured with one
# 36,000-row tenant beside ten of 200 rows, in either order, the generic plan is kept all the
# same (tests/postgres/test_generic_plan.py).

TENANT = ":tenant"
"""The recalled tenant: a plain bound value."""
RESOURCE = "(SELECT CAST(:resource AS text))"
"""The recalled resource, as an init-plan parameter."""
THREAD = "(SELECT CAST(:thread AS text))"
"""The recalled thread, as an init-plan parameter."""
PARENT = "(SELECT CAST(:parent AS text))"
"""The parent thread whose granted rows a child recalls, as an init-plan parameter."""

# ---- the candidate pools ---------------------------------------------------------------------

_OWN_THREAD = f"e.tenant_id = {TENANT} AND e.resource_id = {RESOURCE} AND e.thread_id = {THREAD}"
"""The recalled thread's own rows."""

_PARENT_ROWS = (
    f"e.tenant_id = {TENANT} AND e.resource_id = {RESOURCE} AND e.thread_id = {PARENT} "
    "AND e.id = ANY(CAST(:shared_ids AS text[]))"
)
"""The parent's rows granted to the thread (``:shared_ids``)."""

_LINEAGE = "((e.metadata -> '_lineage'::text) -> 'sourceIds'::text)"
"""The row's lineage sources (:data:`~prism_memory.postgres.tables.LINEAGE_SOURCE_IDS`)."""

_NOT_KILLED = (
    "(d.kills IS NULL OR (NOT COALESCE(CAST(d.kills ->> e.id AS timestamptz) "
    f"> e.written_at, false) AND ({_LINEAGE} IS NULL OR NOT EXISTS (SELECT 1 FROM "
    f"jsonb_array_elements_text({_LINEAGE}) AS src(id) "
    "WHERE CAST(d.kills ->> src.id AS timestamptz) > e.written_at))))"
)
"""A row of the thread is not invalidated: neither its own kill time (``dead``) nor one of its
lineage sources' is later than its ``written_at``."""

# ---- distances and terms -----------------------------------------------------------------------

_OWN_DISTANCE = (
    "CASE WHEN e.window_embeddings IS NULL THEN e.embedding <=> :query "
    "ELSE LEAST(e.embedding <=> :query, (SELECT min(w.v <=> :query) "
    f"FROM unnest(e.window_embeddings) AS w(v)) + CAST({WINDOW_MARGIN!r} AS float8)) END"
)
"""The row's distance to ``:query`` (1 - cosine): an entry with later windows is as near as its
best window with the margin (:mod:`prism_memory.windows`), LEAST(first window, nearest later
window + margin); a row without windows reads only its own vector."""

_DISTANCE = f"COALESCE(NULLIF({_OWN_DISTANCE}, 'NaN'::float8), 1.0)"
""":data:`_OWN_DISTANCE`, a zero vector's NaN read as unrelated (1); the wrapping also keeps any
HNSW index out of per-thread recall: the sort is exact, so a filter cannot make it under-return."""

_MATCHED = (
    ", CASE WHEN e.text_tsv @@ CAST(:any_term AS tsquery) THEN ARRAY("
    "SELECT q.ord FROM unnest(CAST(:term_queries AS tsquery[])) WITH ORDINALITY AS q(tsq, ord) "
    "WHERE e.text_tsv @@ q.tsq ORDER BY q.ord) ELSE '{}'::bigint[] END AS matched"
)
"""The ordinals (1-based, in the order of ``:terms``, which is sorted) of the query terms the row
holds; rows without any (most of them) skip the per-term probes. Tested on the row the scope's
scan already holds, where it costs next to nothing, not through the GIN index (``ix_tsv``): that
index spans the table, so a common term's bitmap is most of it (measured: 5.5 ms for 41,000 of
100,000 rows, then a second heap pass over the thread's holders)."""

_KEPT_OF_ROW = (
    "v.tenant_id = e.tenant_id AND v.resource_id = e.resource_id "
    "AND v.thread_id = e.thread_id AND v.entry_id = e.id "
    "AND v.model = CAST(:model AS text) AND v.revision = e.revision"
)
"""The current vector of ``:model`` kept beside the row (the vectors' primary key)."""

# ---- the corpus statistics and the two legs ------------------------------------------------------

_STATS = (
    "stats AS (SELECT count(*) AS documents, "
    "COALESCE(sum(term_count), 0) AS total_length FROM eligible)"
)
"""The corpus: how many rows, and their terms in all."""

_NEAREST_TOP = (
    "nearest_top AS (SELECT row_ctid FROM eligible ORDER BY distance, sequence, id LIMIT :limit)"
)
"""The dense leg: the ``:limit`` nearest rows."""

_K1, _B = f"CAST({BM25_K1!r} AS float8)", f"CAST({BM25_B!r} AS float8)"
_IDF = (
    "ln(CAST(1.0 AS float8) + (CAST(s.documents - f.df AS float8) + CAST(0.5 AS float8))"
    " / (CAST(f.df AS float8) + CAST(0.5 AS float8)))"
)
_AVERAGE_LENGTH = "(CAST(s.total_length AS float8) / CAST(s.documents AS float8))"

_LEXICAL_CTES = (
    # the rows holding a query term, grouped by which terms they hold: a handful of groups, so
    # the frequencies and the terms' summed weights are computed per group, never per row
    "lexical AS MATERIALIZED (SELECT row_ctid, id, sequence, term_count, matched FROM eligible "
    "WHERE cardinality(matched) > 0)",
    "holdings AS (SELECT matched, count(*) AS holders FROM lexical GROUP BY matched)",
    "frequencies AS (SELECT m.ord, CAST(sum(h.holders) AS bigint) AS df "
    "FROM holdings h, unnest(h.matched) AS m(ord) GROUP BY m.ord)",
    f"weights AS (SELECT f.ord, {_IDF} AS idf FROM frequencies f CROSS JOIN stats s)",
    # MATERIALIZED: inlined, the planner moved the correlated sum back into the sort key (per row)
    "gains AS MATERIALIZED (SELECT h.matched, (SELECT sum(w.idf ORDER BY w.ord) FROM weights w "
    "WHERE w.ord = ANY(h.matched)) AS gain FROM holdings h)",
    "lexical_top AS (SELECT el.row_ctid FROM lexical el JOIN gains g ON g.matched = el.matched "
    "CROSS JOIN stats s ORDER BY g.gain"
    f" * ({_K1} + CAST(1.0 AS float8)) / (CAST(1.0 AS float8) + {_K1} * "
    f"(CAST(1.0 AS float8) - {_B} + {_B} * el.term_count / {_AVERAGE_LENGTH})) DESC, "
    "el.sequence, el.id LIMIT :limit)",
)
"""The lexical leg: each term's document frequency and weight, and the ``:limit`` rows of the
highest :func:`prism_memory.lexical.leg_score`, written operation by operation in float8 so that
both backends select the same rows. The rows holding a term (``lexical``, read from the corpus
once) are grouped by the set of terms they hold (``holdings``, ``gains``): a term's frequency sums
its groups' sizes, and a row's summed term weights (in term order, as the ranking adds them) is
its group's, so the per-row work is one hash probe -- a correlated sum per row (a sort and two
scans each) cost a 13,000-row thread ~10 ms with a common query term."""

_FREQUENCIES = (
    "ARRAY(SELECT ord FROM frequencies ORDER BY ord) AS df_ords, "
    "ARRAY(SELECT df FROM frequencies ORDER BY ord) AS df_counts"
)
"""The terms' document frequencies, by ordinal, for the ranking's BM25."""

# ---- what the statement returns ------------------------------------------------------------------

_PENDING_BY_MODEL = " + (SELECT count(*) FROM scanned WHERE own AND raw_distance IS NULL)"
"""By generation, the thread's own rows without a vector of ``:model`` are pending too."""

_SEND_WINDOWS = (
    "ARRAY(SELECT vector_send(w.v) FROM unnest(e.window_embeddings) "
    "WITH ORDINALITY AS w(v, n) ORDER BY w.n)"
)
"""The row's later windows' vectors, in order, in pgvector's binary form."""

# ---- the candidates' record columns ----------------------------------------------------------
# A candidate's record is read for the hits alone (a recall keeps top_k of its 4 x top_k
# candidates a leg), but decoding it cost the client on every row: asyncpg decoded the record's
# 17 columns the re-rank never reads (three timestamps, the consent, the metadata's text ...) in
# ~1.7 us a row: 220 of the 670 us a K=32 search's rows took to fetch (128 rows; 45 of 290 us at
# K=10, 40 rows). So every candidate carries the columns the re-rank reads
# (:data:`~prism_memory._columns.RANKED_COLUMNS`) and its vectors; the *others* come as typed
# columns only for the rows likeliest to be hits -- the first top_k rows of each leg
# (:data:`_EAGER`: recall asks 4 x top_k a leg) -- and for every other row as one ``bytea``,
# ``record_send`` of those columns, which asyncpg hands over as it is and
# :func:`~prism_memory.postgres._codec.decode_record` decodes in Python only when that row
# becomes a hit. The answer is the same, record for record, from one statement and so one
# snapshot: which rows are eager is only a guess about the hits (a CTE scan reads a leg in its
# order, but nothing depends on it), never a condition of a correct answer. Measured (2026-12-06,
# a shared machine at load 7-10, so +-10%): fetching a search's rows took 528 -> 492 us of client
# CPU at K=32 and 285 -> 256 us at K=10 (benchmarks/columns_cpu.py, 10k rows); a recall's client
# CPU 1,695 -> 1,610 us at K=32 and 1,148 -> 1,086 us at K=10 (benchmarks/speed.py, 20k rows).
# A hit came from a deferred row for 0.6-1.6% of the hits on speed.py's data, but on the
# development sets (MiniLM, benchmarks/retrieval.py's protocol) for 14% / 11% / 5% of the hits
# at K=5 / 10 / 25 in 52% / 60% / 50% of LoCoMo's 999 recalls, and 19% / 13% / 6% in 55% / 64% /
# 56% of BEAM's 179: the fusion re-scores with true term counts, the chance margin and an
# adaptive weight, so a hit is often below top_k in both legs. Hence, weighed against: (a) the
# deferred columns read by a second statement when a hit falls outside the eager rows: a
# second round trip for more than half of the dev sets' recalls, a second snapshot whose rows
# may have changed, and candidates without their records until awaited (a new store contract);
# (b) every record as one ``bytea`` decoded in Python for each hit: 3x a typed row's record
# (decode_record and the record: 37 against 12 us, loaded), more than it saves.

_EAGER = "(CAST(:limit AS bigint) + 3) / 4"
"""How many rows of each leg come with their deferred columns typed: recall asks 4 x top_k a
leg (``:limit``), and its likeliest hits are the first top_k of each."""

_DEFERRED_SQL = {
    name: "CAST(e.metadata AS text)" if name == "metadata" else f"e.{quote(name)}"
    for name in DEFERRED_COLUMNS
}
"""Each deferred column's SQL: ``metadata`` as its JSON text (parsed only for a record)."""


class RecallSql(TableSql):
    """The read statements of recall over one table set."""

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
        by_model: bool = False,
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

        ``active_model`` is the model of the active vector generation (NULL without any), read
        in the statement's snapshot, so it is the generation in force when the candidates were.
        ``by_model`` (a store with more than one vector generation) ranks each row's vector of
        the generation ``:model``: its own when it is of that model, else its current one kept
        beside it (key and revision: one primary-key probe, made only for such rows). The pools
        are read as without it; a row without a vector of the model is not in the corpus and
        counts as pending, and the candidates carry that vector and ``:model`` as their
        ``embedding_model``.

        Every candidate carries the columns the re-rank reads; the record's others come typed
        for the first quarter of each leg (top_k of recall's 4 x top_k) and as one ``record_send`` value (``deferred``)
        for the rest (:data:`~prism_memory.postgres.rows.DEFERRED_COLUMNS`, see the module's notes).
        """
        pools = self._pools(
            require_consent=require_consent,
            occurred_after=occurred_after,
            shared=shared,
            resource_wide=resource_wide,
        )
        matched = _MATCHED if lexical else ""
        if by_model:
            ctes = [self._dead, *self._scanned_by_model(pools, matched, lexical=lexical)]
        else:
            ctes = [self._dead, self._eligible(pools, matched)]
        ctes += [_STATS, _NEAREST_TOP]
        chosen = "SELECT row_ctid FROM nearest_top"
        eager = f"(SELECT row_ctid FROM nearest_top LIMIT {_EAGER})"
        frequencies = "NULL::bigint[] AS df_ords, NULL::bigint[] AS df_counts"
        if lexical:
            ctes += _LEXICAL_CTES
            chosen += " UNION SELECT row_ctid FROM lexical_top"
            eager += f" UNION (SELECT row_ctid FROM lexical_top LIMIT {_EAGER})"
            frequencies = _FREQUENCIES
        pending = self._pending + (_PENDING_BY_MODEL if by_model else "")
        columns = self._candidate_columns_by_model if by_model else self._candidate_columns
        active = f"(SELECT g.model FROM {self.generations} g WHERE g.active) AS active_model"
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
        # columns NULL). ``eager`` marks the rows whose deferred columns come typed.
        return (
            f"WITH {', '.join(ctes)} "
            f"SELECT {columns}, s.documents, s.total_length, {frequencies}, "
            f"{pending} AS pending, {active} "
            f"FROM stats s LEFT JOIN (SELECT e.*, e.ctid = ANY(ARRAY({eager})) AS eager "
            f"FROM {self.entries} e WHERE e.ctid = ANY(ARRAY({chosen})) OFFSET 0) AS e "
            f"ON e.tenant_id = {TENANT} AND e.resource_id = {RESOURCE}"
        )

    # ---- the fragments of :meth:`search`, in the order the statement reads them ------------

    @functools.cached_property
    def _dead(self) -> str:
        """``dead``: the thread's tombstones, read once and folded into one kill time per entry id
        (a ``jsonb`` object; NULL when the thread has none)."""
        return (
            "dead AS (SELECT jsonb_object_agg(k.entry_id, k.kill) AS kills FROM ("
            "SELECT entry_id, max(CASE WHEN reason = 'corrected' THEN created_at "
            f"ELSE 'infinity'::timestamptz END) AS kill FROM {self.invalidation} "
            f"WHERE tenant_id = {TENANT} AND resource_id = {RESOURCE} AND thread_id = {THREAD} "
            "GROUP BY entry_id) AS k)"
        )

    def _pools(
        self, *, require_consent: bool, occurred_after: bool, shared: bool, resource_wide: bool
    ) -> list[tuple[str, str]]:
        """``(FROM, WHERE)`` of each pool of candidates: the thread's own rows (joined with their
        tombstones' kill times, ``dead``), a parent's granted rows (``shared``), the resource's
        travelling rows of its other threads (``resource_wide``)."""
        where = self.recallable(require_consent=require_consent, occurred_after=occurred_after)
        own_rules = self._row_rules(
            require_consent=require_consent, occurred_after=occurred_after, alias="e"
        )
        own_where = " AND ".join([*own_rules, _NOT_KILLED])
        pools = [(f"dead d CROSS JOIN {self.entries} e", f"{_OWN_THREAD} AND {own_where}")]
        if shared:
            # with a resource-wide recall, granted rows that travel come in through that pool
            granted = _PARENT_ROWS + (" AND e.consent_scope = 'thread'" if resource_wide else "")
            pools.append((f"{self.entries} e", f"{granted} AND {where}"))
        if resource_wide:
            travelling = (
                f"e.tenant_id = {TENANT} AND e.resource_id = {RESOURCE} "
                f"AND e.thread_id <> {THREAD} AND e.{RESOURCE_SHARED[1:-1]} AND {where}"
            )
            pools.append((f"{self.entries} e", travelling))
        return pools

    @staticmethod
    def _eligible(pools: list[tuple[str, str]], matched: str) -> str:
        """``eligible``: the corpus, one narrow row per recallable row with a vector of its own
        (distance, term count, the query terms it holds), the pools' union, materialised."""
        eligible = " UNION ALL ".join(
            f"SELECT e.ctid AS row_ctid, e.id, e.sequence, {_DISTANCE} AS distance, "
            f"e.term_count{matched} "
            f"FROM {source} WHERE {pool} AND e.embedding IS NOT NULL"
            for source, pool in pools
        )
        return f"eligible AS MATERIALIZED ({eligible})"

    def _scanned_by_model(
        self, pools: list[tuple[str, str]], matched: str, *, lexical: bool
    ) -> list[str]:
        """``scanned`` and ``eligible`` of a recall by generation: each row's distance to its
        vector of ``:model`` (its own, or the current one kept beside it; NULL: none).

        The pools read exactly as without generations; the kept vector is one probe of the
        vectors' primary key in the select list. Joined instead, the planner moved the entries
        outside the folded tombstones and aggregated those once per row: quadratic in the
        thread's size (0.4-1 s for a 2,700-row thread). ``scanned`` also counts the thread's own
        rows still without a vector, which are pending under this model."""
        scanned = " UNION ALL ".join(
            f"SELECT e.ctid AS row_ctid, e.id, e.sequence, e.term_count{matched}, "
            f"{'true' if index == 0 else 'false'} AS own, "
            f"CASE WHEN {self.own_vector_of('e')} THEN {_OWN_DISTANCE} "
            f"ELSE (SELECT v.embedding <=> :query FROM {self.vectors} v WHERE {_KEPT_OF_ROW} "
            f"AND v.embedding IS NOT NULL) END AS raw_distance FROM {source} WHERE {pool}"
            for index, (source, pool) in enumerate(pools)
        )
        return [
            f"scanned AS MATERIALIZED ({scanned})",
            "eligible AS MATERIALIZED (SELECT row_ctid, id, sequence, "
            "COALESCE(NULLIF(raw_distance, 'NaN'::float8), 1.0) AS distance, term_count"
            f"{', matched' if lexical else ''} FROM scanned WHERE raw_distance IS NOT NULL)",
        ]

    @functools.cached_property
    def _pending(self) -> str:
        """How many of the thread's rows wait for a vector (the partial pending index), so a
        recall needs no second round trip for ``RecallResult.pending``."""
        return (
            f"(SELECT count(*) FROM {self.entries} p WHERE p.status = 'pending' "
            f"AND p.tenant_id = {TENANT} AND p.resource_id = {RESOURCE} "
            f"AND p.thread_id = {THREAD})"
        )

    @functools.cached_property
    def _candidate_columns(self) -> str:
        """A candidate's columns: :meth:`_record_columns`, its vector and its later windows'
        vectors, both in pgvector's binary form."""
        return (
            f"{self._record_columns()}, vector_send(e.embedding) AS embedding, "
            f"CASE WHEN e.window_embeddings IS NOT NULL THEN {_SEND_WINDOWS} END AS windows"
        )

    @functools.cached_property
    def _candidate_columns_by_model(self) -> str:
        """:attr:`_candidate_columns` of a recall by generation: ``:model`` as the record's
        ``embedding_model``, the row's vector of that model, and the windows only with the row's
        own vector (they are of its own model)."""
        own_vector = self.own_vector_of("e")
        record = self._record_columns("CAST(:model AS text)")
        return (
            f"{record}, CASE WHEN {own_vector} THEN vector_send(e.embedding) ELSE (SELECT "
            f"vector_send(v.embedding) FROM {self.vectors} v WHERE {_KEPT_OF_ROW}) END AS embedding"
            f", CASE WHEN e.window_embeddings IS NOT NULL AND {own_vector} "
            f"THEN {_SEND_WINDOWS} END AS windows"
        )

    @staticmethod
    def _record_columns(model: str | None = None) -> str:
        """A candidate's record columns: those the re-rank reads (``model``: the SQL of its
        ``embedding_model``), then the deferred ones (:data:`~prism_memory.postgres.rows.
        DEFERRED_COLUMNS`) typed for an ``eager`` row and NULL for the others, which send them as
        one ``record_send`` value, ``deferred``."""
        ranked = [
            f"{model} AS embedding_model"
            if name == "embedding_model" and model is not None
            else f"e.{quote(name)}"
            for name in RANKED_COLUMNS
        ]
        typed = [
            f"CASE WHEN e.eager THEN {sql} END AS {quote(n)}" for n, sql in _DEFERRED_SQL.items()
        ]
        sent = (
            f"CASE WHEN NOT e.eager THEN record_send(ROW({', '.join(_DEFERRED_SQL.values())})) END"
        )
        return ", ".join([*ranked, *typed, f"{sent} AS deferred"])

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


def search_statement(
    sql: RecallSql, scope: MemoryIdentity, request: SearchRequest, *, by_model: bool = False
) -> tuple[str, dict[str, Any], list[str]]:
    """The candidate SQL of ``request`` (see :meth:`RecallSql.search`), its bound values and the
    query terms in the order the statement numbers them; ``by_model``: the store holds more than
    one vector generation, and each row's vector of ``request.model`` is ranked."""
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
        by_model=by_model,
    )
    params: dict[str, Any] = {
        **scope_params(scope),
        "query": request.vector,
        "limit": request.limit,
    }
    if by_model:
        params["model"] = request.model
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
    sql: RecallSql, scope: MemoryIdentity, ranges: Sequence[tuple[int, int]], flt: RecallFilter
) -> tuple[str, dict[str, Any]]:
    """The SQL of :meth:`RecallSql.neighbors` for ``ranges`` and its bound values."""
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
