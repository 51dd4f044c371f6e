"""Conformance check of the switch under steady writes (issue 46 item 12): ``switch_generation``'s
``max_lag_seconds`` lets entries written within the lag a backfill follower is allowed stay
without the new model's vector, counts every older one, and recall never ranks an entry without
a vector of the active model."""

from __future__ import annotations

from datetime import timedelta

from ..errors import GenerationNotReadyError, ValidationError
from ._generations import _ids, _Migration
from ._support import ConformanceKit, _check, _raises

__all__ = ["GENERATION_LAG_CHECKS"]


async def generation_switch_tolerates_writes_within_the_lag(kit: ConformanceKit) -> None:
    """With ``max_lag_seconds``, only entries written at or before ``now - max_lag_seconds``
    must hold a current vector of the model: an older one without one refuses the switch
    (``missing``; the newer ones are ``recent``), the newer ones alone do not; after the switch
    they are left out of the model's search (pending) until the backfill reaches them. 0 keeps
    the strict rule, and a lag that is no number of seconds from 0 to 3600 is refused."""
    run = _Migration(kit)
    try:
        await run.remember()
        await run.start()  # every entry so far has a vector of the model
        old = set(await run.remember(["Ada paints the barn door red"]))  # none of the model
        run.case.clock.advance(seconds=60)
        recent = set(await run.remember(["Ada counts the bees at noon", "Ada mends a fence"]))
        now = run.now()
        error = await _raises(
            GenerationNotReadyError,
            run.store.switch_generation(run.model, force=False, now=now, max_lag_seconds=30),
            "an entry older than the lag has no vector of the model",
        )
        counted = (getattr(error, "missing", None), getattr(error, "recent", None))
        _check(counted == (1, 2), f"the refusal counts the old entry, not the recent: {counted}")
        strict = await _raises(
            GenerationNotReadyError,
            run.store.switch_generation(run.model, force=False, now=now),
            "the strict switch (no lag) counts every entry",
        )
        _check(getattr(strict, "missing", None) == 3, "0: every entry counts")
        registered = {g.model: g.active for g in await run.store.generations()}
        _check(registered == {run.primary: True, run.model: False}, "a refusal changed nothing")
        for bad in (-1, float("nan"), float("inf"), 3601, True, "30"):
            await _raises(
                ValidationError,
                run.store.switch_generation(
                    run.model,
                    force=False,
                    now=now,
                    max_lag_seconds=bad,  # type: ignore[arg-type]
                ),
                "a lag that is no number of seconds from 0 to 3600",
            )

        await run.backfill()  # the follower catches up...
        run.case.clock.advance(seconds=60)
        later = set(await run.remember(["Ada rows to the island", "Ada feeds the goats"]))
        switched = await run.store.switch_generation(  # ...while writers keep writing
            run.model, force=False, now=run.now() + timedelta(seconds=1), max_lag_seconds=30
        )
        _check(switched.active and switched.model == run.model, "the switch is made")
        result = await run.search("Ada goats island bees barn fence", model=run.model)
        _check(result.active_model == run.model, "search answers from the new model")
        _check(not (_ids(result) & later), "entries without its vector are never ranked")
        _check((result.pending or 0) >= len(later), f"they count as pending: {result.pending}")
        _check((old | recent) <= _ids(result), "the entries the backfill reached are ranked")
        await run.backfill()
        caught_up = await run.search("Ada rows to the island", model=run.model)
        _check(later <= _ids(caught_up), "the backfill brings them in")
    finally:
        await run.finish()


GENERATION_LAG_CHECKS = {
    "generation_switch_tolerates_writes_within_the_lag": (
        generation_switch_tolerates_writes_within_the_lag
    ),
}
"""The check of the ``generations`` role's switch under steady writes, by name."""
