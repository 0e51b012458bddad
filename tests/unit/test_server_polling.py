"""The health-poll schedule of managed servers (``servers.health_poll_delays``)."""

from __future__ import annotations

from itertools import islice

from pytest_infercheck.servers import HEALTH_POLL_FIRST_S, HEALTH_POLL_MAX_S, health_poll_delays


def test_delays_start_small_and_double_up_to_the_cap() -> None:
    assert list(islice(health_poll_delays(0.01, 0.25), 8)) == [
        0.01,
        0.02,
        0.04,
        0.08,
        0.16,
        0.25,
        0.25,
        0.25,
    ]


def test_the_defaults_see_a_fast_server_within_tens_of_milliseconds() -> None:
    """A server ready 50 ms after start is seen by the poll that follows the first ~70 ms
    of pauses (0.01 + 0.02 + 0.04), not 0.25 s later as with a fixed interval."""
    delays = list(islice(health_poll_delays(), 20))
    assert delays[0] == HEALTH_POLL_FIRST_S <= 0.02
    assert max(delays) == HEALTH_POLL_MAX_S <= 0.25
    elapsed, polls = 0.0, 0
    for d in delays:
        if elapsed >= 0.05:
            break
        elapsed += d
        polls += 1
    assert elapsed < 0.1 and polls == 3
