"""The HTTP layer and the OpenAI-compatible backend against scripted faults (pytest-asyncio,
strict mode). Real servers are exercised in tests/integration."""

from __future__ import annotations

import time

import pytest

from pytest_infercheck.backends import GenerationParams
from pytest_infercheck.backends.base import BackendError
from pytest_infercheck.backends.http import HttpClient, HttpError, HttpSettings
from pytest_infercheck.backends.openai_compat import OpenAICompatBackend, parse_choice

from .fake_server import Reply, Script, chat_answer, fake_server

FAST = {"backoff_s": 0.01, "timeout_s": 2.0}


def backend(url: str, **kwargs: object) -> OpenAICompatBackend:
    settings = HttpSettings(base_url=url, **FAST)  # type: ignore[arg-type]
    return OpenAICompatBackend("fake", settings, model="m", **kwargs)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_chat_generation_with_logprobs_and_thinking_off() -> None:
    script = Script([Reply(body=chat_answer("46", [("4", -0.1), ("6", -0.2)]))])
    with fake_server(script) as url:
        b = backend(url)
        gen = await b.generate(await b.render("12+34=", "sys", False), GenerationParams(8))
        await b.aclose()
    assert gen.text == "46" and gen.finish_reason == "stop"
    assert gen.chosen_logprobs == [-0.1, -0.2] and gen.top_keys == "text"
    assert gen.token_texts == ["4", "6"]
    sent = script.requests[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["json"]["temperature"] == 0.0 and sent["json"]["model"] == "m"
    assert sent["json"]["messages"][0] == {"role": "system", "content": "sys"}
    assert sent["json"]["chat_template_kwargs"] == {"enable_thinking": False}
    assert sent["json"]["logprobs"] is True and sent["json"]["top_logprobs"] == 5


@pytest.mark.asyncio
async def test_raw_completion_and_legacy_logprobs_shape() -> None:
    legacy = {
        "choices": [
            {
                "text": "46",
                "finish_reason": "length",
                "logprobs": {
                    "tokens": ["4", "6"],
                    "token_logprobs": [-0.5, -0.25],
                    "top_logprobs": [{"4": -0.5, "5": -1.0}, {"6": -0.25}],
                },
            }
        ]
    }
    script = Script([Reply(body=legacy)])
    with fake_server(script) as url:
        b = backend(url, chat=False)
        gen = await b.generate(await b.render("12+34=", None, False), GenerationParams(2))
    assert script.requests[0]["path"] == "/v1/completions"
    assert (
        script.requests[0]["json"]["prompt"] == "12+34="
        and "messages" not in script.requests[0]["json"]
    )
    assert gen.top_logprobs == [{"4": -0.5, "5": -1.0}, {"6": -0.25}]
    assert gen.finish_reason == "length"


@pytest.mark.asyncio
async def test_rejected_logprobs_fall_back_and_are_recorded() -> None:
    script = Script(
        [Reply(400, {"error": "logprobs are not supported"}), Reply(body=chat_answer("46"))]
    )
    with fake_server(script) as url:
        b = backend(url)
        gen = await b.generate(await b.render("x", None, False), GenerationParams(4))
    assert gen.text == "46" and gen.chosen_logprobs is None
    assert "logprobs" not in script.requests[1]["json"]
    assert b.observed == {"logprobs": False} and b.capabilities.top_k_logprobs == 0


@pytest.mark.asyncio
async def test_silently_ignored_logprobs_are_detected() -> None:
    with fake_server(Script([Reply(body=chat_answer("46"))])) as url:
        b = backend(url)
        await b.generate(await b.render("x", None, False), GenerationParams(4))
    assert b.observed["logprobs"] is False
    assert b.identity()["observed"] == {"logprobs": False}


@pytest.mark.asyncio
async def test_retries_503_honouring_retry_after_then_succeeds() -> None:
    script = Script(
        [
            Reply(503, {"error": "text_generation_busy"}, headers={"Retry-After": "0.2"}),
            Reply(429, {"error": "slow down"}, headers={"Retry-After": "0"}),
            Reply(body={"ok": 1}),
        ]
    )
    with fake_server(script) as url:
        client = HttpClient("fake", HttpSettings(base_url=url, **FAST))  # type: ignore[arg-type]
        started = time.perf_counter()
        assert await client.request("POST", "/x", {}) == {"ok": 1}
        waited = time.perf_counter() - started
        await client.aclose()
    assert len(script.requests) == 3 and waited >= 0.2


@pytest.mark.parametrize("status", [400, 404, 422, 500])
@pytest.mark.asyncio
async def test_other_errors_are_not_retried(status: int) -> None:
    script = Script([Reply(status, {"error": "nope"})])
    with fake_server(script) as url:
        client = HttpClient("fake", HttpSettings(base_url=url, **FAST))  # type: ignore[arg-type]
        with pytest.raises(HttpError, match=f"HTTP {status}") as info:
            await client.request("POST", "/x", {})
    assert info.value.status == status and len(script.requests) == 1


@pytest.mark.asyncio
async def test_persistent_503_gives_up_after_the_retries() -> None:
    script = Script([Reply(503, {"error": "busy"})])
    with fake_server(script) as url:
        settings = HttpSettings(base_url=url, retries=2, backoff_s=0.01)
        with pytest.raises(HttpError, match="HTTP 503"):
            await HttpClient("fake", settings).request("POST", "/x", {})
    assert len(script.requests) == 3


@pytest.mark.asyncio
async def test_hang_times_out_with_a_clear_error() -> None:
    with fake_server(Script([Reply(body={}, delay_s=1.0)])) as url:
        settings = HttpSettings(base_url=url, timeout_s=0.2, retries=1, backoff_s=0.01)
        with pytest.raises(HttpError, match="failed after 2 attempts: ReadTimeout"):
            await HttpClient("fake", settings).request("POST", "/x", {})


@pytest.mark.asyncio
async def test_malformed_json_is_a_clear_error() -> None:
    with (
        fake_server(Script([Reply(raw=b"{not json")])) as url,
        pytest.raises(HttpError, match="malformed JSON"),
    ):
        await HttpClient("fake", HttpSettings(base_url=url)).request("POST", "/x", {})


@pytest.mark.asyncio
async def test_an_empty_body_is_named() -> None:
    with (
        fake_server(Script([Reply(raw=b"")])) as url,
        pytest.raises(HttpError, match=r"POST /x returned HTTP 200 with an empty body"),
    ):
        await HttpClient("fake", HttpSettings(base_url=url)).request("POST", "/x", {})


@pytest.mark.asyncio
async def test_connection_refused_is_retried_then_reported() -> None:
    settings = HttpSettings(base_url="http://127.0.0.1:9", retries=1, backoff_s=0.01)
    with pytest.raises(HttpError, match="ConnectError"):
        await HttpClient("down", settings).request("GET", "/health")


@pytest.mark.asyncio
async def test_api_key_from_environment_never_in_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_KEY", "sk-secret-123")
    script = Script([Reply(401, {"error": "bad key"})])
    with fake_server(script) as url:
        settings = HttpSettings(base_url=url, api_key_env="FAKE_KEY")
        with pytest.raises(HttpError) as info:
            await HttpClient("fake", settings).request("POST", "/x", {})
    assert script.requests[0]["auth"] == "Bearer sk-secret-123"
    assert "sk-secret" not in str(info.value)


@pytest.mark.asyncio
async def test_missing_api_key_variable_is_named() -> None:
    settings = HttpSettings(base_url="http://127.0.0.1:9", api_key_env="NOT_SET_ANYWHERE")
    with pytest.raises(BackendError, match="NOT_SET_ANYWHERE is not set"):
        await HttpClient("fake", settings).request("GET", "/")


def test_reasoning_is_split_from_the_answer() -> None:
    separate = {
        "choices": [
            {"message": {"content": "4", "reasoning_content": "2+2"}, "finish_reason": "stop"}
        ]
    }
    inline = {"choices": [{"message": {"content": "<think>2+2</think>\n4"}}]}
    for answer in (separate, inline):
        gen = parse_choice(answer, chat=True)
        assert gen.text == "4" and gen.reasoning == "2+2"


def test_response_without_choices_is_an_error() -> None:
    with pytest.raises(HttpError, match="no choices"):
        parse_choice({"error": "x"}, chat=True)


@pytest.mark.asyncio
async def test_vllm_mlx_health_must_name_the_expected_model() -> None:
    from pytest_infercheck.backends.vllm_mlx import VllmMlxBackend

    health = {"status": "ok", "model_loaded": True, "model_name": "other", "engine_type": "simple"}
    with fake_server(Script([Reply(body=health)])) as url:
        b = VllmMlxBackend("v", HttpSettings(base_url=url), model="/models/tiny")
        with pytest.raises(BackendError, match="has 'other' loaded, expected '/models/tiny'"):
            await b.ensure_ready()
    assert b.capabilities.top_k_logprobs == 0  # declared: vllm-mlx returns no logprobs
    with fake_server(Script([Reply(body={**health, "model_name": "/models/tiny"})])) as url:
        await VllmMlxBackend("v", HttpSettings(base_url=url), model="/models/tiny").ensure_ready()


@pytest.mark.asyncio
async def test_ollama_native_chat_with_think_off() -> None:
    from pytest_infercheck.backends.ollama import OllamaBackend

    tags = {"models": [{"name": "qwen3:4b"}]}
    answer = {
        "message": {"role": "assistant", "content": "46", "thinking": "12 plus 34"},
        "done_reason": "stop",
        "logprobs": [
            {"token": "4", "logprob": -0.1, "top_logprobs": [{"token": "4", "logprob": -0.1}]},
            {"token": "6", "logprob": -0.3, "top_logprobs": []},
        ],
    }
    script = Script([Reply(body=tags), Reply(body=answer)])
    with fake_server(script) as url:
        b = OllamaBackend("ol", HttpSettings(base_url=url), model="qwen3:4b", chat=True)
        await b.ensure_ready()
        gen = await b.generate(await b.render("12+34=", None, False), GenerationParams(8, seed=1))
    sent = script.requests[1]
    assert sent["path"] == "/api/chat" and sent["json"]["think"] is False
    assert sent["json"]["options"] == {"temperature": 0.0, "num_predict": 8, "seed": 1}
    assert gen.text == "46" and gen.reasoning == "12 plus 34"
    assert gen.chosen_logprobs == [-0.1, -0.3] and gen.token_texts == ["4", "6"]


@pytest.mark.asyncio
async def test_ollama_raw_generate_and_missing_model() -> None:
    from pytest_infercheck.backends.ollama import OllamaBackend

    script = Script([Reply(body={"models": [{"name": "other:1b"}]})])
    with fake_server(script) as url:
        b = OllamaBackend("ol", HttpSettings(base_url=url), model="qwen3:4b", chat=False)
        with pytest.raises(
            BackendError, match="Ollama has no model 'qwen3:4b' \\(has: other:1b\\)"
        ):
            await b.ensure_ready()
    script = Script([Reply(body={"response": "46", "done_reason": "length"})])
    with fake_server(script) as url:
        b = OllamaBackend("ol", HttpSettings(base_url=url), model="qwen3:4b", chat=False)
        gen = await b.generate(await b.render("12+34=", None, False), GenerationParams(2))
    assert script.requests[0]["path"] == "/api/generate" and script.requests[0]["json"]["raw"]
    assert gen.finish_reason == "length" and b.observed == {"logprobs": False}


@pytest.mark.asyncio
async def test_vllm_mlx_simple_engine_gets_one_request_at_a_time() -> None:
    from pytest_infercheck.backends.vllm_mlx import VllmMlxBackend

    health = {"status": "healthy", "model_loaded": True, "model_name": "m", "engine_type": "simple"}
    with fake_server(Script([Reply(body=health)])) as url:
        b = VllmMlxBackend("v", HttpSettings(base_url=url, max_concurrency=4), model="m")
        await b.ensure_ready()
    assert b.concurrency == 1 and b.http.settings.max_concurrency == 1
    batched = {**health, "engine_type": "batched"}
    with fake_server(Script([Reply(body=batched)])) as url:
        b = VllmMlxBackend("v", HttpSettings(base_url=url, max_concurrency=4), model="m")
        await b.ensure_ready()
    assert b.concurrency == 4
