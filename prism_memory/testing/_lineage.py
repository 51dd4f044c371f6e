"""Conformance checks of consent, lineage and deletion: the consent gate, invalidation and correction,
forget along lineage and holds, lineage caps, forget_before and retention.

They run on every backend through :data:`~prism_memory.testing.CONFORMANCE_CHECKS`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

from ..errors import (
    CapExceededError,
    NotFoundError,
    ValidationError,
)
from ..invariants import revoked_ids_absent
from ..models import RetentionResult
from ._support import ConformanceKit, _Case, _check, _ids, _raises

__all__ = ["LINEAGE_CHECKS"]


async def consent_is_the_single_gate(kit: ConformanceKit) -> None:
    """Invisible, revoked and (in strict mode) consent-less entries are excluded everywhere."""
    case = _Case(kit)
    memory = case.memory()
    await memory.remember(
        [
            {"id": "legacy", "text": "apple pie recipe"},
            {"id": "explicit", "text": "apple tart recipe", "consent": {"source": "user"}},
            {"id": "hidden", "text": "apple crumble recipe", "consent": {"visible": False}},
        ],
        wait=True,
    )
    _check(sorted(await _ids(memory, "apple recipe")) == ["explicit", "legacy"], "hidden excluded")
    _check(await _ids(memory, "apple recipe", require_consent=True) == ["explicit"], "strict mode")
    strict = case.memory(require_consent=True)
    _check(await _ids(strict, "apple recipe") == ["explicit"], "strict memory")
    revoked = await memory.set_consent("explicit", visible=False)
    _check(
        revoked.consent is not None and revoked.consent.revoked_at is not None, "revocation stamped"
    )
    _check(await _ids(memory, "apple recipe") == ["legacy"], "revoked excluded")
    block = await memory.context_provider().render("apple recipe")
    _check("tart" not in block, "revoked never injected")
    _check(
        revoked_ids_absent(await memory.recall("apple tart"), ["explicit"]).score == 1.0,
        "invariant",
    )
    await memory.set_consent("explicit", visible=True)
    _check(sorted(await _ids(memory, "apple recipe")) == ["explicit", "legacy"], "granted again")
    await _raises(NotFoundError, memory.set_consent("missing", visible=False), "missing")
    await memory.aclose()


async def lineage_invalidation_and_correction(kit: ConformanceKit) -> None:
    """Revoking or correcting a source invalidates what was derived from it, transitively."""
    case = _Case(kit)
    invalidated: list[str] = []
    memory = case.memory(on_invalidate=lambda ids: invalidated.extend(ids))
    await memory.remember(
        [
            {"id": "src", "text": "Ada works at Acme"},
            {"id": "other", "text": "Ada likes tea"},
            {
                "id": "sum",
                "text": "Summary: Ada, Acme employee",
                "lineage": {"source_ids": ["src"]},
            },
            {
                "id": "both",
                "text": "Ada at Acme likes tea",
                "lineage": {"source_ids": ["src", "other"]},
            },
            {
                "id": "deep",
                "text": "Deep insight about Ada Acme",
                "lineage": {"source_ids": ["sum"]},
            },
        ],
        wait=True,
    )
    all_ids = ["both", "deep", "other", "src", "sum"]
    _check(sorted(await _ids(memory, "Ada Acme tea", top_k=10)) == all_ids, "all recallable first")
    await memory.correct("src", "Ada works at Initech")
    ids = sorted(await _ids(memory, "Ada Acme Initech tea", top_k=10))
    _check(ids == ["other", "src"], f"dependents of a corrected source drop out: {ids}")
    _check((await memory.get("src")).text == "Ada works at Initech", "corrected text stored")
    _check(sorted(invalidated) == ["both", "deep", "sum"], f"on_invalidate told: {invalidated}")
    # a replayed write changes nothing; correcting the dependent regenerates it
    await memory.remember(
        {"id": "sum", "text": "Summary: Ada, Initech employee", "lineage": {"source_ids": ["src"]}},
        wait=True,
    )
    ids = sorted(await _ids(memory, "Ada Acme Initech tea", top_k=10))
    _check(ids == ["other", "src"], f"a re-remembered dependent stays invalid: {ids}")
    await memory.correct("sum", "Summary: Ada, Initech employee")
    ids = sorted(await _ids(memory, "Ada Acme Initech tea", top_k=10))
    _check(ids == ["other", "src", "sum"], f"a regenerated dependent is valid again: {ids}")
    await memory.set_consent("other", visible=False)
    ids = sorted(await _ids(memory, "Ada Acme Initech tea", top_k=10))
    _check(ids == ["src", "sum"], f"revoking excludes the source: {ids}")
    await memory.aclose()


async def forget_deletes_along_lineage_and_holds(kit: ConformanceKit) -> None:
    """forget() really deletes a source and its dependents; hold=True keeps bodies but excludes."""
    case = _Case(kit)
    memory = case.memory()
    await memory.remember(
        [
            {"id": "a", "text": "alpha fact", "consent": {"source": "user"}},
            {"id": "b", "text": "beta fact", "consent": {"source": "user"}},
            {"id": "a2", "text": "alpha derived", "lineage": {"source_ids": ["a"]}},
            {"id": "a3", "text": "alpha derived twice", "lineage": {"source_ids": ["a2", "b"]}},
            {"id": "h", "text": "held fact", "consent": {"source": "user"}},
        ],
        wait=True,
    )
    _check(await memory.forget(ids=["a"]) == 3, "source and two generations of dependents")
    for gone in ("a", "a2", "a3"):
        await _raises(NotFoundError, memory.get(gone), f"{gone} deleted")
    _check(await memory.forget(ids=["h"], hold=True) == 0, "a hold deletes nothing")
    _check((await memory.get("h")).legal_hold, "body kept under hold")
    _check(await _ids(memory, "held fact alpha beta") == ["b"], "held entry excluded")
    exported = await memory.export_memory(identity=memory.identity)
    _check([e["id"] for e in exported.entries] == ["b"], "held entry not exported")
    _check(
        await memory.apply_retention(max_entries=0) == RetentionResult(deleted=1, scanned=2),
        "retention skips held",
    )
    _check(await memory.forget() == 0, "nothing left but the held entry")
    _check(await memory.forget(ids=["h"]) == 1, "naming a held entry lifts the hold")
    with_missing = await memory.forget(ids=["missing"])
    _check(with_missing == 0, "unknown ids delete nothing")
    await memory.aclose()


async def lineage_caps_fail_closed(kit: ConformanceKit) -> None:
    """A lineage walk over the depth or edge cap raises and writes nothing."""
    case = _Case(kit)
    memory = case.memory(limits={"lineage_depth": 2, "lineage_edges": 3})
    await memory.remember([{"id": "n0", "text": "chain start"}], wait=True)
    for i in range(1, 4):
        await memory.remember(
            [{"id": f"n{i}", "text": f"chain link {i}", "lineage": {"source_ids": [f"n{i - 1}"]}}],
            wait=True,
        )
    await _raises(CapExceededError, memory.forget(ids=["n0"]), "depth")
    await _raises(CapExceededError, memory.set_consent("n0", visible=False), "depth on revoke")
    _check(len(await _ids(memory, "chain start link", top_k=10)) == 4, "nothing changed")
    _check(await memory.forget(ids=["n1"]) == 3, "within the cap it works")
    await memory.aclose()


async def forget_before_cuts_on_occurrence(kit: ConformanceKit) -> None:
    """forget_before() deletes what occurred before the cut, regardless of when it was written."""
    case = _Case(kit)
    memory = case.memory()
    now = case.clock()
    await memory.remember(
        [
            {"id": "old", "text": "old event", "occurred_at": now - timedelta(days=10)},
            {"id": "new", "text": "new event", "occurred_at": now - timedelta(days=1)},
        ],
        wait=True,
    )
    _check(await memory.forget_before(now - timedelta(days=5)) == 1, "one occurred before the cut")
    _check(await _ids(memory, "event", top_k=5) == ["new"], "the recent one stays")
    await _raises(ValidationError, memory.forget_before(now.replace(tzinfo=None)), "naive")
    await memory.aclose()


async def retention_is_enforced_on_read(kit: ConformanceKit) -> None:
    """Past the retention window an entry is never recalled or exported, swept or not."""
    case = _Case(kit)
    memory = case.memory(retention_days=7)
    now = case.clock()
    await memory.remember(
        [
            {
                "id": "stale",
                "text": "ancient news",
                "occurred_at": now - timedelta(days=8),
                "consent": {},
            },
            {
                "id": "fresh",
                "text": "recent news",
                "occurred_at": now - timedelta(days=2),
                "consent": {},
            },
        ],
        wait=True,
    )
    _check(await _ids(memory, "news", top_k=5) == ["fresh"], "expired entry excluded on read")
    page = await memory.export_memory(identity=memory.identity)
    _check([e["id"] for e in page.entries] == ["fresh"], "expired entry not exported")
    result = await memory.apply_retention()
    _check((result.deleted, result.scanned) == (1, 2), f"sweep uses the window: {result}")
    await _raises(NotFoundError, memory.get("stale"), "really deleted")
    case.clock.advance(days=6)
    _check(await _ids(memory, "news") == [], "the window moves with the clock")
    await _raises(ValidationError, case.memory().apply_retention(), "no rule")
    await memory.aclose()


LINEAGE_CHECKS: dict[str, Callable[[ConformanceKit], Awaitable[None]]] = {
    check.__name__: check
    for check in (
        consent_is_the_single_gate,
        lineage_invalidation_and_correction,
        forget_deletes_along_lineage_and_holds,
        lineage_caps_fail_closed,
        forget_before_cuts_on_occurrence,
        retention_is_enforced_on_read,
    )
}
"""The checks of this module by name, in :data:`~prism_memory.testing.CONFORMANCE_CHECKS` order."""
