"""prism_memory's Alembic revisions, as a package a host's Alembic can name.

This folder (``env.py``, ``alembic.ini``, ``versions/``) is the package ``prism_memory.migrations``
in every install: a built wheel ships it there, and in a source checkout or an editable install
``prism_memory/migrations`` is a link to the repository's top-level ``migrations/``. A host adds
the revisions to its own history with one ``version_locations`` entry that names no filesystem
path, and sets (``alembic init`` already wrote it) the separator that entry needs::

    version_locations = %(here)s/alembic/versions prism_memory.migrations:versions
    path_separator = space

and runs ``alembic upgrade heads``. See docs/alembic.md.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["BRANCH_LABEL", "VERSION_LOCATION"]

VERSION_LOCATION = "prism_memory.migrations:versions"
"""The ``version_locations`` entry for a host's ``alembic.ini`` (an importlib resource)."""

BRANCH_LABEL = "prism_memory"
"""The branch label of every prism_memory revision (``alembic upgrade prism_memory@head``)."""

if not (Path(__file__).resolve().parent / "versions" / "prism_memory_0001_initial.py").is_file():
    # Alembic skips a version location that does not exist without a word: fail here instead
    raise ImportError(
        f"prism_memory.migrations ({Path(__file__).parent}) holds no revisions: this install of "
        "prism_memory is broken (reinstall it; in a checkout, prism_memory/migrations must link "
        "to the top-level migrations/)"
    )
