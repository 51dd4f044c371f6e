"""Every statement the PostgreSQL adapter runs, checked in as readable SQL under ``tests/sql/``.

A change to a statement -- in ``postgres/statements/``, a repository's Core/ORM statement, the RAG
session's, or the revisions' DDL -- fails this test until the files are rewritten, so the diff of
the ``.sql`` files shows a reviewer what the database will now be sent::

    PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py

What is rendered and how: ``tests/sql_catalogue.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.sql_catalogue import Rendered, layout, rendered_statements, uncovered_methods

ROOT = Path(__file__).resolve().parents[1] / "sql"
UPDATE = os.environ.get("PRISM_UPDATE_SQL") == "1"
HOW = "PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py"


def _path(rendered: Rendered) -> Path:
    return ROOT / rendered.group / f"{rendered.name}.sql"


def _file_text(rendered: Rendered) -> str:
    return (
        f"-- name: {rendered.group}/{rendered.name}\n"
        f"-- source: {rendered.source}\n"
        f"-- rendered by tests/unit/test_rendered_sql.py ({HOW} rewrites it); line breaks and\n"
        "-- indentation are added for reading, the statement is otherwise verbatim\n"
        f"{layout(rendered.sql)}"
    )


def test_rendered_sql_matches_the_checked_in_files():
    wanted = {_path(r): _file_text(r) for r in rendered_statements()}
    present = set(ROOT.glob("*/*.sql"))
    if UPDATE:
        for path in present - set(wanted):
            path.unlink()
        for path, content in wanted.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists() or path.read_text(encoding="utf-8") != content:
                path.write_text(content, encoding="utf-8")
        return
    changed = sorted(
        str(path.relative_to(ROOT))
        for path, content in wanted.items()
        if path in present and path.read_text(encoding="utf-8") != content
    )
    missing = sorted(str(p.relative_to(ROOT)) for p in set(wanted) - present)
    stale = sorted(str(p.relative_to(ROOT)) for p in present - set(wanted))
    problems = changed + missing + stale
    assert not problems, (
        "the SQL the adapter runs no longer matches tests/sql/: "
        f"changed {changed}, new {missing}, gone {stale}. If the change is intended, run "
        f"`{HOW}` and commit the rewritten files (review their diff)."
    )


def test_every_repository_method_is_rendered_or_runs_named_statements_only():
    """A new repository (or RAG session) method is either called by the catalogue, so its Core or
    ORM statement is rendered, or listed among those that run only ``statements/`` text."""
    assert uncovered_methods() == []


def test_layout_only_adds_whitespace():
    for rendered in rendered_statements():
        assert layout(rendered.sql).split() == rendered.sql.split(), rendered.name


def test_recall_search_comes_in_every_variant_of_its_builder():
    """All 2**6 combinations of ``RecallSql.search``'s flags are rendered, each different."""
    searches = [
        r for r in rendered_statements() if r.group == "recall" and r.source.count("search(")
    ]
    assert len(searches) == 64
    assert len({r.sql for r in searches}) == 64
