"""The behaviour checks of :func:`run_rag_conformance`: what every RAG store must do.

Each check works under a fresh random tenant, so one store can serve every check. Expected values
are computed independently of the store (plain numpy cosines, hand-built vectors, the lexical
module's reference statistics over the texts the check wrote), never read back from it.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..embedding import HashEmbedder
from ..errors import CapExceededError, PrismMemoryError, ValidationError
from ..rag_types import (
    AccessConstraint,
    Chunk,
    JsonScalar,
    RagScope,
    SourceAccess,
)
from ._rag_access import RAG_ACCESS_CHECKS
from ._rag_models import RAG_MODEL_CHECKS
from ._rag_support import RagConformanceKit, RagKitFactory, _Case, _keys, _unit
from ._rag_writes import RAG_WRITE_CHECKS
from ._support import _check, _raises, _run_each

__all__ = [
    "RAG_CONFORMANCE_CHECKS",
    "RagConformanceKit",
    "RagKitFactory",
    "run_rag_conformance",
    "run_rag_conformance_check",
]


async def scopes_filters_and_inputs(kit: RagConformanceKit) -> None:
    """Scopes are isolated, filters are exact JSON equality, bad input raises typed errors."""
    case = _Case(kit)
    store, scope, w = case.store, case.scope, case.width
    other_resource = RagScope(case.tenant, "other")
    await store.upsert(
        scope,
        [
            case.chunk("a", 0, "alpha", _unit(w, 0), {"lang": "en", "n": 1, "draft": True}),
            case.chunk("a", 1, "beta", _unit(w, 1), {"lang": "de", "n": 1.0, "draft": False}),
            case.chunk("b", 0, "gamma", _unit(w, 2), {"lang": "en", "n": 2, "draft": None}),
        ],
    )
    await store.upsert(other_resource, [case.chunk("a", 0, "elsewhere", _unit(w, 0))])
    q = _unit(w, 0)

    async def keys(flt: Mapping[str, JsonScalar] | None) -> list[tuple[str, int]]:
        return sorted(_keys(await store.query(scope, embedding=q, top_k=10, filter=flt)))

    _check(await keys(None) == [("a", 0), ("a", 1), ("b", 0)], "scope isolation on query")
    _check(await keys({"lang": "en"}) == [("a", 0), ("b", 0)], "string equality filter")
    _check(await keys({"n": 1}) == [("a", 0), ("a", 1)], "1 and 1.0 are the same JSON number")
    _check(await keys({"draft": True}) == [("a", 0)], "true is not 1")
    _check(await keys({"n": True}) == [], "true must not equal 1")
    _check(await keys({"draft": None}) == [("b", 0)], "null matches a present null only")
    _check(await keys({"lang": "en", "n": 2}) == [("b", 0)], "every key must match")
    _check(await keys({"missing": "x"}) == [], "a missing key never matches")
    _check(
        [c.text for c in await store.get_by_source(other_resource, "a")] == ["elsewhere"],
        "get_by_source crosses scopes",
    )
    _check(await store.delete_source(other_resource, "a") == 1, "delete_source counts")
    _check(len(await store.get_by_source(scope, "a")) == 2, "delete_source crossed scopes")
    _check(await store.get_current_generation(RagScope(case.tenant, "new")) == 0, "default gen 0")
    _check(await store.delete_generation(scope, 0) == 3, "delete_generation counts")

    bad_calls: list[tuple[type[BaseException], Awaitable[Any], str]] = [
        (ValidationError, store.query(scope, embedding=q, top_k=0), "top_k=0"),
        (CapExceededError, store.query(scope, embedding=q, top_k=33), "top_k=33"),
        (
            ValidationError,
            store.query(scope, embedding=q, top_k=1, filter={"k": [1]}),  # type: ignore[dict-item]
            "a list in a filter",
        ),
        (
            ValidationError,
            store.query(scope, embedding=q, top_k=1, authorization="bob"),  # type: ignore[arg-type]
            "a string authorization",
        ),
        (ValidationError, store.query(scope, embedding=q, top_k=1, generation=-1), "gen -1"),
        (ValidationError, store.lexical_query(scope, text="a\x00b", top_k=1), "NUL text"),
        (ValidationError, store.upsert(scope, [case.chunk("a", 0, "x")] * 2), "duplicates"),
        (
            ValidationError,
            store.set_source_access(scope, "a", principal_ids=["p"], access_version=0),
            "access_version 0",
        ),
        (
            CapExceededError,
            store.set_source_access(
                scope, "a", group_ids=[f"g{i}" for i in range(33)], access_version=1
            ),
            "33 groups",
        ),
    ]
    for error, call, label in bad_calls:
        await _raises(error, call, label)
    # a scope mapping with a key it does not know: refused, and the key is never repeated (a
    # caller may have pasted a secret as one); nothing was written under the scope's real parts
    pasted = f"sk_live_{case.tenant}"
    stray: Any = {"tenant_id": case.tenant, "resource_id": "stray", pasted: "x"}
    for call, label in (
        (store.upsert(stray, [case.chunk("s", 0, "x")]), "upsert"),
        (store.query(stray, embedding=q, top_k=1), "query"),
        (store.get_current_generation(stray), "get_current_generation"),
    ):
        refused = await _raises(ValidationError, call, f"{label} of a scope with a stray key")
        _check(pasted not in str(refused), f"{label}: the error repeats the stray key")
        _check("tenant_id, resource_id, collection" in str(refused), f"{label}: allowed keys")
    _check(
        await store.get_by_source(RagScope(case.tenant, "stray"), "s") == [],
        "a refused scope wrote nothing",
    )
    for build, label in (
        (lambda: RagScope("", "docs"), "empty tenant"),
        (lambda: RagScope("t", "d\x00"), "NUL in a resource"),
        (lambda: RagScope("t", "docs", "c" * 300), "overlong collection"),
        (lambda: AccessConstraint("p", tuple(f"g{i}" for i in range(33))), "33 groups"),
        (lambda: Chunk("s", 0, "\ud800", _unit(w, 0)), "a lone surrogate"),
        (lambda: Chunk("s", -1, "x", _unit(w, 0)), "a negative index"),
    ):
        try:
            build()
        except PrismMemoryError:
            continue
        raise AssertionError(f"{label} was accepted")


async def hybrid_query_fuses_authorised_legs(kit: RagConformanceKit) -> None:
    """``hybrid_query`` fuses both legs with recall's fusion, under the same ACL and generation."""
    from ..rag import hybrid_query, ingest

    case = _Case(kit)
    store, scope = case.store, case.scope
    embedder = case.embedder
    docs = {
        "pumps": "Pumps need a pressure check every spring. The pressure log lives in the office.",
        "seals": "Seals wear out. Replace a worn seal before the pump leaks.",
        "lunch": "Lunch is served at noon in the cafeteria.",
        "secret": "Pressure pressure pressure: the secret pump redesign.",
    }
    for source, text in docs.items():
        await ingest(store, scope, source, text, embedder=embedder)
        if source != "secret":
            await store.set_source_access(scope, source, group_ids=["crew"], access_version=1)
    crew = AccessConstraint("finn", ("crew",))
    hits = await hybrid_query(
        store, scope, text="pump pressure", embedder=embedder, top_k=3, authorization=crew
    )
    _check(hits != [] and all(h.source_id != "secret" for h in hits), "hybrid leaked a source")
    _check(hits[0].source_id == "pumps", f"expected the pumps document first, got {_keys(hits)}")
    _check(
        [h.score for h in hits] == sorted((h.score for h in hits), reverse=True),
        "hybrid hits must be best first",
    )
    for hit in hits:
        _check(hit.semantic is not None and hit.lexical is not None, "hybrid hits carry both legs")
    everyone = await hybrid_query(store, scope, text="pump pressure", embedder=embedder, top_k=4)
    _check(any(h.source_id == "secret" for h in everyone), "setup: the secret source matches")


