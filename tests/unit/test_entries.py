"""``prepare_entry``: one entry redacted, capped and given its id, exactly as every write path does.

Expected ids are sha256 digests computed here with hashlib, and sizes are counted by hand.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest

from prism_memory.entries import entry_digest, prepare_entry
from prism_memory.errors import CapExceededError, ValidationError
from prism_memory.limits import Limits
from prism_memory.models import Lineage, MemoryConsent, MemoryEntry
from prism_memory.redaction import Scrubber

NOW = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
PLAIN = Scrubber()
LIMITS = Limits()


def prepared(entry: MemoryEntry, *, scrubber: Scrubber = PLAIN, limits: Limits = LIMITS, **kw):
    return prepare_entry(entry, NOW, scrubber=scrubber, limits=limits, **kw)


def digest(role: str, text: str) -> str:
    return "m_" + hashlib.sha256(f"{role}\x1f{text}".encode()).hexdigest()[:32]


def test_the_digest_id_is_sha256_of_role_and_text():
    assert entry_digest("user", "hello") == digest("user", "hello")
    assert len(entry_digest("user", "hello")) == 34
    assert entry_digest("user", "hello") != entry_digest("assistant", "hello")


def test_an_entry_without_id_gets_the_digest_of_its_redacted_role_and_text():
    scrubber = Scrubber(secrets=["sk-9"])
    new = prepared(MemoryEntry(text="key sk-9 here", role="user"), scrubber=scrubber)
    assert new.text == "key [REDACTED] here"
    assert new.id == digest("user", "key [REDACTED] here")


def test_a_given_id_is_kept():
    assert prepared(MemoryEntry(id="mine", text="x")).id == "mine"


def test_the_fields_are_carried_over_and_defaults_filled():
    consent = MemoryConsent(visible=False)
    when = NOW - timedelta(days=2)
    entry = MemoryEntry(
        id="e", text="t", role="assistant", metadata={"k": 1}, consent=consent, sequence=7,
        occurred_at=when, importance=0.25,
    )  # fmt: skip
    new = prepared(entry)
    assert (new.id, new.text, new.role, dict(new.metadata)) == ("e", "t", "assistant", {"k": 1})
    assert (new.consent, new.sequence, new.occurred_at, new.importance) == (consent, 7, when, 0.25)
    assert new.lineage is None
    bare = prepared(MemoryEntry(text="t"))
    assert (bare.occurred_at, bare.importance, bare.sequence, bare.consent) == (
        NOW,
        1.0,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("given", "kept"), [(-0.5, 0.0), (0.0, 0.0), (0.4, 0.4), (1.0, 1.0), (3.0, 1.0)]
)
def test_importance_is_clamped_into_the_unit_interval(given: float, kept: float):
    assert prepared(MemoryEntry(text="t", importance=given)).importance == kept


def test_the_payload_cap_counts_text_and_metadata_bytes_inclusively():
    # "é" is 2 bytes; no metadata counts as the 2 bytes of "{}"
    limits = Limits(payload_bytes=1024)
    assert prepared(MemoryEntry(text="é" * 511), limits=limits).text == "é" * 511  # 1022 + 2
    with pytest.raises(CapExceededError):
        prepared(MemoryEntry(text="é" * 511 + "x"), limits=limits)  # 1023 + 2
    # metadata counts as its canonical JSON: {"a":"bb"} is 10 bytes
    assert prepared(MemoryEntry(text="x" * 1014, metadata={"a": "bb"}), limits=limits)
    with pytest.raises(CapExceededError):
        prepared(MemoryEntry(text="x" * 1015, metadata={"a": "bb"}), limits=limits)


def test_the_payload_is_measured_after_redaction():
    limits = Limits(payload_bytes=1024)
    scrubber = Scrubber(secrets=["S" * 100])
    text = (
        "S" * 100 + "x" * 920
    )  # 1,020 + 2 bytes as given; "[REDACTED]" is shorter than the secret
    with pytest.raises(CapExceededError):
        prepared(MemoryEntry(text=text + "x" * 10), limits=limits)
    assert prepared(MemoryEntry(text=text + "x" * 10), limits=limits, scrubber=scrubber)


def test_the_lineage_cap_is_inclusive():
    limits = Limits(lineage_source_ids=2)
    two = MemoryEntry(text="t", lineage=Lineage(source_ids=("a", "b")))
    assert prepared(two, limits=limits).lineage == Lineage(source_ids=("a", "b"))
    with pytest.raises(CapExceededError):
        prepared(MemoryEntry(text="t", lineage=Lineage(source_ids=("a", "b", "c"))), limits=limits)


def test_an_entry_naming_itself_in_its_lineage_is_refused_without_its_id():
    entry = MemoryEntry(id="self-id", text="t", lineage=Lineage(source_ids=("x", "self-id")))
    with pytest.raises(ValidationError) as caught:
        prepared(entry, label="entry 3")
    assert "self-id" not in str(caught.value)
    assert "entry 3" in str(caught.value)
    with pytest.raises(ValidationError, match=r"^the entry names itself in its lineage$"):
        prepared(entry)
    # a digest id is checked too
    own = digest("user", "t")
    with pytest.raises(ValidationError):
        prepared(MemoryEntry(text="t", lineage=Lineage(source_ids=(own,))))
    assert (
        prepared(MemoryEntry(id="other", text="t", lineage=Lineage(source_ids=("x",)))).id
        == "other"
    )


def test_a_lineage_reason_is_scrubbed_only_when_there_is_something_to_scrub():
    lineage = Lineage(source_ids=("a",), reason="from sk-9")
    scrubbed = prepared(MemoryEntry(text="t", lineage=lineage), scrubber=Scrubber(secrets=["sk-9"]))
    assert scrubbed.lineage == Lineage(source_ids=("a",), reason="from [REDACTED]")
    plain = prepared(MemoryEntry(text="t", lineage=lineage))
    assert plain.lineage is lineage  # nothing to scrub: the caller's lineage as given
    bare = Lineage(source_ids=("a",))
    assert (
        prepared(MemoryEntry(text="t", lineage=bare), scrubber=Scrubber(secrets=["z"])).lineage
        == bare
    )


def test_metadata_and_role_are_scrubbed():
    scrubber = Scrubber(secrets=["sk-9"])
    new = prepared(MemoryEntry(text="t", role="sk-9", metadata={"k": "v sk-9"}), scrubber=scrubber)
    assert (new.role, dict(new.metadata)) == ("[REDACTED]", {"k": "v [REDACTED]"})
