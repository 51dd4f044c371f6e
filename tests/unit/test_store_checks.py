"""The argument checks every store adapter applies alike (``prism_memory.stores._records``)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from prism_memory.errors import ValidationError
from prism_memory.models import Lineage
from prism_memory.stores._records import (
    NewEntry,
    check_claim,
    check_entry_vectors,
    check_lease,
    check_limit,
    check_lineage_sources,
    lineage_source_ids,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def entry(entry_id: str, *sources: str) -> NewEntry:
    return NewEntry(
        id=entry_id,
        text=f"text of {entry_id}",
        role="user",
        metadata={},
        consent=None,
        sequence=None,
        occurred_at=T0,
        importance=0.5,
        lineage=Lineage(source_ids=sources) if sources else None,
    )


@pytest.mark.parametrize("limit", [0, 1, 7, 10**9])
def test_a_non_negative_integer_limit_passes(limit):
    assert check_limit(limit) is None


@pytest.mark.parametrize("limit", [-1, -100, True, False, 1.0, 0.0, "3", None])
def test_a_negative_boolean_or_non_integer_limit_is_refused(limit):
    with pytest.raises(ValidationError, match=r"^limit must be a non-negative integer$"):
        check_limit(limit)


def test_the_limit_message_names_the_argument_given():
    with pytest.raises(ValidationError, match=r"^top_k must be a non-negative integer$"):
        check_limit(-1, "top_k")


def test_vectors_absent_pass_for_any_entries():
    assert check_entry_vectors([object(), object()], None) is None


def test_one_vector_per_entry_passes():
    assert check_entry_vectors([object(), object()], [[1.0], [2.0]]) is None
    assert check_entry_vectors([object()], np.zeros((1, 3), dtype=np.float32)) is None
    assert check_entry_vectors([], []) is None


@pytest.mark.parametrize("count", [0, 1, 3])
def test_a_vector_count_other_than_the_entry_count_is_refused(count):
    with pytest.raises(ValidationError, match=f"^{count} vectors for 2 entries$"):
        check_entry_vectors([object(), object()], [[0.0]] * count)


@pytest.mark.parametrize("seconds", [0.001, 1, 30.0])
def test_a_positive_lease_passes(seconds):
    assert check_lease(seconds) is None


@pytest.mark.parametrize("seconds", [0, 0.0, -1, -0.5, float("nan")])
def test_a_lease_that_is_not_positive_is_refused(seconds):
    with pytest.raises(ValidationError, match=r"^lease_seconds must be positive$"):
        check_lease(seconds)


def test_claim_arguments_that_hold_pass():
    assert check_claim(0, 1.0) is None
    assert check_claim(5, 0.5, per_scope=0) is None
    assert check_claim(5, 0.5, per_scope=2) is None


def test_claim_refuses_a_negative_limit():
    with pytest.raises(ValidationError, match=r"^limit must be a non-negative integer$"):
        check_claim(-1, 1.0)


def test_claim_refuses_a_negative_per_scope_by_its_name():
    with pytest.raises(ValidationError, match=r"^per_scope must be a non-negative integer$"):
        check_claim(1, 1.0, per_scope=-1)


def test_claim_refuses_a_lease_that_is_not_positive():
    with pytest.raises(ValidationError, match=r"^lease_seconds must be positive$"):
        check_claim(1, 0.0)
    with pytest.raises(ValidationError, match=r"^lease_seconds must be positive$"):
        check_claim(1, 0.0, per_scope=1)


def test_lineage_source_ids_are_every_named_source_once_sorted():
    entries = [entry("e1", "s3", "s1"), entry("e2"), entry("e3", "s1", "s2")]
    assert lineage_source_ids(entries) == ["s1", "s2", "s3"]


def test_lineage_source_ids_of_entries_without_lineage_are_empty():
    assert lineage_source_ids([entry("e1"), entry("e2")]) == []
    assert lineage_source_ids([]) == []


def test_sources_known_in_the_thread_pass():
    assert check_lineage_sources([entry("e1", "old1", "old2")], {"old1", "old2"}) is None


def test_sources_within_the_batch_pass():
    assert check_lineage_sources([entry("e1"), entry("e2", "e1")], set()) is None
    assert check_lineage_sources([entry("e1", "e2"), entry("e2")], set()) is None


def test_sources_mixing_batch_and_thread_pass():
    assert check_lineage_sources([entry("e1"), entry("e2", "e1", "old")], {"old"}) is None


def test_entries_without_lineage_pass_with_nothing_known():
    assert check_lineage_sources([entry("e1"), entry("e2")], set()) is None


def test_an_unknown_source_is_refused_naming_the_position_not_the_id():
    entries = [entry("e1", "old"), entry("e2"), entry("e3", "e1", "ghost")]
    with pytest.raises(ValidationError) as raised:
        check_lineage_sources(entries, {"old"})
    assert str(raised.value) == "entries[2]: lineage names an entry unknown in this thread"
    assert "ghost" not in str(raised.value)


def test_the_first_entry_with_an_unknown_source_is_named():
    entries = [entry("e1"), entry("e2", "ghost"), entry("e3", "ghost")]
    with pytest.raises(ValidationError, match=r"^entries\[1\]: "):
        check_lineage_sources(entries, set())
