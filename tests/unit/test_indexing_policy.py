"""The indexing queue's policy (``prism_memory.indexing.policy``): its documented defaults, the
values it refuses and the retry backoff, with every expected value written out by hand."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from prism_memory.errors import PrismMemoryError
from prism_memory.indexing import CLAIM_BATCHES, SHARED_LANES, IndexingPolicy

SECONDS_FIELDS = [
    "lease_seconds",
    "retry_base_seconds",
    "retry_max_seconds",
    "busy_poll_seconds",
    "idle_poll_seconds",
    "drain_seconds",
]


def test_a_worker_claims_four_batches_and_a_shared_queue_runs_four_lanes():
    # docs/semantics.md: "leases up to four embedder batches", "up to four claims ... at once"
    assert CLAIM_BATCHES == 4
    assert SHARED_LANES == 4


def test_the_defaults_are_the_documented_ones():
    policy = IndexingPolicy()
    assert policy.lease_seconds == 60.0
    assert policy.max_attempts == 5
    assert policy.retry_base_seconds == 0.5
    assert policy.retry_max_seconds == 60.0
    assert policy.busy_poll_seconds == 0.05
    assert policy.idle_poll_seconds == 5.0
    assert policy.drain_seconds == 30.0
    assert policy.in_process is True


def test_a_policy_is_frozen_and_has_no_instance_dict():
    policy = IndexingPolicy()
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.lease_seconds = 1.0  # type: ignore[misc]
    assert not hasattr(policy, "__dict__")


def test_small_positive_values_are_accepted():
    policy = IndexingPolicy(
        lease_seconds=0.001,
        max_attempts=1,
        retry_base_seconds=0.001,
        retry_max_seconds=0.001,
        busy_poll_seconds=0.001,
        idle_poll_seconds=0.001,
        drain_seconds=0.001,
        in_process=False,
    )
    assert policy.max_attempts == 1
    assert policy.in_process is False


@pytest.mark.parametrize("name", SECONDS_FIELDS)
@pytest.mark.parametrize("value", [0.0, -1.0, float("nan")])
def test_a_duration_that_is_not_positive_is_refused(name, value):
    with pytest.raises(PrismMemoryError, match=r"^IndexingPolicy values must be positive$"):
        IndexingPolicy(**{name: value})


@pytest.mark.parametrize("attempts", [0, -1])
def test_fewer_than_one_attempt_is_refused(attempts):
    with pytest.raises(PrismMemoryError, match=r"^IndexingPolicy values must be positive$"):
        IndexingPolicy(max_attempts=attempts)


@pytest.mark.parametrize("value", [1, 0, "yes", None])
def test_in_process_must_be_a_boolean(value):
    with pytest.raises(
        PrismMemoryError, match=r"^IndexingPolicy\.in_process must be True or False$"
    ):
        IndexingPolicy(in_process=value)


@pytest.mark.parametrize(
    ("attempts", "seconds"),
    [(-3, 0.5), (0, 0.5), (1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (8, 64.0), (9, 100.0)],
)
def test_the_retry_delay_doubles_from_the_base_up_to_the_cap(attempts, seconds):
    policy = IndexingPolicy(retry_base_seconds=0.5, retry_max_seconds=100.0)
    assert policy.retry_delay(attempts) == timedelta(seconds=seconds)


def test_the_default_retry_delay_is_capped_at_a_minute():
    policy = IndexingPolicy()
    assert policy.retry_delay(1) == timedelta(seconds=0.5)
    assert policy.retry_delay(3) == timedelta(seconds=2)
    assert policy.retry_delay(8) == timedelta(seconds=60)
    assert policy.retry_delay(50) == timedelta(seconds=60)
