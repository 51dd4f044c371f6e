"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}

Object names come from the host's settings, never from literals:
``s = revision_settings()`` gives ``s.schema``, ``s.dimension`` and ``s.names`` (every table and
index name). Build indexes on existing tables ``CONCURRENTLY`` inside
``op.get_context().autocommit_block()``.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
${imports if imports else ""}
from prism_memory.postgres.migrate import revision_settings

revision: str = ${repr(up_revision)}
down_revision: str | Sequence[str] | None = ${repr(down_revision)}
branch_labels: str | Sequence[str] | None = ${repr(branch_labels)}
depends_on: str | Sequence[str] | None = ${repr(depends_on)}


def upgrade() -> None:
    s = revision_settings()
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    s = revision_settings()
    ${downgrades if downgrades else "pass"}
