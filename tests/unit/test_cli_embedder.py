"""``--embedder module:factory``: how the worker, doctor and rebuild name an embedder."""

from __future__ import annotations

import pytest

from prism_memory import HashEmbedder
from prism_memory.cli import load_embedder
from prism_memory.errors import ConfigurationError


def test_no_spec_is_a_hash_embedder_as_wide_as_the_table() -> None:
    assert isinstance(load_embedder(None, 384), HashEmbedder)
    assert load_embedder(None, 384).dimensions == 384
    assert load_embedder(None, None).dimensions == 64


def test_a_class_or_factory_gets_the_tables_width_when_it_takes_dimensions() -> None:
    assert load_embedder("prism_memory:HashEmbedder", 16).dimensions == 16
    assert load_embedder("prism_memory:HashEmbedder", None).dimensions == 64


def test_an_instance_is_used_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    import prism_memory

    instance = HashEmbedder(dimensions=8)
    monkeypatch.setattr(prism_memory, "ready_made", instance, raising=False)
    assert load_embedder("prism_memory:ready_made", 384) is instance


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("prism_memory.HashEmbedder", "must look like module:factory"),
        ("no_such_module_here:make", "cannot import 'no_such_module_here'"),
        ("prism_memory:NoSuchThing", "has no attribute 'NoSuchThing'"),
        ("json:dumps", "failed to build"),
        ("prism_memory:__version__", "did not give an Embedder"),
    ],
)
def test_a_bad_spec_is_a_configuration_error(spec: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_embedder(spec, 16)
