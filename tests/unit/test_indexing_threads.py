"""A queue's per-thread book (``prism_memory.indexing.threads``): handed-over rows taken in turns,
members, credit for indexed rows, the serving order and sweeps."""

from __future__ import annotations

from prism_memory.indexing.threads import Thread, Threads
from prism_memory.models import MemoryIdentity
from prism_memory.stores._records import ClaimedEntry

A = MemoryIdentity(tenant_id="acme", resource_id="ada", thread_id="a")
B = MemoryIdentity(tenant_id="acme", resource_id="ada", thread_id="b")
C = MemoryIdentity(tenant_id="acme", resource_id="ada", thread_id="c")


def row(scope: MemoryIdentity, entry_id: str) -> ClaimedEntry:
    return ClaimedEntry(scope=scope, id=entry_id, revision=1, text=entry_id, attempts=0)


def book(batch_size: int = 2, idle_poll_seconds: float = 5.0) -> Threads:
    return Threads(batch_size=batch_size, idle_poll_seconds=idle_poll_seconds)


def ids(rows: list[ClaimedEntry]) -> list[str]:
    return [r.id for r in rows]


def test_a_new_thread_holds_nothing():
    thread = Thread()
    assert list(thread.adopted) == []
    assert (thread.members, thread.indexed, thread.ready, thread.swept, thread.handed) == (
        0,
        0,
        False,
        None,
        0,
    )
    assert not hasattr(thread, "__dict__")


def test_thread_is_created_once_with_its_members():
    threads = book()
    first = threads.thread(A, members=2)
    assert first.members == 2
    assert threads.thread(A, members=7) is first
    assert first.members == 2
    assert threads.get(A) is first
    assert threads.get(B) is None
    assert A in threads
    assert B not in threads


def test_threads_iterate_in_creation_order():
    threads = book()
    threads.thread(B)
    threads.thread(A)
    assert list(threads) == [B, A]
    assert [scope for scope, _ in threads.items()] == [B, A]


def test_items_may_be_walked_while_threads_leave():
    threads = book()
    threads.thread(A, members=1)
    threads.thread(B, members=1)
    for scope, _ in threads.items():
        threads.left(scope)
    assert list(threads) == []


def test_touch_clears_the_sweep_and_counts_a_hand_over():
    threads = book()
    thread = threads.thread(A)
    thread.swept = 12.0
    threads.touch(A)
    assert thread.swept is None
    assert thread.handed == 1
    threads.touch(A)
    assert thread.handed == 2


def test_touch_of_an_unknown_thread_creates_nothing():
    threads = book()
    threads.touch(A)
    assert A not in threads


def test_adopt_queues_the_row_and_puts_its_thread_in_the_turns_once():
    threads = book()
    threads.thread(A).swept = 3.0
    threads.adopt(row(A, "a1"))
    threads.adopt(row(A, "a2"))
    thread = threads.get(A)
    assert thread is not None
    assert ids(list(thread.adopted)) == ["a1", "a2"]
    assert thread.ready is True
    assert thread.swept is None
    assert thread.handed == 2
    assert threads.has_adopted() is True
    # one turn for the thread, however many rows: a batch of 2 takes both, then nothing is left
    assert ids(threads.take_adopted(10, None)) == ["a1", "a2"]
    assert threads.has_adopted() is False


def test_nothing_adopted_at_first():
    threads = book()
    threads.thread(A)
    assert threads.has_adopted() is False
    assert threads.take_adopted(5, None) == []


def test_turns_take_one_batch_of_each_thread_per_round():
    threads = book(batch_size=2)
    for entry_id in ["a1", "a2", "a3", "a4", "a5"]:
        threads.adopt(row(A, entry_id))
    for entry_id in ["b1", "b2", "b3"]:
        threads.adopt(row(B, entry_id))
    threads.adopt(row(C, "c1"))
    assert ids(threads.take_adopted(100, None)) == [
        "a1", "a2", "b1", "b2", "c1", "a3", "a4", "b3", "a5"
    ]  # fmt: skip
    assert threads.has_adopted() is False


