"""The quality gate of a model switch: the same recalls ranked with each model, compared."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .._clock import utcnow
from ..embedding import Embedder, embedder_model
from ..errors import ConfigurationError, QualityGateError, ValidationError
from ..lexical import query_terms
from ..models import MemoryIdentity, Vector
from ..ranking import rerank
from ..stores._records import RecallFilter, SearchRequest
from ..stores._role_entries import EntryStore
from ..stores._role_generations import VectorGenerations
from ..windows import embed_whole

__all__ = [
    "GateQuery",
    "GateReport",
    "compare_generations",
    "read_gate_queries",
    "read_gate_queries_file",
]

ENTRIES_PER_THREAD = 5
"""How many entries of each sampled thread :func:`compare_generations` uses as queries."""
_THREAD_PAGE = 500
"""The most entries of a sampled thread read to pick them from."""


@dataclass(frozen=True, slots=True)
class GateQuery:
    """One labelled query of the gate: a recall of one thread and the entries it should find."""

    scope: MemoryIdentity
    query: str
    expected_ids: frozenset[str]


def read_gate_queries(lines: Iterable[str]) -> list[GateQuery]:
    """Labelled queries from JSON Lines ``{"tenant_id", "resource_id", "thread_id", "query",
    "expected_ids": [...]}`` (blank lines skipped). :class:`~prism_memory.errors.ValidationError`
    naming the line (never its content) on a line that is not one."""
    found: list[GateQuery] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise ValidationError(f"queries line {number}: not JSON") from None
        if not isinstance(row, dict):
            raise ValidationError(f"queries line {number}: not a JSON object")
        query, expected = row.get("query"), row.get("expected_ids")
        if not isinstance(query, str) or not query.strip():
            raise ValidationError(f"queries line {number}: query must be a non-empty string")
        if (
            not isinstance(expected, list)
            or not expected
            or not all(isinstance(i, str) for i in expected)
        ):
            raise ValidationError(
                f"queries line {number}: expected_ids must be a non-empty list of strings"
            )
        try:
            scope = MemoryIdentity(
                tenant_id=row.get("tenant_id"),
                resource_id=row.get("resource_id"),
                thread_id=row.get("thread_id"),
            )
        except Exception:  # noqa: BLE001 - pydantic's error would repeat the value
            raise ValidationError(
                f"queries line {number}: tenant_id, resource_id and thread_id must be keys"
            ) from None
        found.append(GateQuery(scope, query, frozenset(expected)))
    return found


def read_gate_queries_file(path: str | Path) -> list[GateQuery]:
    """:func:`read_gate_queries` of a file (UTF-8)."""
    with Path(path).open(encoding="utf-8") as handle:
        return read_gate_queries(handle)


@dataclass(frozen=True, slots=True)
class GateReport:
    """What :func:`compare_generations` measured; :meth:`check` is the gate."""

    old_model: str
    new_model: str
    k: int
    threads: int
    """Threads sampled for the overlap."""
    sampled_queries: int
    """Entries of those threads used as queries."""
    overlap: float | None
    """Mean share of the old model's top-K ids the new model also ranks in its top K, over the
    sampled queries (``None``: none sampled)."""
    labelled_queries: int
    old_recall: float | None
    """Mean recall@K of the old model over the labelled queries (``None``: none given)."""
    new_recall: float | None
    missing: int
    """Indexed entries without a current vector of the new model when measured (they are not
    in its corpus, so they lower its scores)."""

    @property
    def drop(self) -> float | None:
        """How much lower the new model's recall@K is than the old one's (negative: better)."""
        if self.old_recall is None or self.new_recall is None:
            return None
        return self.old_recall - self.new_recall

    def table(self, *, models: bool = True) -> str:
        """The figures as a plain-text table (``models`` false: ``old``/``new`` without the
        model names, as :meth:`check`'s error message shows it). No entry text."""
        old = f"old ({self.old_model})" if models else "old"
        new = f"new ({self.new_model})" if models else "new"
        k = self.k
        rows: list[tuple[str, str, str]] = [("", old, new)]
        if self.labelled_queries:
            rows.append((f"recall@{k}", _fmt(self.old_recall), _fmt(self.new_recall)))
            rows.append((f"recall@{k} drop", "", _fmt(self.drop)))
        if self.overlap is not None:
            rows.append((f"overlap@{k}", "", _fmt(self.overlap)))
        rows.append(("labelled queries", str(self.labelled_queries), ""))
        rows.append(("sampled queries", f"{self.sampled_queries} ({self.threads} threads)", ""))
        rows.append(("entries missing a vector", "0", str(self.missing)))
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        return "\n".join(
            "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows
        )

    def failures(self, *, max_drop: float = 0.02, min_overlap: float | None = None) -> list[str]:
        """Why :meth:`check` would refuse (empty: it passes)."""
        found: list[str] = []
        drop = self.drop
        if drop is not None and drop > max_drop:
            found.append(f"recall@{self.k} drops by {drop:.3f}, more than {max_drop:.3f}")
        if min_overlap is not None and (self.overlap is None or self.overlap < min_overlap):
            found.append(f"overlap@{self.k} is below {min_overlap:.3f}")
        if drop is None and self.overlap is None:
            found.append("nothing was measured: no labelled query and no sampled entry")
        return found

    def check(self, *, max_drop: float = 0.02, min_overlap: float | None = None) -> None:
        """The gate: :class:`~prism_memory.errors.QualityGateError` (its message holds the table,
        without entry text or model names) when the new model's recall@K is lower than the old
        one's by more than ``max_drop``, when the overlap@K is below ``min_overlap`` (if set),
        or when nothing was measured."""
        found = self.failures(max_drop=max_drop, min_overlap=min_overlap)
        if found:
            raise QualityGateError(
                "the quality gate refused the switch: "
                + "; ".join(found)
                + "\n"
                + self.table(models=False)
            )


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _roles(store: object) -> tuple[EntryStore, VectorGenerations]:
    if not isinstance(store, EntryStore) or not isinstance(store, VectorGenerations):
        raise ConfigurationError(
            "the store must implement EntryStore and VectorGenerations to compare generations"
        )
    return store, store


class _Ranker:
    """Recall's ranking of one query with one model: the store's search, then the re-rank with
    the default scoring -- exactly what recall ranks."""

    def __init__(self, store: EntryStore, embedder: Embedder, k: int, now: datetime) -> None:
        self.store, self.embedder, self.k, self.now = store, embedder, k, now
        self.model = embedder_model(embedder)

    async def top(self, queries: Sequence[tuple[MemoryIdentity, str]]) -> list[list[str]]:
        if not queries:
            return []
        vectors: Vector = await embed_whole(self.embedder, [text for _, text in queries])
        found: list[list[str]] = []
        for (scope, text), vector in zip(queries, vectors, strict=True):
            request = SearchRequest(
                vector=vector,
                terms=query_terms(text),
                limit=self.k * 4,
                filter=RecallFilter(now=self.now),
                model=self.model,
            )
            result = await self.store.search(scope, request)
            hits = rerank(
                result.candidates,
                query_vector=vector,
                query_text=text,
                top_k=self.k,
                now=self.now,
                stats=result.stats,
            )
            found.append([hit.record.id for hit in hits])
        return found


async def _sampled(
    store: EntryStore, threads: Sequence[MemoryIdentity], count: int, rng: random.Random
) -> list[tuple[MemoryIdentity, str]]:
    chosen = rng.sample(list(threads), min(count, len(threads)))
    queries: list[tuple[MemoryIdentity, str]] = []
    for scope in chosen:
        records = await store.list_by_thread(scope, after=None, limit=_THREAD_PAGE)
        texts = [r.text for r in records if r.status == "indexed"]
        queries.extend(
            (scope, text) for text in rng.sample(texts, min(ENTRIES_PER_THREAD, len(texts)))
        )
    return queries


async def compare_generations(
    store: EntryStore | VectorGenerations,
    old: Embedder,
    new: Embedder,
    *,
    k: int = 10,
    sample_threads: int = 20,
    queries: Sequence[GateQuery] | None = None,
    threads: Sequence[MemoryIdentity] | None = None,
    seed: int = 0,
    clock: Callable[[], datetime] | None = None,
) -> GateReport:
    """Rank the same recalls with the ``old`` and the ``new`` embedder's generations and compare.

    Each recall is ranked exactly as :meth:`Memory.recall <prism_memory.memory.Memory.recall>`
    ranks it: the store's search with ``SearchRequest(model=...)`` and the query embedded by
    that model, then :func:`prism_memory.ranking.rerank` with the default scoring, top ``k``.

    * **Overlap@K**: ``sample_threads`` threads drawn (with ``seed``) from ``threads`` (default:
      the labelled queries' threads; the role has no listing of threads), and
      :data:`ENTRIES_PER_THREAD` of each one's indexed entries as queries (their own text): the
      mean share of the old model's top-K ids the new one also ranks in its top K.
    * **Recall@K** (with ``queries``, see :func:`read_gate_queries`): for each model, the mean
      share of each query's ``expected_ids`` in its top K.

    Both models must be registered generations of the store (the store implements
    :class:`~prism_memory.stores.base.EntryStore` and
    :class:`~prism_memory.stores.base.VectorGenerations`). Nothing is written.
    """
    entries, generations = _roles(store)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 100:
        raise ValidationError("k must be an integer between 1 and 100")
    if isinstance(sample_threads, bool) or not isinstance(sample_threads, int):
        raise ValidationError("sample_threads must be an integer")
    old_model, new_model = embedder_model(old), embedder_model(new)
    if old_model is None or new_model is None:
        raise ConfigurationError("both embedders need a model identity")
    now = (clock or utcnow)()
    progress = await generations.generation_progress(new_model, now=now)
    await generations.generation_progress(old_model, now=now)  # NotFoundError if unknown
    labelled = list(queries or ())
    if threads is None:  # the labelled queries' threads
        threads = list(dict.fromkeys(q.scope for q in labelled))
    rng = random.Random(seed)
    sampled = await _sampled(entries, threads, max(0, sample_threads), rng)
    old_rank, new_rank = _Ranker(entries, old, k, now), _Ranker(entries, new, k, now)
    overlap = None
    if sampled:
        pairs = zip(await old_rank.top(sampled), await new_rank.top(sampled), strict=True)
        overlap = sum(len(set(a) & set(b)) / max(1, len(a)) for a, b in pairs) / len(sampled)
    old_recall = new_recall = None
    if labelled:
        asked = [(q.scope, q.query) for q in labelled]

        def mean_recall(tops: list[list[str]]) -> float:
            shares = [
                len(q.expected_ids & set(top)) / len(q.expected_ids)
                for q, top in zip(labelled, tops, strict=True)
            ]
            return sum(shares) / len(shares)

        old_recall = mean_recall(await old_rank.top(asked))
        new_recall = mean_recall(await new_rank.top(asked))
    return GateReport(
        old_model=old_model,
        new_model=new_model,
        k=k,
        threads=len({scope for scope, _ in sampled}),
        sampled_queries=len(sampled),
        overlap=overlap,
        labelled_queries=len(labelled),
        old_recall=old_recall,
        new_recall=new_recall,
        missing=progress.missing,
    )
