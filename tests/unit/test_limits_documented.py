"""Every cap's default, call default and ceiling is what the docs promise.

The expected values are read from the "Caps (`Limits`)" table of ``docs/semantics.md`` — never from
``prism_memory.limits`` — so changing a default or a ceiling in code without the docs (or the other
way round) fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prism_memory import HashEmbedder, Limits, create_memory
from prism_memory.errors import CapExceededError, ValidationError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "semantics.md"
_UNITS = {"": 1, "KiB": 1024, "MiB": 1024 * 1024}


def _amounts(cell: str) -> list[int]:
    values = []
    for part in cell.split("/"):
        match = re.fullmatch(r"\s*(\d+)\s*(KiB|MiB)?\s*", part)
        assert match, f"unreadable amount {part!r} in the caps table"
        values.append(int(match.group(1)) * _UNITS[match.group(2) or ""])
    return values


def documented_caps() -> dict[str, tuple[int, int | None, int]]:
    """name → (default, call default or None, ceiling), from the docs' caps table."""
    text = DOCS.read_text()
    section = text.split("## Caps (`Limits`)", 1)[1]
    caps: dict[str, tuple[int, int | None, int]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        names = re.findall(r"`(\w+)`", cells[0].split("(")[0])  # "(…)" is a remark
        call = re.search(r"\(calls default to ([^)]*)\)", cells[1])
        defaults = _amounts(cells[1][: call.start()] if call else cells[1])
        calls = _amounts(call.group(1)) if call else [None] * len(names)
        ceilings = defaults if cells[2] == "same" else _amounts(cells[2])
        assert len(defaults) == len(calls) == len(ceilings) == len(names), line
        for name, default, call_default, ceiling in zip(
            names, defaults, calls, ceilings, strict=True
        ):
            caps[name] = (default, call_default, ceiling)
    return caps


DOCUMENTED = documented_caps()


def test_the_docs_table_was_read():
    # A guard for the parser itself: these rows are spelled out by hand from the table.
    assert DOCUMENTED["top_k"] == (32, 8, 32)
    assert DOCUMENTED["payload_bytes"] == (64 * 1024, None, 1024 * 1024)
    assert DOCUMENTED["export_bytes"] == (32 * 1024 * 1024, 4 * 1024 * 1024, 32 * 1024 * 1024)
    assert DOCUMENTED["lineage_depth"] == (8, None, 8)


def test_every_cap_is_documented_and_every_documented_cap_exists():
    assert set(DOCUMENTED) == set(Limits.model_fields)


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_the_default_is_the_documented_one(name):
    default, _, _ = DOCUMENTED[name]
    assert getattr(Limits(), name) == default


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_a_call_without_a_value_uses_the_documented_call_default(name):
    default, call_default, _ = DOCUMENTED[name]
    expected = call_default if call_default is not None else default
    assert Limits().resolve(name, None) == expected


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_the_documented_ceiling_is_accepted_and_one_more_is_refused(name):
    _, _, ceiling = DOCUMENTED[name]
    assert getattr(Limits(**{name: ceiling}), name) == ceiling
    with pytest.raises(CapExceededError):
        Limits(**{name: ceiling + 1})


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_one_is_the_lowest_value_of_every_cap(name):
    assert getattr(Limits(**{name: 1}), name) == 1
    with pytest.raises(ValidationError) as info:
        Limits(**{name: 0})
    assert not isinstance(info.value, CapExceededError)


async def test_a_memory_with_top_k_one_recalls_one_hit_and_refuses_two():
    async with create_memory(
        tenant_id="t", resource_id="r", thread_id="th", embedder=HashEmbedder(16),
        limits=Limits(top_k=1),
    ) as mem:  # fmt: skip
        await mem.remember([{"text": "red apples"}, {"text": "red cherries"}], wait=True)
        result = await mem.recall("red")
        assert len(result.hits) == 1
        assert len((await mem.recall("red", top_k=1)).hits) == 1
        with pytest.raises(CapExceededError):
            await mem.recall("red", top_k=2)


def test_an_unknown_name_does_not_hide_a_value_over_its_ceiling():
    with pytest.raises(CapExceededError):
        Limits(**{"top_kk": 1, "top_k": 33})  # noqa: PIE804 - an unknown name, on purpose
    with pytest.raises(CapExceededError):
        create_memory(
            tenant_id="t",
            resource_id="r",
            embedder=HashEmbedder(16),
            limits={"typo": 1, "payload_bytes": 2 * 1024 * 1024},
        )