def test_turns_stop_at_the_limit_and_resume_where_they_stopped():
    threads = book(batch_size=2)
    for entry_id in ["a1", "a2", "a3"]:
        threads.adopt(row(A, entry_id))
    for entry_id in ["b1", "b2"]:
        threads.adopt(row(B, entry_id))
    assert ids(threads.take_adopted(3, None)) == ["a1", "a2", "b1"]
    # b was cut short by the limit: it keeps its turn after a
    assert ids(threads.take_adopted(1, None)) == ["a3"]
    assert ids(threads.take_adopted(5, None)) == ["b2"]


def test_a_limit_of_zero_takes_nothing():
    threads = book()
    threads.adopt(row(A, "a1"))
    assert threads.take_adopted(0, None) == []
    assert threads.has_adopted() is True


def test_a_thread_emptied_in_turns_leaves_the_turns_but_stays_while_it_has_members():
    threads = book(batch_size=5)
    threads.thread(A, members=1)
    threads.adopt(row(A, "a1"))
    assert ids(threads.take_adopted(5, None)) == ["a1"]
    thread = threads.get(A)
    assert thread is not None
    assert thread.ready is False
    # adopting again puts it back in the turns
    threads.adopt(row(A, "a2"))
    assert thread.ready is True
    assert ids(threads.take_adopted(5, None)) == ["a2"]


def test_a_thread_without_members_goes_with_its_last_adopted_row():
    threads = book(batch_size=5)
    threads.adopt(row(A, "a1"))  # created by adopt, without a member
    assert ids(threads.take_adopted(5, None)) == ["a1"]
    assert A not in threads


def test_a_thread_without_members_stays_while_rows_remain():
    threads = book(batch_size=1)
    threads.adopt(row(A, "a1"))
    threads.adopt(row(A, "a2"))
    assert ids(threads.take_adopted(1, None)) == ["a1"]
    assert A in threads


def test_taking_for_one_scope_takes_its_rows_in_order_up_to_the_limit():
    threads = book(batch_size=1)
    for entry_id in ["a1", "a2", "a3"]:
        threads.adopt(row(A, entry_id))
    threads.adopt(row(B, "b1"))
    assert ids(threads.take_adopted(2, A)) == ["a1", "a2"]
    assert ids(threads.take_adopted(5, A)) == ["a3"]
    assert threads.take_adopted(5, A) == []
    assert threads.take_adopted(5, C) == []
    assert ids(threads.take_adopted(5, B)) == ["b1"]


def test_a_scope_emptied_by_a_scoped_take_is_skipped_in_the_turns():
    threads = book(batch_size=2)
    threads.thread(A, members=1)
    threads.adopt(row(A, "a1"))
    threads.adopt(row(B, "b1"))
    assert ids(threads.take_adopted(5, A)) == ["a1"]
    assert threads.has_adopted() is True
    assert ids(threads.take_adopted(5, None)) == ["b1"]
    assert threads.has_adopted() is False
    # a, still a member, is out of the turns and can be adopted again
    thread = threads.get(A)
    assert thread is not None
    assert thread.ready is False
    threads.adopt(row(A, "a2"))
    assert ids(threads.take_adopted(5, None)) == ["a2"]


def test_count_credits_each_row_when_all_were_indexed():
    threads = book()
    threads.thread(A)
    threads.thread(B)
    threads.count([row(A, "a1"), row(A, "a2"), row(B, "b1"), row(C, "c1")], 4)
    assert threads.get(A).indexed == 2  # type: ignore[union-attr]
    assert threads.get(B).indexed == 1  # type: ignore[union-attr]
    assert C not in threads


def test_count_credits_one_thread_with_the_indexed_part_of_a_batch():
    threads = book()
    threads.thread(A)
    threads.count([row(A, "a1"), row(A, "a2"), row(A, "a3")], 2)
    assert threads.get(A).indexed == 2  # type: ignore[union-attr]


def test_count_credits_nobody_when_a_batch_of_several_threads_lost_rows():
    threads = book()
    threads.thread(A)
    threads.thread(B)
    threads.count([row(A, "a1"), row(B, "b1")], 1)
    assert threads.get(A).indexed == 0  # type: ignore[union-attr]
    assert threads.get(B).indexed == 0  # type: ignore[union-attr]


