"""RAG conformance checks of access and ranking: ACLs on both legs, crowding, BM25 order.

They run on every RAG store through :data:`~prism_memory.testing.RAG_CONFORMANCE_CHECKS`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import numpy as np

from ..lexical import CorpusStats, bm25, corpus_stats, query_terms, term_counts
from ..rag_types import (
    AccessConstraint,
    Authorization,
    RagScope,
)
from ._rag_support import RagConformanceKit, _Case, _cos, _keys, _toward, _unit
from ._support import _check

__all__ = ["RAG_ACCESS_CHECKS"]


async def acl_denies_by_default(kit: RagConformanceKit) -> None:
    """No grant, a stale version, another tenant's or scope's grant: denied. ``None``: no ACL."""
    case = _Case(kit)
    store, scope, w = case.store, case.scope, case.width
    await store.upsert(
        scope,
        [
            case.chunk("manual", 0, "the pump manual", _unit(w, 0)),
            case.chunk("memo", 0, "the pump memo", _toward(w, 1, 0.5)),
        ],
    )
    q = _unit(w, 0)
    alice = AccessConstraint("alice", ("staff",))

    async def seen(auth: Authorization, sc: RagScope = scope) -> list[tuple[str, int]]:
        vector = await store.query(sc, embedding=q, top_k=5, authorization=auth)
        lexical = await store.lexical_query(sc, text="pump", top_k=5, authorization=auth)
        _check(
            sorted(_keys(vector)) == sorted(_keys(lexical)),
            f"the legs disagree on what {auth!r} may see: {_keys(vector)} vs {_keys(lexical)}",
        )
        return sorted(_keys(vector))

    _check(await seen(None) == [("manual", 0), ("memo", 0)], "without authorization no ACL")
    _check(await seen(alice) == [], "no grant must deny")
    _check(await seen("acl") == [], 'authorization="acl" must deny everything')
    await store.set_source_access(scope, "manual", principal_ids=["alice"], access_version=3)
    _check(await seen(alice) == [("manual", 0)], "a principal grant admits its source only")
    _check(await seen(AccessConstraint("bob")) == [], "a grant to alice must not admit bob")
    _check(
        await seen(AccessConstraint("alice", access_version=3)) == [("manual", 0)],
        "the granted access version admits",
    )
    _check(
        await seen(AccessConstraint("alice", access_version=2)) == [],
        "a stale access version must deny",
    )
    await store.set_source_access(scope, "memo", group_ids=["staff"], access_version=1)
    _check(await seen(alice) == [("manual", 0), ("memo", 0)], "a group grant admits members")
    _check(await seen(AccessConstraint("carol", ("guests",))) == [], "other groups are denied")
    # the same source id in another tenant or collection is another source: grants do not cross
    for other in (RagScope(f"{case.tenant}-x", "docs"), RagScope(case.tenant, "docs", "archive")):
        await store.upsert(other, [case.chunk("manual", 0, "the pump manual", _unit(w, 0))])
        _check(await seen(alice, other) == [], f"a grant in {scope} must not admit in {other}")
        _check(
            not await store.check_source_access(other, "manual", alice),
            "check_source_access must agree with the query",
        )
    _check(await store.check_source_access(scope, "manual", alice), "check_source_access: granted")
    _check(
        not await store.check_source_access(scope, "manual", AccessConstraint("alice", (), 9)),
        "check_source_access: a stale version denies",
    )
    await store.set_source_access(scope, "manual", access_version=4)  # empty: revoke
    _check(await store.get_source_access(scope, "manual") is None, "empty grants revoke")
    _check(await seen(AccessConstraint("alice")) == [], "a revoked grant must deny")


async def authorised_chunk_survives_crowding(kit: RagConformanceKit) -> None:
    """Authorised chunks ranked below 100 more similar unauthorised ones are still the top-K."""
    case = _Case(kit)
    store, scope, w = case.store, case.scope, case.width
    crowd = [
        case.chunk(f"secret-{i:03d}", 0, f"classified {i}", _toward(w, 1 + i % (w - 1), 0.02))
        for i in range(100)
    ]
    mine = {
        ("open-a", 0): _toward(w, 1, 1.0),
        ("open-b", 0): _toward(w, 2, 2.0),
        ("open-c", 0): _toward(w, 3, 3.0),
    }
    await store.upsert(
        scope, crowd + [case.chunk(s, i, f"{s} text", v) for (s, i), v in mine.items()]
    )
    for source, _ in mine:
        await store.set_source_access(scope, source, group_ids=["readers"], access_version=1)
    q = _unit(w, 0)
    least_crowd = min(_cos(q, c.embedding) for c in crowd)
    best_mine = max(_cos(q, v) for v in mine.values())
    _check(least_crowd > best_mine, "setup: every unauthorised chunk must be more similar")
    reader = AccessConstraint("dana", ("readers",))
    for top_k in (1, 2, 3, 10):
        hits = await store.query(scope, embedding=q, top_k=top_k, authorization=reader)
        expected = sorted(mine, key=lambda key: -_cos(q, mine[key]))[:top_k]
        _check(
            _keys(hits) == expected,
            f"top_k={top_k}: expected the authorised {expected}, got {_keys(hits)}",
        )
        for hit in hits:
            _check(
                abs(hit.score - _cos(q, mine[hit.key])) < 1e-6 and hit.semantic == hit.score,
                f"score of {hit.key} is not its cosine",
            )
    unfiltered = await store.query(scope, embedding=q, top_k=3)
    _check(all(key[0].startswith("secret") for key in _keys(unfiltered)), "setup: crowd on top")


async def lexical_leg_honours_acl(kit: RagConformanceKit) -> None:
    """The lexical leg filters by ACL before ranking; ``filter`` never authorises."""
    case = _Case(kit)
    store, scope = case.store, case.scope
    crowd = [
        case.chunk(f"secret-{i:03d}", 0, "turbine turbine turbine blade", metadata={"kind": "spec"})
        for i in range(100)
    ]
    texts = {
        ("open-a", 0): "the turbine blade inspection",
        ("open-b", 0): "a turbine overview for new staff members and visitors alike",
        ("open-c", 0): "cafeteria menu",
    }
    await store.upsert(
        scope,
        crowd + [case.chunk(s, i, t, metadata={"kind": "spec"}) for (s, i), t in texts.items()],
    )
    for source, _ in texts:
        await store.set_source_access(scope, source, principal_ids=["erin"], access_version=1)
    erin = AccessConstraint("erin")
    query = "turbine blade"
    hits = await store.lexical_query(scope, text=query, top_k=5, authorization=erin)
    terms = query_terms(query)
    visible = list(texts.values())
    reference = corpus_stats(visible, terms)
    stats = await store.lexical_stats(scope, text=query, authorization=erin)
    _check(
        (stats.documents, stats.total_length, dict(stats.document_frequency))
        == (reference.documents, reference.total_length, dict(reference.document_frequency)),
        f"statistics must cover the authorised chunks only: {stats} vs {reference}",
    )

    def score(text: str) -> float:
        counts = term_counts(text)
        return bm25(terms, counts, sum(counts.values()), reference)

    matching = [key for key, text in texts.items() if terms & set(term_counts(text))]
    expected = sorted(matching, key=lambda key: (-score(texts[key]), key))
    _check(_keys(hits) == expected, f"expected {expected}, got {_keys(hits)}")
    for hit in hits:
        _check(abs(hit.score - score(texts[hit.key])) < 1e-9, f"BM25 of {hit.key} differs")
    filtered = await store.lexical_query(
        scope, text=query, top_k=5, filter={"kind": "spec"}, authorization=AccessConstraint("zed")
    )
    _check(filtered == [], "a metadata filter must never authorise")
    _check(
        await store.lexical_stats(scope, text=query, authorization="acl") == CorpusStats(),
        'statistics under authorization="acl" must be empty',
    )


async def lexical_leg_ranks_by_bm25(kit: RagConformanceKit) -> None:
    """With more matches than ``top_k``, the lexical leg returns the best BM25 (k1, b and length
    normalisation included), not the first matches by id."""
    case = _Case(kit)
    store, scope = case.store, case.scope
    rng = np.random.default_rng(11)
    words = ["valve", "pump", "seal", "gasket", "pressure", "flow", "pipe", "meter"]
    texts: dict[tuple[str, int], str] = {}
    for n in range(40):
        count = int(rng.integers(3, 30))
        texts[(f"doc-{n:02d}", 0)] = " ".join(rng.choice(words, size=count))
    await store.upsert(scope, [case.chunk(s, i, t) for (s, i), t in texts.items()])
    for query in ("pump pressure", "gasket", "seal valve meter"):
        terms = query_terms(query)
        reference = corpus_stats(texts.values(), terms)

        def score(text: str, terms: frozenset[str] = terms, ref: CorpusStats = reference) -> float:
            counts = term_counts(text)
            return bm25(terms, counts, sum(counts.values()), ref)

        matching = [key for key, text in texts.items() if terms & set(term_counts(text))]
        _check(len(matching) > 10, "setup: more matches than top_k")
        expected = sorted(matching, key=lambda key: (-score(texts[key]), key))[:5]
        hits = await store.lexical_query(scope, text=query, top_k=5)
        _check(_keys(hits) == expected, f"{query!r}: expected {expected}, got {_keys(hits)}")


RAG_ACCESS_CHECKS: dict[str, Callable[[RagConformanceKit], Awaitable[None]]] = {
    check.__name__: check
    for check in (
        acl_denies_by_default,
        authorised_chunk_survives_crowding,
        lexical_leg_honours_acl,
        lexical_leg_ranks_by_bm25,
    )
}
"""The checks of this module by name, in :data:`~prism_memory.testing.RAG_CONFORMANCE_CHECKS` order."""
