"""Conformance checks of the prompt form: the context block, message ranges and bad scopes.

They run on every backend through :data:`~prism_memory.testing.CONFORMANCE_CHECKS`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import (
    CapExceededError,
    PrismMemoryError,
    ValidationError,
)
from ._support import ConformanceKit, _Case, _check, _raises

__all__ = ["PROMPT_CHECKS"]


async def context_block_is_chronological_and_stable(kit: ConformanceKit) -> None:
    """The semantic block lists memories oldest first and is byte-identical when an unrelated,
    lower-scored memory arrives (the prompt-cache property)."""
    case = _Case(kit)
    memory = case.memory()
    await memory.remember(
        [
            {"id": "m1", "text": "Ada enjoys hiking in the Alps"},
            {"id": "m2", "text": "Ada drinks green tea daily"},
            {"id": "m3", "text": "Ada hiking boots are size 38"},
            {"id": "m4", "text": "Ada bought hiking poles"},
        ],
        wait=True,
    )
    provider = memory.context_provider(semantic=True, working=False, top_k=3)
    before = await provider.render("hiking with Ada")
    lines = before.splitlines()[1:]
    _check(len(lines) == 3, f"three memories: {before!r}")
    order = [
        next(t for t in ("Alps", "size 38", "poles", "green tea") if t in line) for line in lines
    ]
    _check(
        order == sorted(order, key=["Alps", "green tea", "size 38", "poles"].index),
        f"chronological {order}",
    )
    await memory.remember([{"id": "m5", "text": "The weather report for Tuesday"}], wait=True)
    after = await provider.render("hiking with Ada")
    _check(before == after, "an unrelated memory leaves the block byte-identical")
    blocks = await provider.provide("hiking with Ada")
    _check(len(blocks) == 1 and blocks[0].role == "system", "one system block")
    await _raises(
        CapExceededError, _as_coro(lambda: memory.context_provider(max_tokens=8001)), "cap"
    )
    await memory.aclose()


async def _as_coro(call: Callable[[], Any]) -> Any:
    return call()


async def message_range_returns_neighbours(kit: ConformanceKit) -> None:
    """message_range adds same-thread neighbours by sequence, under the same exclusion rules."""
    case = _Case(kit)
    memory = case.memory()
    texts = ["we met at noon", "talked about rockets", "lunch was pasta", "then a walk", "bus home"]
    await memory.remember([{"id": f"n{i}", "text": t} for i, t in enumerate(texts)], wait=True)
    await memory.set_consent("n1", visible=False)
    result = await memory.recall("pasta lunch", top_k=1, message_range=2)
    _check([h.id for h in result.hits] == ["n2"], "the hit")
    _check(
        [r.id for r in result.adjacent] == ["n0", "n3", "n4"],
        f"neighbours: {[r.id for r in result.adjacent]}",
    )
    await memory.aclose()


async def bad_scopes_are_rejected(kit: ConformanceKit) -> None:
    """Empty tenant, resource or thread ids raise a typed error before anything happens."""
    case = _Case(kit)
    for bad in ({"tenant_id": ""}, {"resource_id": "  "}, {"thread": ""}):
        try:
            case.memory(**bad)
        except ValidationError:
            continue
        raise AssertionError(f"{bad} accepted")
    working_only = case.memory(thread=None)
    await working_only.update_working({"a": 1})
    await _raises(PrismMemoryError, working_only.recall("a"), "semantic call without thread")


PROMPT_CHECKS: dict[str, Callable[[ConformanceKit], Awaitable[None]]] = {
    check.__name__: check
    for check in (
        context_block_is_chronological_and_stable,
        message_range_returns_neighbours,
        bad_scopes_are_rejected,
    )
}
"""The checks of this module by name, in :data:`~prism_memory.testing.CONFORMANCE_CHECKS` order."""
