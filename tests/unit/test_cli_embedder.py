"""``--embedder module:factory``: how the worker, doctor and rebuild name an embedder."""

from __future__ import annotations

import pytest

from prism_memory import HashEmbedder
from prism_memory.cli import load_embedder
from prism_memory.errors import ConfigurationError


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
        (
            "no_such_module_here:make",
            r"no module named 'no_such_module_here'; it must be importable where prism-memory "
            r"runs \(installed in this environment, or its folder on PYTHONPATH\)",
        ),
        ("prism_memory:NoSuchThing", "has no attribute 'NoSuchThing'"),
        ("json:dumps", "failed to build"),
        ("prism_memory:__version__", "did not give an Embedder"),
    ],
)
def test_a_bad_spec_is_a_configuration_error(spec: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_embedder(spec, 16)


def test_a_module_whose_own_import_fails_says_so(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken_embedders.py").write_text("import no_such_dependency_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigurationError) as caught:
        load_embedder("broken_embedders:make", 16)
    assert str(caught.value) == (
        "--embedder: importing 'broken_embedders' failed: No module named 'no_such_dependency_here'"
    )


class _Anonymous:
    dimensions = 8

    async def embed(self, texts):
        return [[1.0] * 8 for _ in texts]


def test_an_embedder_without_a_model_identity_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import prism_memory

    monkeypatch.setattr(prism_memory, "anonymous", _Anonymous(), raising=False)
    with pytest.raises(ConfigurationError, match="has no `model` identity"):
        load_embedder("prism_memory:anonymous", 8)


def test_the_hash_embedder_names_its_version_and_width() -> None:
    assert HashEmbedder(dimensions=64).model == "hash-v1-64"
    assert load_embedder("prism_memory:HashEmbedder", 384).model == "hash-v1-384"


def test_a_version_location_that_does_not_resolve_fails_loudly(tmp_path) -> None:
    from alembic.config import Config

    from prism_memory.postgres.migrate import check_version_locations, exclude_prism_memory

    ini = tmp_path / "alembic.ini"
    ini.write_text(
        "[alembic]\nscript_location = %(here)s\npath_separator = space\n"
        "version_locations = %(here)s prism_memory.migrations:versions\n"
    )
    check_version_locations(Config(str(ini)))  # the shipped one resolves
    include = exclude_prism_memory(Config(str(ini)))
    assert include("semantic_memory", "table", {"schema_name": "prism_memory"}) is False
    assert include("semantic_memory", "table", {"schema_name": "public"}) is True
    assert include("app_note", "table", {"schema_name": None}) is True
    ini.write_text(ini.read_text().replace("migrations:versions", "migrations:version"))
    with pytest.raises(ConfigurationError, match="has no folder 'version'"):
        exclude_prism_memory(Config(str(ini)))
