"""The C stemmer (PyStemmer) and the pure Python one (snowballstemmer) give identical stems.

The tokenizer runs PyStemmer when it is installed and falls back to snowballstemmer when it is
not; stems are stored (PostgreSQL's ``text_tsv``), so two processes with different stemmers must
agree on every word. Both are generated from the Snowball English algorithm; this compares them
word by word over a large vocabulary: every ``\\w+`` word of the repository's own text, each with
the English suffixes the algorithm handles, random letter strings, words ending in digits, other
scripts -- and, by hypothesis, arbitrary text through the whole tokenizer. A stemmer of another
algorithm or another Snowball release differs on this vocabulary (shown with ``porter``).
"""

from __future__ import annotations

import random
import re
import string
import unicodedata
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from snowballstemmer.english_stemmer import EnglishStemmer
from snowballstemmer.porter_stemmer import PorterStemmer

from prism_memory import lexical
from prism_memory.lexical import MAX_TERM_CHARS, STOP_WORDS, tokenize

Stemmer = pytest.importorskip("Stemmer")

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = (
    "", "s", "es", "ed", "ing", "ly", "er", "est", "ness", "ment", "ful", "less", "ation",
    "ational", "ization", "iveness", "fulness", "ousness", "aliti", "iviti", "biliti", "eed",
    "eedly", "ingly", "edly", "ies", "ied", "sses", "ss", "us", "y", "ance", "ence", "able",
    "ible", "ant", "ent", "ism", "ate", "iti", "ous", "ive", "ize", "ise", "al", "ic", "li",
)  # fmt: skip


@cache
def vocabulary() -> tuple[str, ...]:
    """Every word of the repository's Python and Markdown files, with suffixes, plus made-up ones."""
    words: set[str] = set()
    for pattern in ("**/*.py", "**/*.md"):
        for path in ROOT.glob(pattern):
            if ".venv" in path.parts or "site-packages" in path.parts:
                continue
            text = unicodedata.normalize("NFKC", path.read_text(errors="ignore")).casefold()
            words.update(w for w in re.findall(r"\w+", text) if len(w) <= MAX_TERM_CHARS)
    base = sorted(w for w in words if w.isalpha())[:2500]
    words.update(stem + suffix for stem in base for suffix in SUFFIXES)
    rng = random.Random(46)
    letters = string.ascii_lowercase * 4 + "éèêëüöäßçñœæåøı" + string.digits + "_"
    words.update(
        "".join(rng.choice(letters) for _ in range(rng.randint(1, 16))) for _ in range(30_000)
    )
    words.update(["", "y", "yy", "ys", "ied", "gener", "commun", "arsen", "past", "universal"])
    words.update(["наречие", "говорили", "東京", "مكتبة", "ελληνικά", "x" * MAX_TERM_CHARS])
    return tuple(sorted(words))


def test_the_vocabulary_is_large():
    assert len(vocabulary()) > 100_000


def test_pystemmer_and_snowballstemmer_give_identical_stems():
    words = list(vocabulary())
    c_stems = Stemmer.Stemmer("english", 0).stemWords(words)
    python = EnglishStemmer()
    differ = [(w, c, python.stemWord(w)) for w, c in zip(words, c_stems, strict=True)]
    differ = [d for d in differ if d[1] != d[2]]
    assert differ == [], f"{len(differ)} words stem differently, e.g. {differ[:5]}"


def test_another_algorithm_differs_on_this_vocabulary():
    """The comparison above can fail: the Porter (1980) algorithm, a close cousin, differs."""
    words = list(vocabulary())[::10]
    english, porter = Stemmer.Stemmer("english", 0), PorterStemmer()
    stems = english.stemWords(words)
    assert sum(porter.stemWord(w) != s for w, s in zip(words, stems, strict=True)) > 500


def test_the_tokenizer_runs_the_c_stemmer_when_installed():
    assert lexical.STEMMER == "PyStemmer"
    assert lexical._stems is lexical._c_stems


def _python_tokenize(text: str) -> list[str]:
    """The tokenizer as it is without PyStemmer (the pure Python fallback)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    words = [w for w in re.findall(r"\w+", folded) if len(w) <= MAX_TERM_CHARS]
    return lexical._python_stems([w for w in words if w not in STOP_WORDS])


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=400))
def test_any_text_tokenizes_identically_with_either_stemmer(text: str):
    assert tokenize(text) == _python_tokenize(text)
