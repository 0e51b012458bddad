"""The faulty proxy (tests/faulty_proxy.py) in front of a real llama-server serving the tiny
adder: what it passes through unchanged and what it alters, seen by plain HTTP clients."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.faulty_proxy import Fault, FaultyProxy
from tests.integration.served import free_port, llama_flags, llama_server

# Volatile fields of llama-server answers (per request / per slot), left out of comparisons.
VOLATILE = ("timings", "id", "created", "id_slot", "tokens_cached")
PROMPT_IDS = [1, 52, 53, 46, 54, 55, 64]  # "<s>12+34=" in the tiny adder's vocabulary


@pytest.fixture(scope="module")
def llama(
    llama_server_bin: Path, tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A real llama-server with one slot: bit-identical answers under concurrency (with
    ``-np 4`` concurrent requests are decoded in one batch and their logprobs move by a
    float32 step, which would blur what the proxy did). Requests still overlap at the
    proxy, which counts them from arrival to the end of the response."""
    workdir = tmp_path_factory.mktemp("llama")
    with llama_server(llama_server_bin, tiny_gguf, workdir, llama_flags(1, 64)) as url:
        yield url


def native(prompt: Any = PROMPT_IDS, n_probs: int = 4, **extra: Any) -> dict[str, Any]:
    """The plugin's llama-server request: token ids, greedy, probabilities and ids back."""
    return {
        "prompt": prompt,
        "n_predict": 8,
        "temperature": 0,
        "n_probs": n_probs,
        "return_tokens": True,
        "cache_prompt": False,
        **extra,
    }


def oai(prompt: str = "12+34=", **extra: Any) -> dict[str, Any]:
    return {"prompt": prompt, "max_tokens": 8, "temperature": 0, "cache_prompt": False, **extra}


def stable(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k not in VOLATILE}