def _nested(levels: int) -> dict[str, Any]:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(levels):
        node["k"] = {}
        node = node["k"]
    return deep


async def id_collections_and_bad_arguments_raise_alike(kit: RagConformanceKit) -> None:
    """A bare string where ids belong never widens a grant (``"staff"`` is not ``s, t, a, f``);
    every store raises the same typed error for the same bad argument, nothing written."""
    case = _Case(kit)
    store, scope = case.store, case.scope
    await store.upsert(scope, [case.chunk("hr", 0, "salaries")])
    await store.set_source_access(scope, "hr", principal_ids=["bob"], access_version=1)
    bad_calls: list[tuple[type[BaseException], Callable[[], Awaitable[Any]], str]] = [
        (
            ValidationError,
            lambda: store.set_source_access(scope, "hr", group_ids="staff", access_version=1),
            "group_ids as a bare string",
        ),
        (
            ValidationError,
            lambda: store.set_source_access(scope, "hr", principal_ids="eve", access_version=1),
            "principal_ids as a bare string",
        ),
        (
            ValidationError,
            lambda: store.set_source_access(scope, "hr", group_ids=7, access_version=1),  # type: ignore[arg-type]
            "group_ids as a number",
        ),
        (ValidationError, lambda: store.delete_source(scope, 123), "delete_source(123)"),  # type: ignore[arg-type]
        (ValidationError, lambda: store.get_by_source(scope, 123), "get_by_source(123)"),  # type: ignore[arg-type]
        (ValidationError, lambda: store.get_source_access(scope, ""), "an empty source id"),
        (
            ValidationError,
            lambda: store.query(scope, embedding=_unit(case.width, 0), top_k=1, filter="lang"),  # type: ignore[arg-type]
            "a string filter",
        ),
        (
            ValidationError,
            lambda: store.check_source_access(scope, "hr", "bob"),  # type: ignore[arg-type]
            "a string authorization",
        ),
    ]
    for error, call, label in bad_calls:
        await _raises(error, call(), label)
    # top_k on both legs: an integer in [1, 32]; None is no "every match" on any store
    q0 = _unit(case.width, 0)
    wrong_k: list[tuple[Any, type[BaseException]]] = [
        (None, ValidationError),
        ("3", ValidationError),
        (True, ValidationError),
        (1.5, ValidationError),
        (0, ValidationError),
        (33, CapExceededError),
    ]
    for top_k, error in wrong_k:
        await _raises(error, store.query(scope, embedding=q0, top_k=top_k), f"query {top_k!r}")
        lexical = store.lexical_query(scope, text="salaries", top_k=top_k)
        await _raises(error, lexical, f"lexical_query {top_k!r}")
    grants = await store.get_source_access(scope, "hr")
    _check(
        grants is not None and grants.principal_ids == ("bob",) and not grants.group_ids,
        f"a refused grant changed nothing: {grants}",
    )
    for letter in "staf":
        granted = await store.check_source_access(scope, "hr", AccessConstraint("eve", (letter,)))
        _check(not granted, f"group {letter!r} was granted")
    deep = _nested(5000)
    for build, label in (
        (lambda: AccessConstraint("eve", "staff"), "AccessConstraint(group_ids='staff')"),  # type: ignore[arg-type]
        (lambda: SourceAccess("bob", (), 1), "SourceAccess(principal_ids='bob')"),  # type: ignore[arg-type]
        (lambda: case.chunk("s", 0, "x", metadata=deep), "5,000-level chunk metadata"),
        (lambda: case.chunk("s", 0, "x", metadata=_nested(33)), "33-level chunk metadata"),
    ):
        try:
            build()
        except ValidationError:
            continue
        raise AssertionError(f"{label} was accepted or raised an untyped error")
    _check(bool(case.chunk("s", 0, "x", metadata=_nested(31))), "31 levels are accepted")
    from ..rag import ingest  # the facade over the store, imported where the check needs it

    await _raises(
        ValidationError,
        ingest(store, scope, "deep", "some text", embedder=case.embedder, metadata=deep),
        "ingest() with 5,000-level metadata",
    )
    _check(await store.get_by_source(scope, "deep") == [], "nothing was ingested")
    canary = "canary-rag-51"
    q = _unit(case.width, 0)
    echoes: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("filter key", lambda: store.query(scope, embedding=q, top_k=1, filter={canary: [1]})),  # type: ignore[dict-item]
        ("filter value", lambda: store.query(scope, embedding=q, top_k=1, filter={"k": f"{canary}\x00"})),
        ("duplicate chunk", lambda: store.upsert(scope, [case.chunk(canary, 0, "x")] * 2)),
        ("source id", lambda: store.delete_source(scope, f"{canary}\x00")),
        ("group id", lambda: store.set_source_access(scope, "hr", group_ids=[f"{canary}\x01"], access_version=1)),
    ]  # fmt: skip
    for label, call in echoes:
        try:
            await call()
        except PrismMemoryError as exc:
            _check(canary not in str(exc), f"{label}: the message repeats the input: {exc}")
        else:
            raise AssertionError(f"{label}: nothing was raised")
    for metadata in ({canary: float("nan")}, {"k": {canary: {1, 2}}}):
        try:
            case.chunk("s", 0, "x", metadata=metadata)
        except ValidationError as exc:
            _check(canary not in str(exc), f"chunk metadata: the message repeats a key: {exc}")
        else:
            raise AssertionError("bad chunk metadata was accepted")