def test_count_of_a_thread_that_left_is_ignored():
    threads = book()
    threads.count([row(A, "a1"), row(A, "a2")], 1)
    assert A not in threads


def test_drop_adopted_forgets_every_row_and_turn():
    threads = book()
    threads.thread(A, members=1)
    threads.adopt(row(A, "a1"))
    threads.adopt(row(B, "b1"))
    threads.drop_adopted()
    assert threads.has_adopted() is False
    assert threads.take_adopted(5, None) == []
    assert list(threads.get(A).adopted) == []  # type: ignore[union-attr]
    assert threads.get(A).ready is False  # type: ignore[union-attr]
    assert threads.get(B).ready is False  # type: ignore[union-attr]
    threads.adopt(row(B, "b2"))
    assert ids(threads.take_adopted(5, None)) == ["b2"]


def test_served_threads_move_to_the_back_in_the_order_given():
    threads = book()
    for scope in [A, B, C]:
        threads.thread(scope)
    threads.served([A, B, A])
    assert list(threads) == [C, A, B]
    threads.served([C, MemoryIdentity(tenant_id="acme", resource_id="ada", thread_id="z")])
    assert list(threads) == [A, B, C]


def test_a_sweep_counts_only_within_idle_poll_seconds():
    threads = book(idle_poll_seconds=5.0)
    thread = threads.thread(A)
    assert threads.swept(thread, 100.0) is False
    thread.swept = 100.0
    assert threads.swept(thread, 100.0) is True
    assert threads.swept(thread, 104.9) is True
    assert threads.swept(thread, 105.0) is False
    assert threads.swept(thread, 110.0) is False


def test_a_member_leaving_drops_the_thread_only_without_members_and_rows():
    threads = book()
    threads.thread(A, members=2)
    threads.left(A)
    assert threads.get(A).members == 1  # type: ignore[union-attr]
    threads.left(A)
    assert A not in threads


def test_a_thread_whose_last_member_left_stays_for_its_adopted_rows():
    threads = book(batch_size=5)
    threads.thread(A, members=1)
    threads.adopt(row(A, "a1"))
    threads.left(A)
    assert A in threads
    assert threads.get(A).members == 0  # type: ignore[union-attr]
    assert ids(threads.take_adopted(5, None)) == ["a1"]
    assert A not in threads


def test_leaving_an_unknown_thread_does_nothing():
    threads = book()
    threads.left(A)
    assert A not in threads


def test_a_thread_gone_while_in_the_turns_is_skipped():
    threads = book(batch_size=2)
    threads.thread(A, members=1)
    threads.adopt(row(A, "a1"))
    threads.adopt(row(B, "b1"))
    assert ids(threads.take_adopted(5, A)) == ["a1"]
    threads.left(A)  # no member and no row left: a goes, though its turn is still queued
    assert A not in threads
    assert threads.has_adopted() is True
    assert ids(threads.take_adopted(5, None)) == ["b1"]


def test_only_a_thread_gone_from_the_turns_has_nothing_adopted():
    threads = book()
    threads.thread(A, members=1)
    threads.adopt(row(A, "a1"))
    assert ids(threads.take_adopted(5, A)) == ["a1"]
    threads.left(A)
    assert threads.has_adopted() is False
    assert threads.take_adopted(5, None) == []


def test_a_thread_gone_while_queued_and_made_again_takes_one_turn_a_round():
    threads = book(batch_size=1)
    threads.thread(A, members=1)
    threads.adopt(row(A, "a1"))
    for name in ("b1", "b2", "b3"):
        threads.adopt(row(B, name))
    assert ids(threads.take_adopted(5, A)) == ["a1"]
    threads.left(A)  # gone while its turn was queued
    threads.thread(A, members=1)  # and made again: it joins the turns at the back, once
    for name in ("a2", "a3", "a4", "a5"):
        threads.adopt(row(A, name))
    assert ids(threads.take_adopted(7, None)) == ["b1", "a2", "b2", "a3", "b3", "a4", "a5"]
