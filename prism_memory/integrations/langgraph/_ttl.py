"""TTL of a store's items: the default config, the sweep that hard-deletes expired items, and the
background task that runs it (``start_ttl_sweeper``, as LangGraph's async Postgres store has).

An item put with ``ttl`` carries its expiry in its metadata; ``get`` and ``search`` never show an
expired item, swept or not, so the sweep only reclaims the rows. It deletes through prism's
governed forget (tombstones and lineage hold), never an item under legal hold.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from langgraph.store.base import TTLConfig

from ...errors import ConfigurationError, ValidationError
from ...memory import Memory
from ...stores.base import VectorStore, every_record
from ._mapping import CATALOG_THREAD, Owner, check_ttl, is_expired, namespace_of, utcnow

logger = logging.getLogger("prism_memory.langgraph")

_DEFAULT_INTERVAL_MINUTES = 5.0
"""How often the sweeper runs when neither its call nor the config says (LangGraph's default)."""


def check_ttl_config(ttl: Mapping[str, Any] | None) -> TTLConfig | None:
    """LangGraph's ``TTLConfig`` (``default_ttl``, ``refresh_on_read``,
    ``sweep_interval_minutes``), checked: unknown keys and values of the wrong kind raise
    :class:`~prism_memory.ConfigurationError`."""
    if ttl is None:
        return None
    known = {"default_ttl", "refresh_on_read", "sweep_interval_minutes", "omit_expired"}
    unknown = sorted(str(key) for key in ttl if key not in known)
    if unknown:
        raise ConfigurationError(f"ttl has unknown keys: {unknown}")
    try:
        check_ttl(ttl.get("default_ttl"))
        check_ttl(ttl.get("sweep_interval_minutes"))
    except ValidationError as exc:
        raise ConfigurationError(f"ttl: {exc}") from None
    if not isinstance(ttl.get("refresh_on_read", True), bool):
        raise ConfigurationError("ttl 'refresh_on_read' must be a bool")
    return cast("TTLConfig", dict(ttl))


async def sweep(
    store: VectorStore,
    owner: Owner,
    memory: Callable[[tuple[str, ...]], Awaitable[Memory]],
) -> int:
    """Hard-delete every expired item of ``owner`` (not under legal hold) through
    ``Memory.forget`` of its namespace; return how many went."""
    now = utcnow()
    swept = 0
    catalog = [record.id async for record in every_record(store, owner.scope(CATALOG_THREAD))]
    for thread in catalog:
        expired = [
            record.id
            async for record in every_record(store, owner.scope(thread))
            if is_expired(record, now) and not record.legal_hold
        ]
        if expired:
            async with await memory(namespace_of(thread)) as handle:
                await handle.forget(ids=expired)
            swept += len(expired)
    return swept


class Sweeper:
    """The background task that runs a store's sweep every ``interval`` minutes until stopped."""

    def __init__(self, run: Callable[[], Awaitable[int]]) -> None:
        self._run = run
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    def start(self, interval_minutes: float | None) -> asyncio.Task[None]:
        """The running task (started now unless one already runs)."""
        if self._task is not None and not self._task.done():
            return self._task
        interval = check_ttl(interval_minutes) or _DEFAULT_INTERVAL_MINUTES
        self._stop = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._loop(interval * 60))
        return self._task

    async def _loop(self, seconds: float) -> None:
        stop = self._stop
        while True:
            try:
                await asyncio.wait_for(stop.wait(), timeout=seconds)
                return
            except TimeoutError:
                pass
            try:
                swept = await self._run()
            except Exception:
                logger.exception("TTL sweep failed; retrying at the next interval")
            else:
                if swept:
                    logger.info("TTL sweep deleted %d expired items", swept)

    async def stop(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 - as LangGraph
        """Stop the task; ``False`` when it did not end within ``timeout`` seconds."""
        task = self._task
        if task is None or task.done():
            return True
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=timeout)
        except TimeoutError:
            return False
        self._task = None
        return True
