"""Every governance change is a write for read routing, and every later write moves the position a
read waits for (issue 47), on a real primary and streaming standby (``tests/topology_fixtures.py``).

Each test lets the replica catch up and lets one read clear what the store waited for, so the
store has nothing left to wait for; only then is replay paused and the change made. A store that
did not count the change as a write would read the paused replica -- which, as a store that wrote
nothing shows, still serves the old state."""

from __future__ import annotations

import pytest

from prism_memory.memory import Memory
from tests.topology.test_replica import _ids, memory_on, opened, schema

pytestmark = pytest.mark.postgres

__all__ = ["schema"]  # the fixture: a schema migrated on the primary, replayed by the replica

CONSENT = {"scope": "thread"}


async def _texts(memory: Memory, query: str) -> dict[str, str]:
    return {hit.id: hit.text for hit in (await memory.recall(query, top_k=5)).hits}


@pytest.mark.parametrize("change", ["forget", "revoke", "correct"])
async def test_a_governance_change_is_never_read_back_stale(replica_pair, schema, change):
    async with (
        opened(replica_pair, schema) as stores,
        opened(replica_pair, schema) as bystander,
        memory_on(stores) as memory,
    ):
        await memory.remember(
            [
                {"id": "keep", "text": "violins need rosin", "consent": CONSENT},
                {"id": "target", "text": "violins in the attic", "consent": CONSENT},
            ],
            wait=True,
        )
        await replica_pair.wait_caught_up()
        # one read on the caught-up replica: from here the store has nothing to wait for
        assert set(await _ids(memory, "violins")) == {"keep", "target"}
        await replica_pair.pause_replay()

        if change == "forget":
            assert await memory.forget(ids=["target"]) == 1
        elif change == "revoke":
            await memory.set_consent("target", visible=False)
        else:
            await memory.correct("target", "violins in the cellar")
        await replica_pair.wait_received()

        for _ in range(3):
            found = await _texts(memory, "violins")
            if change == "correct":
                assert found == {"keep": "violins need rosin", "target": "violins in the cellar"}
            else:
                assert found == {"keep": "violins need rosin"}
        if change != "correct":
            page = await memory.export_memory(identity=memory.identity)
            assert [entry["id"] for entry in page.entries] == ["keep"]
        # the paused replica still holds the old state: a store that wrote nothing reads it
        async with memory_on(bystander) as stale:
            old = await _texts(stale, "violins")
            assert old == {"keep": "violins need rosin", "target": "violins in the attic"}


async def test_a_later_write_raises_the_position_the_next_read_waits_for(replica_pair, schema):
    """Write A while the replica is paused: the read after it waits for A's position, in vain, and
    reads the primary (the position stays). The replica catches up past A; replay pauses again and
    write B follows. The next read must wait for B -- past A is not enough."""
    async with (
        opened(replica_pair, schema) as stores,
        opened(replica_pair, schema) as bystander,
        memory_on(stores) as memory,
    ):
        await replica_pair.pause_replay()
        await memory.remember({"id": "a", "text": "cellos of maple"}, wait=True)
        assert await _ids(memory, "cellos") == ["a"]  # from the primary: the replica lacks A
        await replica_pair.resume_replay()
        await replica_pair.wait_caught_up()
        await replica_pair.pause_replay()
        await memory.remember({"id": "b", "text": "cellos of spruce"}, wait=True)
        await replica_pair.wait_received()
        for _ in range(3):
            assert sorted(await _ids(memory, "cellos")) == ["a", "b"]
        async with memory_on(bystander) as stale:  # the replica: past A, not B
            assert await _ids(stale, "cellos") == ["a"]
