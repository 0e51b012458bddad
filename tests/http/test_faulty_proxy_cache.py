"""The faulty proxy's cache faults on scripted answers (real servers behind it: the
cache-parity integration tests): the N-th request of a prompt answered HTTP 500, and every
warm request (a prompt seen or extended before, sent through the cache) altered the same
way."""

from __future__ import annotations

from typing import Any

import httpx

from tests.faulty_proxy import Fault, FaultyProxy
from tests.http.fake_server import Reply, Script, fake_server


def answer(text: str = "46") -> dict[str, Any]:
    return {"choices": [{"index": 0, "text": text, "finish_reason": "stop"}]}


def post(url: str, prompt: Any, **extra: Any) -> httpx.Response:
    return httpx.post(f"{url}/v1/completions", json={"prompt": prompt, **extra}, timeout=10)


def test_the_nth_request_of_a_prompt_fails_and_is_not_forwarded() -> None:
    script = Script([Reply(body=answer()) for _ in range(4)])
    with fake_server(script) as url, FaultyProxy(url, Fault(fail_nth_of_prompt=2)) as proxy:
        statuses = [post(proxy.url, p).status_code for p in ("a", "b", "a", "a", "b")]
        failed = post(proxy.url, "c").status_code, post(proxy.url, "c")
    # a: 1st ok, 2nd 500, 3rd ok; b: 1st ok, 2nd 500; c: 1st ok, 2nd 500 (its JSON body).
    assert statuses == [200, 200, 500, 200, 500]
    assert failed[0] == 200 and failed[1].status_code == 500
    assert failed[1].json() == {"error": {"message": "faulty proxy: HTTP 500 on purpose"}}
    assert proxy.failed == 3
    sent = [r["json"]["prompt"] for r in script.requests]
    assert sent == ["a", "b", "a", "c"]  # the failed ones were not forwarded


def test_warm_requests_are_altered_the_same_way_and_first_sights_are_not() -> None:
    script = Script([Reply(body=answer()) for _ in range(6)])
    with fake_server(script) as url, FaultyProxy(url, Fault(perturb_warm=True)) as proxy:
        first = post(proxy.url, "12+34=").json()
        repeat = post(proxy.url, "12+34=").json()
        again = post(proxy.url, "12+34=").json()
        later = post(proxy.url, "12+34=46 and 1+1=").json()  # extends a prompt seen before
        uncached = post(proxy.url, "12+34=", cache_prompt=False).json()
        other = post(proxy.url, "7+8=").json()
    texts = [r["choices"][0]["text"] for r in (first, repeat, again, later, uncached, other)]
    # "46" -> "47": the last character moves on, identically on every warm request.
    assert texts == ["46", "47", "47", "47", "46", "46"]
    assert proxy.altered == 3
