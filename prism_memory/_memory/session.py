"""A memory's place in the indexing queue: joining it, the ``done`` futures of its own writes,
and the bounded drain when it closes (or, in worker-only mode, the watch on the worker)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from ..errors import ConfigurationError, IndexingError
from ..indexing import QueueMember, join_queue, wait_for_worker
from ..models import IndexingReport, MemoryIdentity
from .core import MemoryContext

__all__ = ["IndexingSession"]

logger = logging.getLogger("prism_memory.memory")


class IndexingSession:
    """This memory's share of the (shared) indexing queue, and its writes not yet embedded."""

    __slots__ = ("_ctx", "_inflight", "_pollers", "closed", "queue")

    def __init__(self, ctx: MemoryContext) -> None:
        self._ctx = ctx
        self.queue: QueueMember | None = None
        self._inflight: dict[asyncio.Future[IndexingReport], int] = {}
        """This memory's ``done`` futures not yet resolved, each with how many rows it waits for."""
        self._pollers: set[asyncio.Task[None]] = set()
        """Worker-only mode: the tasks asking the store whether the worker embedded a write."""
        self.closed = False
        """Whether the memory was closed (it then writes nothing more)."""

    async def enter(self) -> None:
        """Join the queue at once when the memory embeds in process (it resumes the thread)."""
        if self._ctx.thread_id is not None and self._ctx.indexing.in_process:
            await self.ensure_queue()

    async def ensure_queue(self) -> QueueMember:
        """The queue member of this memory, joined (and started) on first use."""
        if self.closed:
            raise ConfigurationError("this memory is closed")
        if self.queue is None:  # one queue per store and embedder, shared by its open memories
            ctx = self._ctx
            self.queue = join_queue(
                store=ctx.backend.ledger,
                embedder=ctx.embedder,
                scope=ctx.identity,
                batch_size=ctx.limits.embed_batch,
                clock=ctx.clock,
                policy=ctx.indexing,
                next_writer=ctx.next_writer,
            )
        await self.queue.start()
        return self.queue

    async def resume(self) -> int:
        """Embed whatever the thread left pending; see :meth:`Memory.resume_indexing`."""
        if not self._ctx.indexing.in_process:
            raise ConfigurationError(
                "a worker-only memory does not embed: prism-memory worker does"
            )
        queue = await self.ensure_queue()
        return await queue.run_until_idle()

    def track(self, done: asyncio.Future[IndexingReport], count: int) -> None:
        """Count ``done`` (waiting for ``count`` rows) among this memory's own writes."""
        if not done.done():
            self._inflight[done] = count
            done.add_done_callback(self._settled)

    async def wait_own(self, seconds: float) -> None:
        """Wait up to ``seconds`` for this memory's own writes to be indexed or failed."""
        if seconds and self._inflight:
            await asyncio.wait(list(self._inflight), timeout=seconds)

    def _settled(self, future: asyncio.Future[IndexingReport]) -> None:
        self._inflight.pop(future, None)

    async def aclose(self) -> int:
        """See :meth:`Memory.aclose`: the bounded drain of this memory's own writes."""
        self.closed = True
        policy = self._ctx.indexing
        waiting = [future for future in self._inflight if not future.done()]
        if waiting and self.queue is not None:
            await asyncio.wait(waiting, timeout=policy.drain_seconds)
        left = sum(count for future, count in self._inflight.items() if not future.done())
        if self.queue is not None:
            queue, self.queue = self.queue, None
            # the own writes are in; past the bound, the rest is left pending at once
            await queue.aclose(drain=left == 0)
        for poller in self._pollers:
            poller.cancel()
        if self._pollers:
            await asyncio.wait(self._pollers)
        if left and policy.in_process:
            logger.warning(
                "memory closed with %d of its entries not yet embedded after %.0f s; they stay "
                "pending for the next start on the thread, or prism-memory worker",
                left,
                policy.drain_seconds,
            )
        return left

    def watch_worker(
        self, scope: MemoryIdentity, ids: Sequence[str]
    ) -> asyncio.Future[IndexingReport]:
        """Worker-only mode's ``done``: resolves once the worker indexed (or failed) every one of
        ``ids``; fails with :class:`IndexingError` if this memory closes first."""
        future: asyncio.Future[IndexingReport] = asyncio.get_running_loop().create_future()
        if not ids:
            future.set_result(IndexingReport(indexed=()))
            return future

        async def poll() -> None:
            try:
                report = await wait_for_worker(
                    self._ctx.backend.ledger, scope, ids, self._ctx.indexing
                )
            except asyncio.CancelledError:
                if not future.done():
                    future.set_exception(
                        IndexingError(
                            "memory closed before the worker indexed these entries; they remain "
                            "pending for it",
                            dict.fromkeys(ids, "pending at close"),
                        )
                    )
                    future.exception()  # retrieved here, so asyncio does not log it as lost
                raise
            except BaseException as exc:
                if not future.done():
                    future.set_exception(exc)
                raise
            if not future.done():
                future.set_result(report)

        task = asyncio.create_task(poll(), name=f"prism-worker-watch-{scope.thread_id}")
        self._pollers.add(task)
        task.add_done_callback(self._pollers.discard)
        return future