RAG_CONFORMANCE_CHECKS: dict[str, Callable[[RagConformanceKit], Awaitable[None]]] = {
    **RAG_ACCESS_CHECKS,
    **RAG_WRITE_CHECKS,
    **RAG_MODEL_CHECKS,
    scopes_filters_and_inputs.__name__: scopes_filters_and_inputs,
    hybrid_query_fuses_authorised_legs.__name__: hybrid_query_fuses_authorised_legs,
    id_collections_and_bad_arguments_raise_alike.__name__: id_collections_and_bad_arguments_raise_alike,
}
"""Every RAG conformance check by name."""


async def _kit(factory: RagKitFactory) -> RagConformanceKit:
    made = factory()
    if inspect.isawaitable(made):
        made = await made
    if isinstance(made, RagConformanceKit):
        return made
    if isinstance(made, Mapping):
        store = made["store"]
        embedder = made.get("embedder") or HashEmbedder(store.dimension or 64)
        return RagConformanceKit(store=store, embedder=embedder)
    raise TypeError("the factory must return a RagConformanceKit or a mapping")


async def run_rag_conformance_check(name: str, factory: RagKitFactory) -> None:
    """Run one RAG check by name; raises ``AssertionError`` (or the unexpected error) on failure."""
    await RAG_CONFORMANCE_CHECKS[name](await _kit(factory))


async def run_rag_conformance(factory: RagKitFactory, *, only: list[str] | None = None) -> None:
    """Run every RAG check (or ``only`` those); raise :class:`ConformanceError` if any fails."""
    await _run_each(
        only or list(RAG_CONFORMANCE_CHECKS), lambda name: run_rag_conformance_check(name, factory)
    )