def post(base: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(base + path, json=body, timeout=60)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def sse_events(base: str, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    events = []
    with httpx.stream("POST", base + path, json={**body, "stream": True}, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    return events


def at_once(base: str, n: int) -> list[dict[str, Any]]:
    """``n`` copies of :func:`native` to ``/completion``, from ``n`` threads released
    together; their stable answers in thread order."""
    start = threading.Barrier(n)
    answers: list[dict[str, Any]] = [{} for _ in range(n)]

    def one(i: int) -> None:
        start.wait()
        answers[i] = stable(post(base, "/completion", native()))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def assert_last_token_altered(base: dict[str, Any], got: dict[str, Any]) -> None:
    """A /completion answer whose last generated token (not the EOS) was swapped, on every
    channel: text, ids and the probability entry."""
    assert got["content"] != base["content"]
    assert len(got["content"]) == len(base["content"])
    assert got["content"][:-1] == base["content"][:-1]
    changed = [
        i for i, (a, b) in enumerate(zip(base["tokens"], got["tokens"], strict=True)) if a != b
    ]
    assert changed == [len(base["tokens"]) - 2]  # the token before the EOS
    (i,) = changed
    entry, old = got["completion_probabilities"][i], base["completion_probabilities"][i]
    assert entry["id"] == got["tokens"][i]
    assert entry["token"] == got["content"][-1]
    assert entry["logprob"] < old["logprob"]  # the runner-up of the same distribution
    assert entry["top_logprobs"] == old["top_logprobs"]
    assert got["completion_probabilities"][:i] == base["completion_probabilities"][:i]


def test_passthrough_is_identical_to_direct(llama: str) -> None:
    with FaultyProxy(llama) as proxy:
        assert proxy.url.startswith("http://127.0.0.1:")
        for path, body in [
            ("/completion", native()),
            ("/v1/completions", oai(logprobs=3)),
            (
                "/v1/chat/completions",
                {"messages": [{"role": "user", "content": "12+34="}], **oai()},
            ),
        ]:
            direct, proxied = post(llama, path, body), post(proxy.url, path, body)
            assert stable(proxied) == stable(direct), path
        assert stable(post(llama, "/completion", native()))["content"] == "46"
        for path in ("/health", "/props"):
            assert httpx.get(proxy.url + path).json() == httpx.get(llama + path).json(), path
        # /v1/models stamps "created" with the time of the request.
        models = [httpx.get(url + "/v1/models").json() for url in (proxy.url, llama)]
        assert [[stable(m) for m in answer["data"]] for answer in models] == [
            [stable(m) for m in models[1]["data"]]
        ] * 2
        assert models[0]["data"][0]["meta"]["n_vocab"] == 259
        tokenize = {"content": "12+34=", "add_special": True}
        assert post(proxy.url, "/tokenize", tokenize) == {"tokens": PROMPT_IDS}
        assert post(proxy.url, "/detokenize", {"tokens": PROMPT_IDS[1:]}) == {"content": "12+34="}
        missing = httpx.post(proxy.url + "/api/generate", json={"prompt": "1"})
        assert missing.status_code == 404  # llama-server has no Ollama API: passed through
        # A stream, untouched: the same events (volatile fields aside) in the same order.
        direct_events = sse_events(llama, "/completion", native())
        proxied_events = sse_events(proxy.url, "/completion", native())
        assert [stable(e) for e in proxied_events] == [stable(e) for e in direct_events]
        assert "".join(e["content"] for e in proxied_events) == "46"
        assert proxy.requests == 5  # 3 + the 404 /api/generate + the stream
        assert proxy.altered == 0


def test_perturb_every_third_request(llama: str) -> None:
    base = stable(post(llama, "/completion", native()))
    assert base["content"] == "46" and base["tokens"] == [55, 57, 2]
    with FaultyProxy(llama, Fault(perturb_every=3)) as proxy:
        # Non-generation requests do not count.
        assert httpx.get(proxy.url + "/health").status_code == 200
        post(proxy.url, "/tokenize", {"content": "1"})
        answers = [stable(post(proxy.url, "/completion", native())) for _ in range(7)]
        assert [a != base for a in answers] == [False, False, True, False, False, True, False]
        for i in (2, 5):
            assert_last_token_altered(base, answers[i])
        assert answers[2] == answers[5]
        assert proxy.requests == 7 and proxy.altered == 2 and proxy.max_in_flight == 1


def test_altering_one_token_outputs_and_other_shapes(llama: str) -> None:
    """Every generation response altered (perturb_every=1): a 1-token answer, an answer with
    no probabilities, the OpenAI shapes and an empty chat answer."""
    one = stable(post(llama, "/completion", native("1+2=")))
    assert one["content"] == "3" and len(one["tokens"]) == 2  # "3" then the EOS
    assert stable(post(llama, "/completion", native(n_probs=0)))["tokens"] == [55, 57, 2]
    completion = post(llama, "/v1/completions", oai(logprobs=2))
    chat_body = {"messages": [{"role": "user", "content": "12+34="}], "temperature": 0}
    chat = post(llama, "/v1/chat/completions", chat_body)
    with FaultyProxy(llama, Fault(perturb_every=1)) as proxy:
        assert_last_token_altered(one, stable(post(proxy.url, "/completion", native("1+2="))))

        got = stable(post(proxy.url, "/completion", native(n_probs=0)))
        assert "completion_probabilities" not in got
        assert got["content"] == "47"  # no alternatives known: the last character moves on
        assert got["tokens"] == [55, 56, 2]  # the id before the EOS, minus one

        got_c = post(proxy.url, "/v1/completions", oai(logprobs=2))
        text, entries = completion["choices"][0]["text"], completion["choices"][0]["logprobs"]
        assert text == "46"
        new_text, new_entries = got_c["choices"][0]["text"], got_c["choices"][0]["logprobs"]
        assert new_text[0] == "4" and new_text != text
        assert new_entries["content"][0] == entries["content"][0]
        assert new_entries["content"][1]["token"] == new_text[1]
        assert new_entries["content"][1]["logprob"] < entries["content"][1]["logprob"]

        got_chat = post(proxy.url, "/v1/chat/completions", chat_body)
        old_message = chat["choices"][0]["message"]["content"]
        assert got_chat["choices"][0]["message"]["content"] != old_message
        assert proxy.requests == 4 and proxy.altered == 4


def test_perturb_when_concurrent(llama: str) -> None:
    base = stable(post(llama, "/completion", native()))
    fault = Fault(perturb_when_concurrent=True, delay_s=0.5)
    with FaultyProxy(llama, fault) as proxy:
        sequential = [stable(post(proxy.url, "/completion", native())) for _ in range(3)]
        assert sequential == [base] * 3
        assert proxy.altered == 0 and proxy.max_in_flight == 1

        answers = at_once(proxy.url, 8)
        assert proxy.requests == 11
        assert proxy.max_in_flight >= 2
        altered = [a for a in answers if a != base]
        assert len(altered) == proxy.altered >= 2  # overlap takes two
        for answer in altered:
            assert_last_token_altered(base, answer)


def test_many_concurrent_requests_pass_through(llama: str) -> None:
    base = stable(post(llama, "/completion", native()))
    with FaultyProxy(llama, Fault(delay_s=0.2)) as proxy:
        answers = at_once(proxy.url, 24)
        assert answers == [base] * 24
        assert proxy.requests == 24 and proxy.altered == 0 and proxy.max_in_flight >= 2


def test_drop_stream_chunk(llama: str) -> None:
    body = oai(logprobs=1)
    whole = post(llama, "/v1/completions", body)["choices"][0]["text"]
    direct = sse_events(llama, "/v1/completions", body)
    assert whole == "46" and "".join(e["choices"][0]["text"] for e in direct) == "46"
    with FaultyProxy(llama, Fault(drop_stream_chunk=True)) as proxy:
        proxied = sse_events(proxy.url, "/v1/completions", body)
        assert "".join(e["choices"][0]["text"] for e in proxied) == "4"
        assert len(proxied) == len(direct) - 1
        kept = [stable(e) for e in direct]
        del kept[1]  # "6", the 2nd event with content
        assert [stable(e) for e in proxied] == kept
        # A non-streamed answer is untouched.
        assert post(proxy.url, "/v1/completions", body)["choices"][0]["text"] == "46"
        assert proxy.requests == 2 and proxy.altered == 1


def test_altered_stream(llama: str) -> None:
    """An altered SSE stream changes its last content-carrying event; native and OpenAI."""
    base = stable(post(llama, "/completion", native()))
    direct = sse_events(llama, "/completion", native())
    assert [e["content"] for e in direct] == ["4", "6", "", ""]
    with FaultyProxy(llama, Fault(perturb_every=1)) as proxy:
        events = sse_events(proxy.url, "/completion", native())
        assert [stable(e) for e in events[::2]] == [stable(e) for e in direct[::2]]
        assert stable(events[3]) == stable(direct[3])
        (entry,) = events[1]["completion_probabilities"]
        assert events[1]["content"] != "6" and entry["token"] == events[1]["content"]
        assert events[1]["tokens"] == [entry["id"]] != direct[1]["tokens"]
        assert entry["logprob"] < direct[1]["completion_probabilities"][0]["logprob"]
        streamed = "".join(e["content"] for e in events)
        whole = stable(post(proxy.url, "/completion", native()))
        assert streamed == whole["content"] != base["content"]

        texts = [e["choices"][0]["text"] for e in sse_events(proxy.url, "/v1/completions", oai())]
        assert texts[0] == "4" and "".join(texts) not in ("46", "4")
        assert proxy.requests == 3 and proxy.altered == 3


def test_poison(llama: str) -> None:
    base = stable(post(llama, "/completion", native()))
    poison_body = native("77+22=")
    poisoned_direct = stable(post(llama, "/completion", poison_body))
    with FaultyProxy(llama, Fault(poison="77+22=")) as proxy:
        before = [stable(post(proxy.url, "/completion", native())) for _ in range(3)]
        assert before == [base] * 3 and proxy.altered == 0
        assert stable(post(proxy.url, "/completion", poison_body)) == poisoned_direct
        after = [stable(post(proxy.url, "/completion", native())) for _ in range(3)]
        for answer in after:
            assert_last_token_altered(base, answer)
        events = sse_events(proxy.url, "/v1/completions", oai())
        assert "".join(e["choices"][0]["text"] for e in events) != "46"
        assert proxy.requests == 8 and proxy.altered == 4


def _disconnect_mid_stream(proxy_url: str, body: dict[str, Any]) -> bytes:
    """Send a streamed request on a raw socket, read the first bytes and hang up."""
    host, port = proxy_url.removeprefix("http://").split(":")
    payload = json.dumps({**body, "stream": True}).encode()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
        )
        first = sock.recv(4096)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    return first  # closed with a reset (linger 0): the proxy's next write fails


@pytest.mark.parametrize(
    "fault", [Fault(), Fault(drop_stream_chunk=True, perturb_every=1)], ids=["plain", "faulty"]
)
def test_client_disconnecting_mid_stream(llama: str, fault: Fault) -> None:
    base = stable(post(llama, "/completion", native()))
    # ignore_eos: 40 tokens, a stream that outlives the client.
    long = native(n_predict=40, ignore_eos=True)
    threads_before = set(threading.enumerate())
    with FaultyProxy(llama, fault) as proxy:
        for _ in range(3):
            first = _disconnect_mid_stream(proxy.url, long)
            assert first.startswith(b"HTTP/1.1 200")
        answer = stable(post(proxy.url, "/completion", native()))
        assert answer["content"] == ("46" if fault == Fault() else "45")
        assert answer["tokens"][0] == base["tokens"][0]
        events = sse_events(proxy.url, "/completion", long)
        assert len(events) >= 40 - int(fault.drop_stream_chunk) and events[-1]["stop"] is True
        assert proxy.requests == 5
    with pytest.raises(httpx.ConnectError):  # shut down: the port no longer answers
        httpx.get(proxy.url + "/health", timeout=5)
    assert [t for t in threading.enumerate() if t not in threads_before] == []


def test_upstream_down_gives_502() -> None:
    with FaultyProxy(f"http://127.0.0.1:{free_port()}") as proxy:
        response = httpx.post(proxy.url + "/completion", json=native(), timeout=30)
        assert response.status_code == 502
        assert "upstream" in response.json()["error"]["message"]
        assert proxy.requests == 1 and proxy.altered == 0
