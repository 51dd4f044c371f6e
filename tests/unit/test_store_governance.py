"""Governance changes and the lineage walk (``prism_memory.stores._governance``), run over small
fakes of the callbacks a store passes in: a lineage graph for ``dependents_of`` and a dict of
records for ``records_of``, each recording how it was called."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
import pytest

from prism_memory.errors import CapExceededError, NotFoundError, ValidationError
from prism_memory.models import MemoryConsent, MemoryRecord
from prism_memory.stores._governance import (
    ConsentUpdate,
    GovernanceChange,
    GovernanceResult,
    LineageWalk,
    expand_walk,
    walk_lineage,
)
from prism_memory.stores._records import Tombstone

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 2, 2, 12, 0, tzinfo=UTC)


class Graph:
    """``dependents_of``: the rows whose lineage names any of the given ids, in graph order."""

    def __init__(self, lineage: dict[str, tuple[str, ...]]) -> None:
        self.lineage = lineage
        self.calls: list[tuple[list[str], int]] = []

    async def __call__(self, ids: Sequence[str], limit: int) -> list[tuple[str, tuple[str, ...]]]:
        self.calls.append((list(ids), limit))
        rows = [(i, s) for i, s in self.lineage.items() if any(x in ids for x in s)]
        return rows[:limit]


class Records:
    """``records_of``: the stored records of the given ids (absent ids left out)."""

    def __init__(self, *records: MemoryRecord) -> None:
        self.records = {r.id: r for r in records}
        self.calls: list[list[str]] = []

    async def __call__(self, ids: Sequence[str]) -> list[MemoryRecord]:
        self.calls.append(list(ids))
        return [self.records[i] for i in ids if i in self.records]


def record(
    entry_id: str, consent: MemoryConsent | None = None, *, legal_hold: bool = False
) -> MemoryRecord:
    return MemoryRecord(
        tenant_id="acme",
        resource_id="ada",
        thread_id="t1",
        id=entry_id,
        text=f"text of {entry_id}",
        role="user",
        metadata={},
        consent=consent,
        sequence=1,
        occurred_at=T0,
        created_at=T0,
        written_at=T0,
        importance=0.5,
        lineage=None,
        legal_hold=legal_hold,
    )


def walk(*roots: str, delete_dependents: bool = False) -> LineageWalk:
    return LineageWalk(
        roots=roots,
        reason="forgotten",
        max_depth=5,
        max_entries=10,
        delete_dependents=delete_dependents,
    )


# ---- the records' defaults and results --------------------------------------------------------


def test_a_change_defaults_to_changing_nothing():
    change = GovernanceChange()
    assert change.walk is None
    assert change.tombstones == ()
    assert change.consent is None
    assert change.consent_update is None
    assert change.text is None
    assert change.text_model is None
    assert change.hold == ()
    assert change.delete == ()
    assert change.untombstone is None


def test_walk_and_update_defaults():
    assert LineageWalk(("r",), "forgotten", 1, 1).delete_dependents is False
    update = ConsentUpdate("e1", walk("e1"))
    assert (update.visible, update.source, update.scope) == (None, None, None)


def test_a_result_defaults_to_nothing_changed():
    result = GovernanceResult(record=None)
    assert (result.held, result.deleted, result.dependents, result.walked) == (0, 0, (), False)


def test_a_result_after_a_walk_lists_its_dependents():
    result = GovernanceResult.after_walk(None, held=2, deleted=3, dependents=("d1", "d2"))
    assert result == GovernanceResult(
        record=None, held=2, deleted=3, dependents=("d1", "d2"), walked=True
    )


def test_a_walk_that_found_no_dependent_still_walked():
    result = GovernanceResult.after_walk(None, held=0, deleted=0, dependents=())
    assert result.dependents == ()
    assert result.walked is True


def test_a_result_without_a_walk_did_not_walk():
    stored = record("e1")
    result = GovernanceResult.after_walk(stored, held=1, deleted=0, dependents=None)
    assert result == GovernanceResult(record=stored, held=1, deleted=0, dependents=(), walked=False)


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (walk("r"), "roots"),
        (ConsentUpdate("e1", walk("e1")), "visible"),
        (GovernanceChange(), "hold"),
        (GovernanceResult(record=None), "held"),
    ],
)
def test_governance_records_are_frozen_and_have_no_instance_dict(value: object, field: str):
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, field, None)
    assert not hasattr(value, "__dict__")


# ---- ConsentUpdate.applied_to -----------------------------------------------------------------


def test_a_revoke_hides_the_entry_and_stamps_revoked_at():
    current = MemoryConsent(source="agent", scope="user", granted_at=T0)
    applied = ConsentUpdate("e1", walk("e1"), visible=False).applied_to(current, NOW)
    assert applied == MemoryConsent(
        source="agent", scope="user", visible=False, granted_at=T0, revoked_at=NOW
    )


def test_a_grant_shows_the_entry_clears_revoked_at_and_stamps_granted_at():
    current = MemoryConsent(source="system", visible=False, granted_at=T0, revoked_at=T0)
    applied = ConsentUpdate("e1", walk("e1"), visible=True).applied_to(current, NOW)
    assert applied == MemoryConsent(
        source="system", scope="thread", visible=True, granted_at=NOW, revoked_at=None
    )


def test_a_provenance_change_leaves_visibility_and_stamps_alone():
    current = MemoryConsent(visible=False, granted_at=T0, revoked_at=T0)
    applied = ConsentUpdate("e1", walk("e1"), source="agent", scope="profile").applied_to(
        current, NOW
    )
    assert applied == MemoryConsent(
        source="agent", scope="profile", visible=False, granted_at=T0, revoked_at=T0
    )


def test_an_empty_update_keeps_the_consent():
    current = MemoryConsent(source="agent", scope="user", granted_at=T0)
    assert ConsentUpdate("e1", walk("e1")).applied_to(current, NOW) == current


def test_a_bad_source_is_refused_by_name():
    with pytest.raises(ValidationError, match=r"^invalid MemoryConsent: source: "):
        ConsentUpdate("e1", walk("e1"), source="robot").applied_to(MemoryConsent(), NOW)


def test_a_bad_scope_is_refused_by_name():
    with pytest.raises(ValidationError, match=r"^invalid MemoryConsent: scope: "):
        ConsentUpdate("e1", walk("e1"), scope="world").applied_to(MemoryConsent(), NOW)


# ---- walk_lineage -----------------------------------------------------------------------------


async def test_no_roots_reads_nothing():
    graph = Graph({"d1": ("r",)})
    assert await walk_lineage(graph, [], max_depth=3, max_entries=3) == {}
    assert graph.calls == []


async def test_a_root_without_dependents_finds_none_in_one_read():
    graph = Graph({"other": ("x",)})
    assert await walk_lineage(graph, ["r"], max_depth=3, max_entries=10) == {}
    assert graph.calls == [(["r"], 12)]


async def test_dependents_are_found_level_by_level_each_caused_by_its_root():
    graph = Graph({"a": ("r",), "b": ("a",), "c": ("b", "a"), "x": ("q",)})
    found = await walk_lineage(graph, ["r"], max_depth=5, max_entries=10)
    assert found == {"a": "r", "b": "r", "c": "r"}
    # each read asks room for the seen rows plus one past the cap: 10 + seen + 1
    # r → a; a → b and c (c also names b, a level below: found once); b, c → nothing new
    assert graph.calls == [(["r"], 12), (["a"], 13), (["b", "c"], 15)]


async def test_each_dependent_is_caused_by_the_root_it_descends_from():
    graph = Graph({"a": ("r1",), "b": ("r2",), "c": ("b",), "d": ("a", "b")})
    found = await walk_lineage(graph, ["r1", "r2"], max_depth=5, max_entries=10)
    assert found == {"a": "r1", "b": "r2", "c": "r2", "d": "r1"}


async def test_a_dependent_of_two_roots_takes_its_first_known_source():
    graph = Graph({"d": ("elsewhere", "r2", "r1")})
    found = await walk_lineage(graph, ["r1", "r2"], max_depth=5, max_entries=10)
    assert found == {"d": "r2"}


async def test_a_root_named_again_below_is_not_a_dependent():
    graph = Graph({"a": ("r",), "r": ("a",)})
    assert await walk_lineage(graph, ["r"], max_depth=5, max_entries=10) == {"a": "r"}


async def test_a_lineage_exactly_max_depth_deep_is_walked():
    graph = Graph({"a": ("r",), "b": ("a",), "c": ("b",)})
    found = await walk_lineage(graph, ["r"], max_depth=3, max_entries=10)
    assert found == {"a": "r", "b": "r", "c": "r"}


async def test_a_lineage_deeper_than_max_depth_is_refused():
    graph = Graph({"a": ("r",), "b": ("a",), "c": ("b",), "d": ("c",)})
    with pytest.raises(CapExceededError, match=r"^lineage is deeper than 3; nothing was changed$"):
        await walk_lineage(graph, ["r"], max_depth=3, max_entries=10)


async def test_a_depth_of_zero_allows_no_dependent():
    assert await walk_lineage(Graph({}), ["r"], max_depth=0, max_entries=10) == {}
    with pytest.raises(CapExceededError):
        await walk_lineage(Graph({"a": ("r",)}), ["r"], max_depth=0, max_entries=10)


async def test_exactly_max_entries_dependents_are_walked():
    graph = Graph({"a": ("r",), "b": ("r",), "c": ("a",)})
    found = await walk_lineage(graph, ["r"], max_depth=5, max_entries=3)
    assert found == {"a": "r", "b": "r", "c": "r"}


async def test_more_than_max_entries_dependents_are_refused():
    graph = Graph({"a": ("r",), "b": ("r",), "c": ("a",), "d": ("b",)})
    with pytest.raises(
        CapExceededError, match=r"^lineage touches over 3 entries; nothing was changed$"
    ):
        await walk_lineage(graph, ["r"], max_depth=5, max_entries=3)


async def test_one_level_over_max_entries_is_refused_at_once():
    graph = Graph({"a": ("r",), "b": ("r",), "c": ("r",)})
    with pytest.raises(CapExceededError, match="over 2 entries"):
        await walk_lineage(graph, ["r"], max_depth=5, max_entries=2)
    assert len(graph.calls) == 1


# ---- expand_walk ------------------------------------------------------------------------------


async def test_a_change_without_walk_or_update_is_returned_as_it_is():
    change = GovernanceChange(hold=("e1",), delete=["e2"])  # type: ignore[arg-type]
    graph, records = Graph({}), Records()
    expanded, dependents = await expand_walk(change, graph, records, NOW)
    assert expanded is change
    assert dependents is None
    assert graph.calls == []
    assert records.calls == []


@pytest.mark.parametrize("field", ["hold", "delete"])
async def test_a_bare_string_of_ids_is_refused_before_anything_is_read(field):
    change = GovernanceChange(walk=walk("r"), **{field: "staff"})  # type: ignore[arg-type]
    graph, records = Graph({"a": ("r",)}), Records()
    with pytest.raises(ValidationError, match=f"^{field} must be a list, tuple or set of ids"):
        await expand_walk(change, graph, records, NOW)
    assert graph.calls == []
    assert records.calls == []


async def test_a_walk_tombstones_each_root_by_itself_and_each_dependent_by_its_root():
    prior = Tombstone("z", "z", "held", T0)
    change = GovernanceChange(walk=walk("r1", "r2"), tombstones=(prior,), delete=("x",))
    graph = Graph({"a": ("r1",), "b": ("a",), "c": ("r2",)})
    records = Records()
    expanded, dependents = await expand_walk(change, graph, records, NOW)
    assert dependents == ("a", "c", "b")
    assert expanded == GovernanceChange(
        walk=None,
        tombstones=(
            prior,
            Tombstone("r1", "r1", "forgotten", NOW),
            Tombstone("r2", "r2", "forgotten", NOW),
            Tombstone("a", "r1", "forgotten", NOW),
            Tombstone("c", "r2", "forgotten", NOW),
            Tombstone("b", "r1", "forgotten", NOW),
        ),
        delete=("x",),
    )
    assert records.calls == []  # nothing to delete: the records are not read


async def test_a_walk_without_dependents_tombstones_its_roots_only():
    change = GovernanceChange(walk=walk("r", delete_dependents=True))
    records = Records()
    expanded, dependents = await expand_walk(change, Graph({}), records, NOW)
    assert dependents == ()
    assert expanded.tombstones == (Tombstone("r", "r", "forgotten", NOW),)
    assert expanded.delete == ()
    assert records.calls == []


async def test_deleting_dependents_spares_those_under_legal_hold():
    change = GovernanceChange(walk=walk("r", delete_dependents=True), delete=("x",))
    graph = Graph({"a": ("r",), "b": ("r",), "c": ("a",)})
    records = Records(record("a"), record("b", legal_hold=True), record("c"))
    expanded, dependents = await expand_walk(change, graph, records, NOW)
    assert dependents == ("a", "b", "c")
    assert expanded.delete == ("x", "a", "c")
    assert records.calls == [["a", "b", "c"]]
    assert len(expanded.tombstones) == 4  # the root and every dependent, held or not


async def test_a_walk_over_the_caps_changes_nothing():
    change = GovernanceChange(
        walk=LineageWalk(roots=("r",), reason="revoked", max_depth=1, max_entries=10)
    )
    graph = Graph({"a": ("r",), "b": ("a",)})
    with pytest.raises(CapExceededError, match="deeper than 1"):
        await expand_walk(change, graph, Records(), NOW)


async def test_a_consent_update_of_an_absent_entry_is_not_found():
    update = ConsentUpdate("e1", walk("e1"), visible=False)
    with pytest.raises(NotFoundError, match=r"^the entry does not exist in this scope$"):
        await expand_walk(GovernanceChange(consent_update=update), Graph({}), Records(), NOW)


async def test_revoking_an_entry_in_force_runs_its_revoke_walk():
    revoke = LineageWalk(roots=("e1",), reason="revoked", max_depth=5, max_entries=10)
    update = ConsentUpdate("e1", revoke, visible=False)
    records = Records(record("e1"))  # no explicit consent: the default, in force
    expanded, dependents = await expand_walk(
        GovernanceChange(consent_update=update), Graph({"d": ("e1",)}), records, NOW
    )
    assert dependents == ("d",)
    assert expanded == GovernanceChange(
        consent=("e1", MemoryConsent(visible=False, revoked_at=NOW)),
        tombstones=(
            Tombstone("e1", "e1", "revoked", NOW),
            Tombstone("d", "e1", "revoked", NOW),
        ),
    )
    assert records.calls == [["e1"]]


@pytest.mark.parametrize(
    "stored",
    [
        MemoryConsent(visible=False, revoked_at=T0),
        MemoryConsent(visible=False),
        MemoryConsent(visible=True, revoked_at=T0),
    ],
)
async def test_revoking_an_entry_not_in_force_runs_no_walk(stored):
    update = ConsentUpdate("e1", walk("e1"), visible=False)
    graph = Graph({"d": ("e1",)})
    expanded, dependents = await expand_walk(
        GovernanceChange(consent_update=update), graph, Records(record("e1", stored)), NOW
    )
    assert dependents is None
    assert expanded == GovernanceChange(
        consent=("e1", MemoryConsent(visible=False, granted_at=None, revoked_at=NOW))
    )
    assert graph.calls == []


@pytest.mark.parametrize(
    "stored",
    [
        MemoryConsent(visible=False, revoked_at=T0),
        MemoryConsent(visible=False),
        MemoryConsent(visible=True, revoked_at=T0),
    ],
)
async def test_granting_an_entry_not_in_force_lifts_its_revoked_tombstones(stored):
    update = ConsentUpdate("e1", walk("e1"), visible=True)
    expanded, dependents = await expand_walk(
        GovernanceChange(consent_update=update), Graph({}), Records(record("e1", stored)), NOW
    )
    assert dependents is None
    assert expanded == GovernanceChange(
        consent=("e1", MemoryConsent(visible=True, granted_at=NOW, revoked_at=None)),
        untombstone=("e1", "revoked"),
    )


async def test_granting_an_entry_in_force_only_restamps_it():
    update = ConsentUpdate("e1", walk("e1"), visible=True)
    stored = MemoryConsent(source="agent", granted_at=T0)
    expanded, dependents = await expand_walk(
        GovernanceChange(consent_update=update), Graph({}), Records(record("e1", stored)), NOW
    )
    assert dependents is None
    assert expanded == GovernanceChange(
        consent=("e1", MemoryConsent(source="agent", visible=True, granted_at=NOW))
    )


async def test_a_provenance_change_neither_walks_nor_lifts():
    update = ConsentUpdate("e1", walk("e1"), scope="user")
    stored = MemoryConsent(visible=False, revoked_at=T0)
    graph = Graph({"d": ("e1",)})
    expanded, dependents = await expand_walk(
        GovernanceChange(consent_update=update), graph, Records(record("e1", stored)), NOW
    )
    assert dependents is None
    assert expanded == GovernanceChange(
        consent=("e1", MemoryConsent(scope="user", visible=False, revoked_at=T0))
    )
    assert graph.calls == []


async def test_an_update_keeps_the_rest_of_the_change():
    update = ConsentUpdate("e1", walk("e1"), source="system")
    vector = np.ones(3, dtype=np.float32)
    change = GovernanceChange(
        consent_update=update, text=("e2", "new", vector), text_model="m", hold=("e3",)
    )
    expanded, _ = await expand_walk(change, Graph({}), Records(record("e1")), NOW)
    assert expanded.text is not None
    assert expanded.text[:2] == ("e2", "new")
    assert expanded.text_model == "m"
    assert expanded.hold == ("e3",)
    assert expanded.consent_update is None
    assert expanded.consent == ("e1", MemoryConsent(source="system"))
