"""A request error stays an ``HttpError`` after a test that unloads the modules it imported.

pytester unloads, at a test's teardown, every module imported during the test. httpx
imports httpcore lazily at its first transport and keeps a process-wide map from
httpcore's exception classes to its own, filled at its first request. When that first
request was made inside a pytester test (the faulty proxy of
``tests/integration/test_stress_servers.py``, a server's health poll), httpcore alone was
unloaded, imported again later, and its new exception classes were no longer mapped: a
refused connection or a timeout escaped as a raw ``httpcore`` exception, and
``tests/http`` failed after the stress tests. :mod:`pytest_infercheck.backends.http` (and
the test helpers that use httpx) now import httpcore with httpx."""

from __future__ import annotations

import pytest

INNER = """
import pytest

from pytest_infercheck.backends.http import HttpClient, HttpError, HttpSettings

DOWN = HttpSettings(base_url="http://127.0.0.1:9", retries=0, backoff_s=0.01)


@pytest.mark.asyncio
async def test_the_first_request_is_made_inside_a_pytester_test(pytester):
    with pytest.raises(HttpError, match="ConnectError"):
        await HttpClient("down", DOWN).request("GET", "/health")


@pytest.mark.asyncio
async def test_a_later_refused_connection_is_still_an_http_error():
    with pytest.raises(HttpError, match="ConnectError"):
        await HttpClient("down", DOWN).request("GET", "/health")
"""


def test_request_errors_stay_http_errors_after_a_pytester_test(pytester: pytest.Pytester) -> None:
    pytester.makefile(".ini", pytest="[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-q", "-p", "pytester", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
