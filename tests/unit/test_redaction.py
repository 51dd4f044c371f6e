"""Scrubber: secrets (longest first), the host redactor, metadata keys and nested values."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from prism_memory.errors import ConfigurationError, ValidationError
from prism_memory.redaction import Scrubber

R = "[REDACTED]"


def test_secrets_are_replaced_longest_first():
    scrubber = Scrubber(secrets=["abc", "abcdef", "abcd"])
    assert scrubber.text("x abcdef y abcd z abc") == f"x {R} y {R} z {R}"


def test_a_longer_secret_leaves_no_fragment_when_listed_after_its_prefix():
    scrubber = Scrubber(secrets=["pass", "password123"])
    assert scrubber.text("my password123!") == f"my {R}!"


def test_overlapping_secrets_of_equal_length_redact_the_same_way_in_every_process():
    # Entry ids are digests of the *redacted* text, so redaction must not depend on hash seeds:
    # otherwise a retried write from another process gets a different id and duplicates.
    root = Path(__file__).resolve().parents[2]
    code = (
        "from prism_memory.redaction import Scrubber;"
        "print(Scrubber(secrets=['abc', 'bcd', 'cde']).text('abcde'))"
    )
    outputs = set()
    for seed in range(8):
        env = {**os.environ, "PYTHONHASHSEED": str(seed), "PYTHONPATH": str(root)}
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        )
        outputs.add(done.stdout.strip())
    assert len(outputs) == 1, outputs


def test_every_occurrence_is_replaced():
    assert Scrubber(secrets=["k"]).text("kkk") == R * 3


def test_empty_secrets_are_ignored():
    scrubber = Scrubber(secrets=["", "tok"])
    assert scrubber.text("a tok b") == f"a {R} b"


def test_redactor_is_applied():
    scrubber = Scrubber(redactor=lambda s: s.replace("555-1234", "<phone>"))
    assert scrubber.text("call 555-1234 now") == "call <phone> now"


def test_redactor_and_secrets_combine_and_redactor_cannot_reintroduce_a_secret():
    scrubber = Scrubber(redactor=lambda s: s + " hunter2", secrets=["hunter2"])
    assert scrubber.text("pw hunter2") == f"pw {R} {R}"


def test_redactor_sees_text_with_secrets_already_removed():
    seen = []

    def redactor(text):
        seen.append(text)
        return text

    Scrubber(redactor=redactor, secrets=["s3cret"]).text("a s3cret b")
    assert seen == [f"a {R} b"]


@pytest.mark.parametrize("result", [None, b"bytes", 3, ["x"]])
def test_redactor_returning_a_non_string_is_a_validation_error(result):
    scrubber = Scrubber(redactor=lambda s: result)
    with pytest.raises(ValidationError):
        scrubber.text("anything")
    with pytest.raises(ValidationError):
        scrubber.value({"k": "v"})


def test_metadata_keys_values_and_nested_lists_are_scrubbed():
    scrubber = Scrubber(secrets=["tok123"])
    value = {
        "tok123-key": "has tok123",
        "nested": [["tok123", 1], {"deep tok123": ("tok123", None, True, 2.5)}],
        "plain": 7,
    }
    assert scrubber.value(value) == {
        f"{R}-key": f"has {R}",
        "nested": [[R, 1], {f"deep {R}": [R, None, True, 2.5]}],
        "plain": 7,
    }


def test_value_leaves_non_strings_alone_and_does_not_mutate_input():
    scrubber = Scrubber(secrets=["x"])
    source = {"a": ["x"]}
    assert scrubber.value(None) is None
    assert scrubber.value(42) == 42
    assert scrubber.value(source) == {"a": [R]}
    assert source == {"a": ["x"]}


def test_redactor_runs_on_metadata_keys_too():
    scrubber = Scrubber(redactor=str.upper)
    assert scrubber.value({"key": ["v", {"k2": "w"}]}) == {"KEY": ["V", {"K2": "W"}]}


def test_active_reports_whether_anything_scrubs():
    assert not Scrubber().active
    assert not Scrubber(secrets=[""]).active
    assert Scrubber(secrets=["a"]).active
    assert Scrubber(redactor=str.strip).active


def test_an_inactive_scrubber_changes_nothing():
    assert Scrubber().text("a tok b") == "a tok b"


def test_a_non_callable_redactor_is_a_configuration_error():
    with pytest.raises(ConfigurationError):
        Scrubber(redactor="nope")  # type: ignore[arg-type]


def test_non_string_secrets_are_a_configuration_error():
    with pytest.raises(ConfigurationError):
        Scrubber(secrets=["ok", 5])  # type: ignore[list-item]


def test_non_string_secrets_from_a_generator_are_a_configuration_error():
    # A one-shot iterable is consumed by the first pass, so the type check must not be skipped.
    with pytest.raises(ConfigurationError):
        Scrubber(secrets=(s for s in ["ok", 5]))  # type: ignore[misc]


def test_secrets_from_a_generator_are_used():
    assert Scrubber(secrets=(s for s in ["tok"])).text("tok") == R
