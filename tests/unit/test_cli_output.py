"""What the commands' progress bars and tables print (no database: a fake clock, a console
written to a buffer)."""

from __future__ import annotations

import io

from rich.console import Console
from rich.progress import Progress

from prism_memory.cli._output import RATE_AFTER_SECONDS, _RateColumn


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _rate(progress: Progress, task: int) -> str:
    return _RateColumn().render(progress.tasks[task]).plain


def test_the_rate_is_blank_at_first_then_done_over_elapsed() -> None:
    """Issue 46 item 11: the promote bar showed 636,964,542/s -- rich's speed over samples
    microseconds apart. The rate is what this run did over the time it ran, shown after 1 s."""
    clock = _Clock()
    progress = Progress(console=Console(file=io.StringIO()), get_time=clock, auto_refresh=False)
    task = progress.add_task("promote", total=9720)
    progress.start_task(task)
    for moved in (1000, 2000, 9000):  # three batches within 30 µs
        clock.now += 0.00001
        progress.update(task, completed=moved)
    assert _rate(progress, task) == ""
    clock.now = 100.0 + 2 * RATE_AFTER_SECONDS
    progress.update(task, completed=9720)
    assert _rate(progress, task) == f"{9720 / (2 * RATE_AFTER_SECONDS):,.1f}/s"


def test_a_resumed_run_rates_only_what_it_did() -> None:
    """A resumed backfill starts its bar at what earlier runs stored (``base``): not in its rate."""
    clock = _Clock()
    progress = Progress(console=Console(file=io.StringIO()), get_time=clock, auto_refresh=False)
    task = progress.add_task("backfill", total=None)
    progress.reset(task, completed=5000, total=6000, base=5000)
    clock.now += 4.0
    progress.update(task, completed=5400)
    assert _rate(progress, task) == "100.0/s"
