"""The README's shape (issue 46 item 21): what the library is, exactly two set-up commands (the
demo in memory and on the embedded server; the whole test suite, which ``.ci/run`` runs
verbatim), a quick start, what it does and a few dated headline figures with a link; the rest
lives in docs/, in the site's navigation."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.M | re.S)
    assert match, f"the README has no '## {title}' section"
    return match.group(1)


def _bash_blocks(text: str) -> list[str]:
    return [block.strip() for block in re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S)]


def test_the_readme_is_short_and_has_its_sections() -> None:
    assert len(README.splitlines()) <= 200
    titles = re.findall(r"^## (.+)$", README, re.M)
    assert titles[:5] == ["Set up", "Quick start", "What it does", "Figures", "Documentation"]


def test_set_up_is_exactly_two_commands_and_ci_runs_the_second_verbatim() -> None:
    demo, tests = _bash_blocks(_section("Set up"))  # exactly two
    assert "\n" not in demo
    assert demo.startswith("python3 -m pip install -e '.[postgres-embedded]' && ")
    assert demo.endswith("python3 -m prism_memory demo && python3 -m prism_memory demo --postgres")
    assert tests == "python3 -m pip install 'torch==2.13.0' -e '.[dev]' && python3 -m pytest"
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1] == tests, ".ci/run's last line is the README's test command"


def test_the_figures_are_few_dated_linked_and_name_recall_quality_on_two_benchmarks() -> None:
    figures = _section("Figures")
    headline = [line for line in figures.splitlines() if line.startswith("- **")]
    assert 3 <= len(headline) <= 5
    measured = headline
    dated = re.findall(r"\*(\d{4}-\d{2}-\d{2})\.\*", figures)
    assert len(dated) == len(measured)
    assert "](docs/retrieval.md)" in figures  # recall quality on two benchmarks
    assert "LoCoMo" in figures
    assert "BEAM" in figures
    assert "](docs/performance.md)" in figures
    assert "|" not in figures, "no table of mixed figures"


def test_every_page_the_readme_links_exists_and_is_in_the_site_nav() -> None:
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    for target in re.findall(r"\]\((docs/[^)#]+)", README):
        assert (REPO / target).is_file(), target
        assert f" {target.removeprefix('docs/')}" in nav, f"{target} is not in mkdocs.yml's nav"
