"""How ``read_jsonl`` reads a line: the ``vector`` cut out unparsed when that is unambiguous, the
whole line parsed otherwise -- the same entry either way -- and how far it is in its file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from prism_memory.importing import read_jsonl
from prism_memory.importing._entry import RawVector
from prism_memory.importing._lines import loads_entry


def _parsed(value: Any) -> Any:
    """``value`` with a cut-out vector parsed, as ``json.loads`` of the whole line gives it."""
    if isinstance(value, dict):
        return {k: json.loads(v.text) if isinstance(v, RawVector) else v for k, v in value.items()}
    return value


CUT = [
    '{"id": "a", "text": "x", "vector": [0.5, -1, 2e-3, 1E+2]}',
    '{"vector":[1,2,3],"id":"a","text":"x"}',
    '{"id": "a", "vector" :\t[ 1 , 2 ]  , "text": "say \\"vector\\": [1, 2]"}',
    '{"id": "a", "vector": [1.5.2, 3], "text": "x"}',  # no JSON number: refused when checked
    '{"id": "a", "vector": []}',
    '{"id": "a", "vector": [NaN, true, null, 1]}',  # refused when checked, as before
]
WHOLE = [
    '{"id": "a", "metadata": {"vector": [9]}, "vector": [1, 2]}',  # two: the line is parsed
    '{"id": "a", "metadata": {"vector": [9]}}',  # only a nested one
    '{"id": "a", "x\\"vector": [9]}',  # a key ending in "vector"
    '{"id": "a", "\\u0076ector": [1, 2]}',  # the key escaped
    '{"id": "a", "vector": [[1, 2]]}',
    '{"id": "a", "vector": ["1", 2]}',
    '{"id": "a", "vector": [1, 2], "vector": [3]}',
    '{"id": "a", "vector": null}',
    '[{"vector": [1, 2]}]',
]


@pytest.mark.parametrize("line", CUT)
def test_a_plain_vector_is_cut_out_unparsed(line: str):
    decoded = loads_entry(line)
    assert isinstance(decoded["vector"], RawVector)
    if "1.5.2" not in line:
        assert json.dumps(_parsed(decoded)) == json.dumps(json.loads(line))
    else:
        with pytest.raises(json.JSONDecodeError):
            json.loads(decoded["vector"].text)


@pytest.mark.parametrize("line", WHOLE)
def test_anything_else_is_parsed_whole_as_json_would(line: str):
    decoded = loads_entry(line)
    assert decoded == json.loads(line)
    assert not any(isinstance(v, RawVector) for v in getattr(decoded, "values", list)())


def test_a_line_that_is_no_json_still_fails_as_json():
    for line in ['{"id": "a", "vector": [1, 2], "text": }', '{"vector": [1, 2]']:
        with pytest.raises(json.JSONDecodeError):
            loads_entry(line)


def test_the_estimated_total_converges_on_the_files_entries(tmp_path: Path):
    path = tmp_path / "lines.jsonl"
    lines = [
        json.dumps({"id": f"e{i}", "text": "x" * (i % 7), "vector": [0.5] * 8}) for i in range(500)
    ]
    path.write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    entries = read_jsonl(path)
    assert entries.estimated_total() is None  # nothing read yet
    for _ in range(100):
        next(entries)
    estimate = entries.estimated_total()
    assert estimate is not None
    assert 400 <= estimate <= 600
    assert sum(1 for _ in entries) == 400
    assert entries.estimated_total() == 500  # read to its end: exact
    with path.open(encoding="utf-8") as handle:  # a handle of a file: its size is known too
        handle_entries = read_jsonl(handle)
        next(handle_entries)
        assert handle_entries.estimated_total() is not None
