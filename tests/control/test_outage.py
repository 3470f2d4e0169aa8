"""The backoff and the outage rider, without a store: what is retried, how long it waits, what
it reports and what it lets through."""

import logging

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from runwright.control.outage import (
    BACKOFF_BASE_SECONDS,
    BACKOFF_CAP_SECONDS,
    OutageRider,
    backoff_seconds,
)
from runwright.errors import StoreUnavailableError


@given(st.integers(min_value=1, max_value=10_000), st.floats(min_value=0, max_value=0.999999))
def test_backoff_is_bounded_capped_and_jittered(attempt, uniform):
    ceiling = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** min(attempt - 1, 64))
    delay = backoff_seconds(attempt, uniform)
    assert ceiling / 2 <= delay < ceiling + 1e-9
    assert delay <= BACKOFF_CAP_SECONDS
    assert backoff_seconds(attempt, 0.0) <= backoff_seconds(attempt + 1, 0.0)


def test_backoff_doubles_to_the_cap():
    assert [backoff_seconds(a, 0.0) * 2 for a in range(1, 8)] == [0.5, 1, 2, 4, 8, 10, 10]


def failing(times, error=lambda: StoreUnavailableError("the store at x is unavailable: locked")):
    calls = []

    def work():
        calls.append(1)
        if len(calls) <= times:
            raise error()
        return "done"

    return work, calls


def test_a_transient_error_is_retried_with_backoff_and_reported_once_back(caplog):
    slept, reports, resets = [], [], []
    rider = OutageRider(
        lambda: resets.append(1), sleep=slept.append, uniform=lambda: 0.0, warn_every_seconds=60
    )
    work, calls = failing(4)
    with caplog.at_level(logging.WARNING, logger="runwright.control.outage"):
        assert rider.call(work, lambda outage: reports.append(outage.attempts)) == "done"
    assert len(calls) == 5 and slept == [0.25, 0.5, 1.0, 2.0] and len(resets) == 4
    assert reports == [1, 2, 3, 4]  # tried before every retry; idempotent by the outage's op
    assert rider.outage is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2  # one warning (rate-limited), one "back" line; no traceback
    assert "unavailable: locked" in lines[0] and "retrying in 0.2 s" in lines[0]
    assert "the store is back" in lines[1] and all(r.exc_info is None for r in caplog.records)


def test_a_report_that_fails_keeps_the_outage_open():
    rider = OutageRider(sleep=lambda _: None, uniform=lambda: 0.0)
    work, _ = failing(1)
    failures = iter([True, False])

    def report(outage):
        if next(failures):
            raise StoreUnavailableError("the store at x is unavailable: flapping")

    assert rider.call(work, report) == "done"
    assert rider.outage is None


@pytest.mark.parametrize(
    "error",
    [
        lambda: sa.exc.IntegrityError("INSERT", {}, Exception("UNIQUE constraint failed")),
        lambda: ValueError("a bug"),
    ],
)
def test_a_permanent_error_is_raised_at_once(error):
    rider = OutageRider(sleep=lambda _: pytest.fail("must not wait"))
    work, calls = failing(1, error)
    with pytest.raises((sa.exc.IntegrityError, ValueError)):
        rider.call(work)
    assert len(calls) == 1 and rider.outage is None
