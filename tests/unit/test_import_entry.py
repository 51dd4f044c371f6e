"""``ImportEntry``: an entry of a bulk import names its scope and may bring its vector and model."""

from __future__ import annotations

import pytest

from prism_memory.errors import ValidationError
from prism_memory.importing import ImportEntry

SCOPE = {"tenant_id": "acme", "resource_id": "ada", "thread_id": "t1"}


def test_an_entry_keeps_its_scope_vector_and_model():
    entry = ImportEntry(**SCOPE, text="hello", vector=[0.5, 1], embedding_model="m" * 256)
    assert (entry.tenant_id, entry.resource_id, entry.thread_id) == ("acme", "ada", "t1")
    assert (entry.vector, entry.embedding_model, entry.text) == ([0.5, 1], "m" * 256, "hello")
    bare = ImportEntry(**SCOPE, text="hello")
    assert (bare.vector, bare.embedding_model) == (None, None)


@pytest.mark.parametrize("key", ["tenant_id", "resource_id", "thread_id"])
@pytest.mark.parametrize("bad", ["", "   "])
def test_a_blank_scope_key_is_refused(key: str, bad: str):
    with pytest.raises(ValidationError, match=r"^scope key must be a non-empty string$"):
        ImportEntry(**{**SCOPE, key: bad}, text="hello")


@pytest.mark.parametrize("bad", ["", "  ", "m" * 257])
def test_a_blank_or_overlong_model_name_is_refused_without_repeating_it(bad: str):
    with pytest.raises(ValidationError) as caught:
        ImportEntry(**SCOPE, text="hello", embedding_model=bad)
    assert "m" * 257 not in str(caught.value)
