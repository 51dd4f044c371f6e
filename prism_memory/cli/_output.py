"""What the commands print, and how a resumable command keeps its state between runs."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

console = Console(soft_wrap=True)
"""What the commands print on stdout. ``soft_wrap``: a long line is never broken at the console's
width -- piped to a log or a script (where rich assumes 80 columns) it stays one line, and a
terminal wraps it on screen by itself. Tables still fit the width."""
T = TypeVar("T")
_errors = Console(stderr=True)


def print_table(table: Table) -> None:
    """Print ``table`` on stdout. On a terminal it fits the screen; piped (where rich assumes 80
    columns and would cut a long cell with "…") it is as wide as its widest cell, so a tenant id
    or a model name is whole in a log or a script."""
    if console.is_terminal:
        console.print(table)
        return
    natural = Measurement.get(console, console.options.update_width(1_000_000), table).maximum
    Console(file=console.file, soft_wrap=True, width=max(natural, console.width)).print(table)


def read_state(path: Path) -> dict[str, Any] | None:
    """The state a resumable command saved in ``path``, or ``None`` when there is none."""
    if not path.exists():
        return None
    state: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return state


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Save ``state`` in ``path`` atomically (a kill leaves the old file or the new one)."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(state), encoding="utf-8")
    temporary.replace(path)


def resumable(run: Coroutine[Any, Any, T], state: Path | None) -> T:
    """Run a resumable command to its end, then remove its ``state`` file; on Ctrl-C the file
    stays for the next run, which resumes from it (exit status 130). ``None``: the command keeps
    its state in the database (the next run continues from what it stored)."""
    try:
        result = asyncio.run(run)
    except KeyboardInterrupt:
        where = "" if state is None else f" ({state})"
        print(f"interrupted; run the same command again to resume{where}", file=sys.stderr)
        raise typer.Exit(130) from None
    if state is not None:
        state.unlink(missing_ok=True)
    return result


RATE_AFTER_SECONDS = 1.0
"""How long a bar runs before it shows a rate: before that, a few quick updates would give a
rate of millions a second."""


class _RateColumn(ProgressColumn):
    """Items done per second since the task started: ``(completed - base) / elapsed``, where
    ``base`` (a task field, 0 by default) is what was done before this run; blank in the first
    :data:`RATE_AFTER_SECONDS`. (Rich's own speed divides the last samples' progress by the time
    between them: updates microseconds apart gave 636,964,542/s.)"""

    def render(self, task: Task) -> Text:
        elapsed = task.elapsed
        if elapsed is None or elapsed < RATE_AFTER_SECONDS:
            return Text("")
        done = task.completed - float(task.fields.get("base", 0))
        return Text(f"{max(done, 0.0) / elapsed:,.1f}/s")


def progress_bar() -> Progress:
    """A progress bar on stderr: what, the bar, done of total, the rate, time elapsed and time
    left (once the total is known)."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _RateColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=_errors,
    )
