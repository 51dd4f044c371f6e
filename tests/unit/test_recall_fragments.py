"""Recall's search is written from named fragments (``postgres/statements/recall.py``), not
rewritten after the fact: the scope's keys are spelled where they are used -- the tenant as a plain
bound value, the resource, thread and parent as init-plan parameters (``RESOURCE``, ``THREAD``,
``PARENT``) -- and every variant of the statement holds them only in those forms."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

from prism_memory.postgres.statements import RecallSql, recall
from prism_memory.postgres.tables import build_metadata

FLAGS = ("require_consent", "occurred_after", "shared", "lexical", "resource_wide", "by_model")


@pytest.mark.parametrize("values", list(itertools.product((False, True), repeat=len(FLAGS))))
def test_every_variant_binds_the_scope_keys_only_in_their_fragments(values) -> None:
    sql = RecallSql.for_tables(build_metadata()).search(**dict(zip(FLAGS, values, strict=True)))
    for fragment, bind in ((recall.RESOURCE, ":resource"), (recall.THREAD, ":thread")):
        assert fragment in sql
        assert bind not in sql.replace(fragment, "")
    assert re.search(r"tenant_id = :tenant\b", sql)
    shared = dict(zip(FLAGS, values, strict=True))["shared"]
    assert (recall.PARENT in sql) == shared
    assert ":parent" not in sql.replace(recall.PARENT, "")


def test_the_recall_module_rewrites_no_statement() -> None:
    """No regular expression rewrites the statements (the old ``_SCOPE_KEY.sub``)."""
    tree = ast.parse(Path(recall.__file__).read_text(encoding="utf-8"))
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert "re" not in imported
    (family,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RecallSql"]
    calls = {
        node.func.attr
        for node in ast.walk(family)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert not calls & {"sub", "subn", "replace"}, "the statements are written, not rewritten"
