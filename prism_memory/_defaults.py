"""Names with one default everywhere: the schema and the entries table a PostgreSQL store uses
unless told otherwise. A leaf module (no imports), so the CLI can name them without loading the
database stack."""

from __future__ import annotations

DEFAULT_SCHEMA = "prism_memory"
"""The schema prism_memory's tables live in unless ``schema=`` / ``--schema`` says otherwise."""

DEFAULT_TABLE = "semantic_memory"
"""The entries table's name unless ``table=`` / ``--table`` says otherwise; the other tables are
named after it."""
