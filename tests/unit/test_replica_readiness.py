"""Where a read goes, decided from WAL positions alone (issue 47): :meth:`Executor._replica_ready`
with its two position reads scripted -- the primary's WAL position now, and how far the replica has
replayed -- so the interleavings of overlapping reads and writes are exact. The real primary and
standby, with replay paused and resumed, are in ``tests/topology/test_replica.py``."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from prism_memory.errors import StorageError
from prism_memory.postgres._executor import Executor, ReadReplica
from prism_memory.postgres.statements.catalog import PRIMARY_LSN, REPLAYED_LSN


class Scripted(Executor):
    """An executor whose only statements are the two WAL-position reads, answered from
    :attr:`primary` and :attr:`replayed` (no connection is ever opened)."""

    def __init__(self, wait_seconds: float = 30.0) -> None:
        engine = create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:9/none")
        replica = create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:9/replica")
        super().__init__(
            engine, owns_engine=True, replica=ReadReplica(replica, wait_seconds=wait_seconds)
        )
        self.primary = 0
        self.replayed = 0
        self.asked_primary = 0
        self.polls = 0
        self.polled = asyncio.Event()

    async def _fetch_on(
        self, endpoint: Any, action: str, statement: str, params: Any = None
    ) -> list[Any]:
        if statement == PRIMARY_LSN:
            self.asked_primary += 1
            return [(self.primary,)]
        assert statement == REPLAYED_LSN
        self.polls += 1
        self.polled.set()
        return [(self.replayed,)]

    def impatient(self) -> None:
        """From now on a read looks at the replica once and does not wait."""
        assert self._replica is not None
        self._replica.config = dataclasses.replace(self._replica.config, wait_seconds=0.0)


async def _polled(executor: Scripted, at_least: int) -> None:
    while executor.polls < at_least:
        executor.polled.clear()
        await executor.polled.wait()


async def test_a_read_waits_for_the_replica_to_replay_the_stores_last_write() -> None:
    ex = Scripted(wait_seconds=0.0)
    assert await ex._replica_ready("read")  # nothing written: the replica, without asking
    assert ex.asked_primary == 0
    ex.primary, ex.replayed = 100, 50
    ex.wrote()
    assert not await ex._replica_ready("read")  # replayed 50 < 100: the primary
    assert not await ex._replica_ready("read")  # still needed without a new write
    ex.replayed = 100
    assert await ex._replica_ready("read")
    assert ex.asked_primary == 1  # one write, one look at the primary
    ex.replayed = 90  # a replica never goes back, but a read with nothing to wait for…
    assert await ex._replica_ready("read")  # …does not even look
    await ex.close()


async def test_a_later_write_raises_the_position_the_next_read_waits_for() -> None:
    ex = Scripted(wait_seconds=0.0)
    ex.primary, ex.replayed = 100, 0
    ex.wrote()
    assert not await ex._replica_ready("read")  # needs 100, the replica is at 0
    ex.primary = 200
    ex.wrote()  # a second write before the replica caught up with the first
    ex.replayed = 150  # past the first write, not the second
    assert not await ex._replica_ready("read")
    ex.replayed = 200
    assert await ex._replica_ready("read")
    await ex.close()


async def test_a_position_a_read_needs_is_not_cleared_by_another_reads_replay() -> None:
    """Read 1 waits for write 1 (100); write 2 (200) and read 2, which waits for 200, start
    meanwhile; the replica replays to 150, read 1 goes to it. Read 2's position must outlive read
    1: a read 3 with no write of its own still needs 200, so with the replica at 150 it goes to the
    primary (cleared, it would read the replica, which lacks write 2)."""
    ex = Scripted(wait_seconds=30.0)
    ex.primary, ex.replayed = 100, 50
    ex.wrote()
    first = asyncio.create_task(ex._replica_ready("read 1"))
    await _polled(ex, 1)  # read 1 waits for 100
    ex.primary = 200
    ex.wrote()
    second = asyncio.create_task(ex._replica_ready("read 2"))
    await _polled(ex, 2)  # read 2 waits for 200
    ex.replayed = 150
    assert await asyncio.wait_for(first, 30)  # read 1: 150 >= 100, the replica
    assert not second.done()  # read 2: still waiting for 200
    second.cancel()
    ex.impatient()
    assert not await ex._replica_ready("read 3")  # 150 < 200: the primary
    ex.replayed = 200
    assert await ex._replica_ready("read 4")
    await ex.close()


async def test_overlapping_reads_after_one_write_all_wait_for_it() -> None:
    """Two reads waiting for the same write: the first to see it replayed clears the position
    once, and neither goes to the replica before it has replayed that write."""
    ex = Scripted(wait_seconds=30.0)
    ex.primary, ex.replayed = 100, 10
    ex.wrote()
    reads = [asyncio.create_task(ex._replica_ready(f"read {i}")) for i in range(2)]
    await _polled(ex, 2)
    assert not any(read.done() for read in reads)
    ex.replayed = 100
    assert await asyncio.wait_for(asyncio.gather(*reads), 30) == [True, True]
    await ex.close()


async def test_strict_reads_wait_for_what_the_primary_has_now() -> None:
    """``consistency="strict"``: every read asks the primary, writes or not, and keeps no
    position for the next read."""
    ex = Scripted(wait_seconds=0.0)
    assert ex._replica is not None
    ex._replica.config = dataclasses.replace(ex._replica.config, consistency="strict")
    ex.primary, ex.replayed = 100, 50
    assert not await ex._replica_ready("read")  # nothing written, yet behind the primary
    ex.replayed = 100
    assert await ex._replica_ready("read")
    ex.primary = 200  # another writer
    assert not await ex._replica_ready("read")
    assert ex.asked_primary == 3
    assert ex._replica.needed is None
    await ex.close()


async def test_a_replica_that_reports_no_replay_position_is_not_read() -> None:
    ex = Scripted(wait_seconds=0.0)
    ex.primary, ex.replayed = 100, None  # type: ignore[assignment]
    ex.wrote()
    assert not await ex._replica_ready("read")
    ex.replayed = 101
    assert await ex._replica_ready("read")
    await ex.close()


async def test_a_replay_that_arrives_while_a_read_waits_is_used() -> None:
    ex = Scripted(wait_seconds=30.0)
    ex.primary, ex.replayed = 100, 0
    ex.wrote()
    read = asyncio.create_task(ex._replica_ready("read"))
    await _polled(ex, 3)  # it keeps looking
    assert not read.done()
    ex.replayed = 100
    assert await asyncio.wait_for(read, 30)
    await ex.close()


async def test_a_wait_shorter_than_a_second_still_waits() -> None:
    """The default wait is a quarter of a second: a read keeps looking until it is over."""
    ex = Scripted(wait_seconds=0.95)
    ex.primary, ex.replayed = 100, 0
    ex.wrote()
    read = asyncio.create_task(ex._replica_ready("read"))
    await _polled(ex, 1)
    ex.replayed = 100  # arrives milliseconds later: well inside the wait
    assert await asyncio.wait_for(read, 30)
    await ex.close()


def test_the_replica_defaults() -> None:
    engine = create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:9/none")
    replica = ReadReplica(engine)
    assert (replica.wait_seconds, replica.consistency) == (0.25, "session")
    with pytest.raises(dataclasses.FrozenInstanceError):
        replica.wait_seconds = 1.0  # type: ignore[misc]
    executor = Executor(engine, owns_engine=False, replica=replica)
    assert executor.read_replica is replica
    assert executor.engine is engine
    assert executor.pooling == "session"
    assert executor.sets_plans is False
    plain = Executor(engine, owns_engine=False, pooling="transaction", sets_plans=True)
    assert plain.read_replica is None
    assert plain.pooling == "transaction"
    assert plain.sets_plans is True


class FlakyReplica(Executor):
    """An executor whose replica fails every read while :attr:`replica_down`; the primary answers
    ``[("primary",)]``, or fails too while :attr:`primary_down` (no connection is ever opened)."""

    def __init__(self) -> None:
        engine = create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:9/none")
        replica = create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:9/replica")
        super().__init__(engine, owns_engine=True, replica=ReadReplica(replica, retry_seconds=10.0))
        self.replica_down = True
        self.primary_down = False

    async def _fetch_on(
        self, endpoint: Any, action: str, statement: str, params: Any = None
    ) -> list[Any]:
        if endpoint is not self._replica:
            if self.primary_down:
                raise StorageError("the primary is gone")
            return [("primary",)]
        if self.replica_down:
            raise StorageError("the replica is gone")
        return [("replica",)]


async def test_a_read_the_replica_fails_is_answered_and_a_success_resets_the_back_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ex = FlakyReplica()
    replica = ex._replica
    assert replica is not None
    with caplog.at_level(logging.WARNING, logger="prism_memory.postgres"):
        assert await ex.fetch("read", "SELECT 1", replica=True) == [("primary",)]
        assert "reads go to the primary for 10 s" in caplog.text
        assert await ex.fetch("read", "SELECT 1", replica=True) == [("primary",)]  # avoided
        assert caplog.text.count("read replica") == 1

        replica.down_until = 0.0  # the back-off is over, and the replica is back
        ex.replica_down = False
        assert await ex.fetch("read", "SELECT 1", replica=True) == [("replica",)]
        caplog.clear()
        ex.replica_down = True
        assert await ex.fetch("read", "SELECT 1", replica=True) == [("primary",)]
        # the success before reset the count: 10 s again, not doubled
        assert "reads go to the primary for 10 s" in caplog.text
    await ex.close()


async def test_when_the_primary_fails_too_the_error_names_both() -> None:
    ex = FlakyReplica()
    ex.primary_down = True
    with pytest.raises(StorageError) as raised:
        await ex.fetch("recall", "SELECT 1", replica=True)
    message = str(raised.value)
    assert message.startswith("recall failed on the read replica 127.0.0.1:9/replica (")
    assert "and then on the primary" in message
    await ex.close()
