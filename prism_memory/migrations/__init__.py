"""prism_memory's Alembic revisions, as a package a host's Alembic can name.

In an installed wheel this package holds ``env.py``, ``alembic.ini`` and ``versions/`` (copied from
the repository's top-level ``migrations/`` at build time). A host adds the revisions to its own
history with one ``version_locations`` entry that names no filesystem path::

    version_locations = %(here)s/alembic/versions prism_memory.migrations:versions
    path_separator = space

and runs ``alembic upgrade heads``. See docs/alembic.md.
"""

from __future__ import annotations

__all__ = ["BRANCH_LABEL", "VERSION_LOCATION"]

VERSION_LOCATION = "prism_memory.migrations:versions"
"""The ``version_locations`` entry for a host's ``alembic.ini`` (an importlib resource)."""

BRANCH_LABEL = "prism_memory"
"""The branch label of every prism_memory revision (``alembic upgrade prism_memory@head``)."""
