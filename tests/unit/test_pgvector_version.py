"""``doctor``'s pgvector check: the version comparison (issue 46 item 16b)."""

from __future__ import annotations

import pytest

from prism_memory.postgres.ops import HNSW_SAFE_PGVECTOR, pgvector_warning


@pytest.mark.parametrize("version", ["0.8.4", "0.8.6", "0.9.0", "0.10.0", "1.0", "0.8.4-dev"])
def test_from_0_8_4_on_nothing_is_warned(version: str) -> None:
    assert pgvector_warning(version) is None


@pytest.mark.parametrize("version", ["0.8.3", "0.8.2", "0.8", "0.7.4", "0.5.1", "", "dev"])
def test_before_0_8_4_the_warning_names_the_version_and_the_fix(version: str) -> None:
    warning = pgvector_warning(version)
    assert warning is not None
    assert warning.startswith(f"pgvector {version} is older than 0.8.4: ")
    assert "#988" in warning
    assert "#993" in warning
    assert "ALTER EXTENSION vector UPDATE" in warning
    assert "REINDEX" in warning


def test_the_threshold_is_the_fixed_release() -> None:
    assert HNSW_SAFE_PGVECTOR == (0, 8, 4)
    # numeric, not textual: "0.10.0" > "0.8.4", and "0.8.10" > "0.8.4"
    assert pgvector_warning("0.8.10") is None
