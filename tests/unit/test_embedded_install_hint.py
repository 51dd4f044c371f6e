"""The embedded PostgreSQL's install hint names a command that works: prism-memory is not on PyPI."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from prism_memory.errors import ConfigurationError
from prism_memory.postgres.embedded import start_embedded_postgres

REPO = Path(__file__).resolve().parents[2]
FROM_PYPI = re.compile(r"pip install '?prism-memory\[postgres-embedded\]")


def test_a_missing_embedded_postgres_says_how_to_install_from_a_checkout_or_a_wheel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "embedded_postgres.postgres_server", None)  # ImportError
    with pytest.raises(ConfigurationError) as missing:
        start_embedded_postgres()
    message = str(missing.value)
    assert "pip install -e '.[postgres-embedded]'" in message
    assert "dist/prism_memory-<version>-py3-none-any.whl[postgres-embedded]" in message
    assert not FROM_PYPI.search(message)


def test_no_doc_installs_the_embedded_extra_from_pypi() -> None:
    docs = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    found = [path.name for path in docs if FROM_PYPI.search(path.read_text(encoding="utf-8"))]
    assert not found, f"these say pip install 'prism-memory[postgres-embedded]': {found}"
