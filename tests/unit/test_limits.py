"""Limits: hard ceilings, lower bounds, integer-only values and per-call resolution."""

from __future__ import annotations

import pytest

from prism_memory import Limits, PrismMemoryError
from prism_memory.errors import CapExceededError, ValidationError

# Ceilings and call defaults written out by hand from SPEC §3/§4, not read from the module.
HAND_CEILINGS = {
    "top_k": 32,
    "message_range": 4,
    "embed_batch": 128,
    "injected_tokens": 8000,
    "export_entries": 200,
    "export_bytes": 32 * 1024 * 1024,
    "export_seconds": 60,
    "rebuild_batch": 128,
    "rebuild_seconds": 60,
    "lineage_depth": 8,
    "lineage_edges": 256,
    "lineage_source_ids": 32,
    "delete_batch": 64,
    "remember_batch": 1024,
    "payload_bytes": 1024 * 1024,
    "working_memory_bytes": 1024 * 1024,
    "retention_batch": 1024,
    "share_ids": 256,
}


@pytest.mark.parametrize(("name", "ceiling"), sorted(HAND_CEILINGS.items()))
def test_a_limit_may_be_raised_up_to_its_ceiling(name, ceiling):
    assert getattr(Limits(**{name: ceiling}), name) == ceiling


@pytest.mark.parametrize(("name", "ceiling"), sorted(HAND_CEILINGS.items()))
def test_a_limit_over_its_ceiling_is_refused(name, ceiling):
    with pytest.raises(CapExceededError):
        Limits(**{name: ceiling + 1})


@pytest.mark.parametrize("value", [0, -1, -1000])
def test_a_limit_below_one_is_a_validation_error_not_a_cap_error(value):
    with pytest.raises(ValidationError) as info:
        Limits(top_k=value)
    assert not isinstance(info.value, CapExceededError)


@pytest.mark.parametrize("value", [True, False, 4.0, 2.5, "8", None, [8]])
def test_a_limit_must_be_a_real_integer(value):
    with pytest.raises(ValidationError) as info:
        Limits(message_range=value)
    assert not isinstance(info.value, CapExceededError)


def test_a_lowered_limit_is_kept():
    limits = Limits(top_k=5, embed_batch=3)
    assert (limits.top_k, limits.embed_batch) == (5, 3)


def test_limits_are_frozen():
    limits = Limits()
    with pytest.raises(Exception):  # noqa: B017,PT011 - pydantic's frozen error type
        limits.top_k = 3  # type: ignore[misc]
    assert limits.top_k == 32


def test_an_unknown_limit_name_raises_a_prism_error():
    # SPEC §2: PrismMemoryError is the root of every error the library raises; Limits is public.
    with pytest.raises(PrismMemoryError):
        Limits(top_kk=3)  # type: ignore[call-arg]


# ---- resolve ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "default"),
    [
        ("top_k", 8),
        ("injected_tokens", 2000),
        ("export_entries", 100),
        ("export_bytes", 4 * 1024 * 1024),
        ("export_seconds", 10),
        ("rebuild_batch", 32),
        ("rebuild_seconds", 10),
    ],
)
def test_resolve_without_a_value_uses_the_call_default(name, default):
    assert Limits().resolve(name, None) == default


def test_resolve_default_never_exceeds_a_lowered_cap():
    assert Limits(top_k=3).resolve("top_k", None) == 3
    assert Limits(injected_tokens=500).resolve("injected_tokens", None) == 500


def test_resolve_default_below_a_lowered_cap_is_still_the_default():
    assert Limits(top_k=20).resolve("top_k", None) == 8


def test_resolve_without_a_call_default_uses_the_cap():
    assert Limits(message_range=3).resolve("message_range", None) == 3


def test_resolve_accepts_values_up_to_the_cap():
    limits = Limits(top_k=10)
    assert limits.resolve("top_k", 1) == 1
    assert limits.resolve("top_k", 10) == 10


def test_resolve_over_the_configured_cap_raises():
    with pytest.raises(CapExceededError):
        Limits(top_k=10).resolve("top_k", 11)
    with pytest.raises(CapExceededError):
        Limits().resolve("top_k", 33)


def test_resolve_below_the_minimum_raises_validation_error():
    with pytest.raises(ValidationError) as info:
        Limits().resolve("top_k", 0)
    assert not isinstance(info.value, CapExceededError)


def test_resolve_minimum_is_configurable():
    assert Limits().resolve("message_range", 0, minimum=0) == 0
    with pytest.raises(ValidationError):
        Limits().resolve("message_range", -1, minimum=0)
    with pytest.raises(ValidationError):
        Limits().resolve("top_k", 2, minimum=3)


@pytest.mark.parametrize("value", [True, 2.0, "2"])
def test_resolve_rejects_non_integers(value):
    with pytest.raises(ValidationError):
        Limits().resolve("top_k", value)  # type: ignore[arg-type]


# ---- refusals never repeat the caller's value ----------------------------------------------


@pytest.mark.parametrize(
    ("refuse", "value"),
    [
        (lambda: Limits(top_k=9_731), "9731"),
        (lambda: Limits(top_k=-9_731), "9731"),
        (lambda: Limits().resolve("top_k", 9_731), "9731"),
        (lambda: Limits().resolve("top_k", -9_731), "9731"),
        (lambda: Limits(export_entries=9_731), "9731"),
    ],
)
def test_a_cap_refusal_names_the_cap_not_the_value(refuse, value):
    """Issue 46 (6): ``top_k=33 is over its cap 32`` repeated the caller's value."""
    with pytest.raises(ValidationError) as info:
        refuse()
    assert value not in str(info.value)


async def test_the_other_caps_name_the_cap_not_the_value():
    from prism_memory import HashEmbedder
    from prism_memory.embedding import embed_batched
    from prism_memory.rag.chunking import chunk_text
    from prism_memory.stores.rag_base import check_sources_page, check_top_k

    for refuse in (
        lambda: check_top_k(9_731),
        lambda: check_sources_page(None, 9_731),
        lambda: chunk_text("x", size=9_731_000),
    ):
        with pytest.raises(CapExceededError) as info:
            refuse()
        assert "9731" not in str(info.value)
    with pytest.raises(CapExceededError) as info:
        await embed_batched(HashEmbedder(), ["x"], batch_size=9_731)
    assert "9731" not in str(info.value)
