"""Conformance checks of long entries: an entry longer than its embedder's window is searchable by
everything it says, whichever path embedded it.

The embedder is :class:`~prism_memory.testing.FirstWordsEmbedder`, which -- like a transformer --
reads only the start of what it is given; the dense leg alone ranks (``lexical_weight=0``), so
the lexical leg, which reads every word, cannot find the entry for it. They run on every backend
through :data:`~prism_memory.testing.CONFORMANCE_CHECKS`.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from ..models import Candidate, MemoryIdentity, Vector
from ..stores.base import NewEntry, RecallFilter, SearchRequest
from ..windows import WindowedVector
from ._fixtures import FirstWordsEmbedder
from ._support import ConformanceKit, _Case, _check, _forget_threads, _ids

__all__ = ["LONG_ENTRY_CHECKS", "long_text"]

_GARDEN = (
    "We turned the compost and spread mulch over the beds this morning before it got hot.",
    "The tomatoes need watering twice a day while the weather stays this dry and windy.",
    "Pull the weeds before they set seeds, or the soil will be full of them next spring.",
    "A good harvest depends on the soil more than on anything else we do in the garden.",
    "Keep the seeds of the best plants in paper bags and label each one with its bed.",
)
_TRAVEL = "Before you leave, your passport and visa are in the embassy envelope in the luggage."
_MUSIC = "The cello rehearsal for the symphony concert moved to Thursday with the orchestra."
_DENSE = {"lexical_weight": 0.0}
_OTHERS = [
    {"id": "baking", "text": "I baked bread today: flour, butter and a slow oven for the dough."},
    {"id": "garden", "text": "The garden soil needs more compost before we sow the seeds."},
    {"id": "nothing", "text": "Nothing much happened this afternoon, it was a quiet day."},
]


def long_text(last_paragraph: str, words: int = 1500) -> str:
    """About ``words`` words of garden notes in paragraphs of five sentences, then
    ``last_paragraph`` -- the only place its words occur."""
    paragraphs: list[str] = []
    count = len(last_paragraph.split())
    turn = 0
    while count < words:
        paragraph = " ".join(_GARDEN[(turn + k) % len(_GARDEN)] for k in range(5))
        paragraphs.append(paragraph)
        count += len(paragraph.split())
        turn += 1
    return "\n\n".join([*paragraphs, last_paragraph])


async def _top(memory: Any, query: str) -> list[str]:
    return await _ids(memory, query, top_k=1, scoring=_DENSE)


async def a_long_entry_is_searchable_past_its_window(kit: ConformanceKit) -> None:
    """A fact only in the last paragraph of a 1,500-word entry is recalled by the dense leg alone:
    through the queue and through remember(wait=True), whether the embedder declares its window
    (max_tokens, count_tokens) or not (the default window), and after rebuild_index re-embeds
    entries an embedder had cut at its window."""
    case = _Case(kit)
    width = kit.embedder.dimensions
    entry = {"id": "long", "text": long_text(_TRAVEL), "role": "assistant"}
    query = "Where are my passport and visa?"
    for declare in ("tokens", "nothing"):
        memory = case.memory(thread=declare, embedder=FirstWordsEmbedder(width, declare=declare))
        await memory.remember(_OTHERS, wait=True)
        if declare == "tokens":  # through the indexing queue
            result = await memory.remember([entry])
            report = await asyncio.wait_for(result.done, timeout=10)
            _check(report.indexed == ("long",), f"indexed by the queue: {report}")
        else:  # embedded before the write
            await memory.remember([entry], wait=True)
        found = await _top(memory, query)
        _check(found == ["long"], f"declare={declare}: the last paragraph is searchable: {found}")
        await memory.aclose()
    cut = case.memory(thread="rebuilt", embedder=FirstWordsEmbedder(width, declare="wrong"))
    await cut.remember([*_OTHERS, entry], wait=True)
    found = await _top(cut, query)
    _check(found != ["long"], f"an embedder that cuts its input misses the fact: {found}")
    await cut.aclose()
    whole = case.memory(thread="rebuilt", embedder=FirstWordsEmbedder(width))
    page = await whole.rebuild_index()
    _check(page.rebuilt == 4 and page.next_cursor is None, f"rebuilt: {page}")
    found = await _top(whole, query)
    _check(found == ["long"], f"rebuild_index embeds the whole entry: {found}")
    await whole.aclose()
    await _forget_threads(case, "tokens", "nothing", "rebuilt")  # first-words vectors: store-wide


async def a_corrected_long_entry_is_searchable_past_its_window(kit: ConformanceKit) -> None:
    """correct() embeds the new text whole: the fact in the last paragraph of the corrected
    1,500-word text is recalled by the dense leg alone, the replaced one no longer."""
    case = _Case(kit)
    memory = case.memory(embedder=FirstWordsEmbedder(kit.embedder.dimensions))
    await memory.remember([*_OTHERS, {"id": "long", "text": long_text(_TRAVEL)}], wait=True)
    await memory.correct("long", long_text(_MUSIC))
    found = await _top(memory, "When is the cello concert?")
    _check(found == ["long"], f"the corrected last paragraph is searchable: {found}")
    found = await _top(memory, "Where are my passport and visa?")
    _check(found != ["long"], f"the replaced text is not: {found}")
    await memory.aclose()
    await _forget_threads(case, "thread-1")  # first-words vectors: leave the store as found


async def the_dense_leg_selects_a_long_entry_by_its_best_window(kit: ConformanceKit) -> None:
    """The store's dense leg (``search`` with no query term) picks its nearest candidates by
    ``effective_cos`` -- the first window's cosine, or a later window's less
    :data:`~prism_memory.windows.WINDOW_MARGIN` -- and hands each its later windows.

    Entries written with vectors made by hand (cosines to the query in brackets): ``long``
    (first window 0, a later one 0.9: effective 0.75), ``near`` (0.6), ``decoy`` (first 0.5, a
    later one 0.7: effective 0.55, below ``near``), ``far`` (0.3). The nearest one is ``long``,
    which its first window alone would leave last; the nearest two are ``long`` and ``near``,
    where a plain max over windows would take ``decoy``."""
    case = _Case(kit)
    width = kit.embedder.dimensions
    scope = MemoryIdentity(tenant_id=case.tenant, resource_id="user-ada", thread_id="thread-1")

    def at(*cosines: float) -> Vector:
        """A unit vector with these cosines to the query (axis 0) -- one more axis each."""
        rows = []
        for axis, value in enumerate(cosines, start=1):
            row = np.zeros(width, dtype=np.float32)
            row[0], row[axis] = value, math.sqrt(1.0 - value * value)
            rows.append(row)
        return np.stack(rows)

    vectors = {
        "long": WindowedVector(at(0.0)[0], at(0.1, 0.9)),
        "near": at(0.6)[0],
        "decoy": WindowedVector(at(0.5)[0], at(0.7)),
        "far": at(0.3)[0],
    }
    entries = [
        NewEntry(
            id=entry_id,
            text=f"entry {entry_id}",
            role="user",
            metadata={},
            consent=None,
            sequence=None,
            occurred_at=case.clock(),
            importance=0.0,
            lineage=None,
        )
        for entry_id in vectors
    ]
    await kit.vector_store.put_entries(
        scope, entries, now=case.clock(), vectors=list(vectors.values()), model="m-windows"
    )
    query = at(1.0)[0]

    async def nearest(limit: int) -> list[Candidate]:
        request = SearchRequest(
            vector=query,
            terms=frozenset(),
            limit=limit,
            filter=RecallFilter(now=case.clock()),
            model="m-windows",
        )
        found = (await kit.vector_store.search(scope, request)).candidates
        return sorted(found, key=lambda c: c.id)

    found = await nearest(1)
    _check([c.id for c in found] == ["long"], f"the best window selects: {[c.id for c in found]}")
    windows = found[0].windows
    _check(
        windows is not None and np.array_equal(windows, vectors["long"].windows),
        "the candidate carries its later windows, as stored",
    )
    found = await nearest(2)
    _check([c.id for c in found] == ["long", "near"], f"the margin: {[c.id for c in found]}")
    found = await nearest(4)
    short = [c for c in found if c.id in ("near", "far")]
    _check(len(short) == 2 and all(c.windows is None for c in short), "short entries: no windows")
    await _forget_threads(case, "thread-1")  # m-windows vectors: leave the store as found


LONG_ENTRY_CHECKS: dict[str, Callable[[ConformanceKit], Awaitable[None]]] = {
    check.__name__: check
    for check in (
        a_long_entry_is_searchable_past_its_window,
        a_corrected_long_entry_is_searchable_past_its_window,
        the_dense_leg_selects_a_long_entry_by_its_best_window,
    )
}
"""The checks of this module by name, in :data:`~prism_memory.testing.CONFORMANCE_CHECKS` order."""
