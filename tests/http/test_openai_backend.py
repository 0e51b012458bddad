"""The HTTP layer and the OpenAI-compatible backend against scripted faults (pytest-asyncio,
strict mode). Real servers are exercised in tests/integration."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.backends import GenerationParams
from pytest_infercheck.backends.base import BackendError, PromptInput
from pytest_infercheck.backends.http import HttpClient, HttpError, HttpSettings
from pytest_infercheck.backends.openai_compat import (
    LogprobNegotiation,
    OpenAICompatBackend,
    ShapeTried,
    parse_choice,
    text_generation,
)
from pytest_infercheck.metrics.consistency import generation_faults

from .fake_server import Reply, Script, chat_answer, fake_server

FAST = {"backoff_s": 0.01, "timeout_s": 2.0}


def backend(url: str, **kwargs: object) -> OpenAICompatBackend:
    settings = HttpSettings(base_url=url, **FAST)  # type: ignore[arg-type]
    return OpenAICompatBackend("fake", settings, model="m", **kwargs)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_chat_generation_with_logprobs_and_thinking_off() -> None:
    # The readiness probe (one token, the chat shape) then the generation, same answer.
    script = Script([Reply(body=chat_answer("46", [("4", -0.1), ("6", -0.2)]))])
    with fake_server(script) as url:
        b = backend(url)
        await b.ensure_ready()
        gen = await b.generate(await b.render("12+34=", "sys", False), GenerationParams(8))
        await b.aclose()
    assert gen.text == "46" and gen.finish_reason == "stop"
    assert gen.chosen_logprobs == [-0.1, -0.2] and gen.top_keys == "text"
    assert gen.token_texts == ["4", "6"]
    probe, sent = script.requests
    assert probe["json"]["max_tokens"] == 1 and probe["json"]["logprobs"] is True
    assert probe["json"]["top_logprobs"] == 5
    assert sent["path"] == "/v1/chat/completions"
    assert sent["json"]["temperature"] == 0.0 and sent["json"]["model"] == "m"
    assert sent["json"]["messages"][0] == {"role": "system", "content": "sys"}
    assert sent["json"]["chat_template_kwargs"] == {"enable_thinking": False}
    assert sent["json"]["logprobs"] is True and sent["json"]["top_logprobs"] == 5
    assert b.observed == {"logprobs": True, "logprobs_shape": "bool+top_logprobs"}
    assert b.logprob_unavailable_reason() is None


LEGACY = {
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


@pytest.mark.asyncio
async def test_raw_completion_and_legacy_logprobs_shape() -> None:
    script = Script([Reply(body=LEGACY)])
    with fake_server(script) as url:
        b = backend(url, chat=False)
        await b.ensure_ready()
        gen = await b.generate(await b.render("12+34=", None, False), GenerationParams(2))
    sent = script.requests[1]
    assert sent["path"] == "/v1/completions" and sent["json"]["logprobs"] == 5
    assert sent["json"]["prompt"] == "12+34=" and "messages" not in sent["json"]
    assert "top_logprobs" not in sent["json"]
    assert gen.top_logprobs == [{"4": -0.5, "5": -1.0}, {"6": -0.25}]
    assert gen.finish_reason == "length"
    assert b.observed["logprobs_shape"] == "integer"


MLX_BOOL = "logprobs must be of type bool"


@pytest.mark.asyncio
async def test_an_integer_rejected_is_asked_as_bool_with_top_logprobs() -> None:
    """mlx_lm.server: ``logprobs: 5`` -> HTTP 400; ``logprobs: true, top_logprobs: 5`` works,
    and is what every generation then asks."""
    script = Script([Reply(400, {"error": MLX_BOOL}), Reply(body=LEGACY)])
    with fake_server(script) as url:
        b = backend(url, chat=False)
        await b.ensure_ready()
        await b.generate(await b.render("x", None, False), GenerationParams(4))
    integer, boolean, sent = (r["json"] for r in script.requests)
    assert integer["logprobs"] == 5 and "top_logprobs" not in integer
    assert boolean["logprobs"] is True and boolean["top_logprobs"] == 5
    assert sent["logprobs"] is True and sent["top_logprobs"] == 5
    assert b.negotiated[False] == LogprobNegotiation(
        "completions",
        "bool+top_logprobs",
        (
            ShapeTried("integer", f"HTTP 400: {MLX_BOOL}"),
            ShapeTried("bool+top_logprobs", "logprobs"),
        ),
    )
    assert b.identity()["observed"] == {"logprobs": True, "logprobs_shape": "bool+top_logprobs"}


@pytest.mark.asyncio
async def test_no_shape_working_says_why_and_asks_no_more() -> None:
    script = Script(
        [
            Reply(400, {"error": {"message": "logprobs are not supported"}}),
            Reply(422, {"detail": "top_logprobs: extra fields not permitted"}),
            Reply(body={"choices": [{"text": "46", "finish_reason": "stop"}]}),
        ]
    )
    with fake_server(script) as url:
        b = backend(url, chat=False)
        await b.ensure_ready()
        gen = await b.generate(await b.render("x", None, False), GenerationParams(4))
    assert gen.text == "46" and gen.chosen_logprobs is None
    assert "logprobs" not in script.requests[2]["json"]
    reason = (
        "no logprobs from /v1/completions (integer: HTTP 400: logprobs are not supported; "
        "bool+top_logprobs: HTTP 422: top_logprobs: extra fields not permitted)"
    )
    assert b.logprob_unavailable_reason() == reason
    assert b.observed == {"logprobs": False, "logprobs_shape": None, "logprobs_note": reason}
    assert b.capabilities.top_k_logprobs == 0


@pytest.mark.asyncio
async def test_silently_ignored_logprobs_are_detected() -> None:
    with fake_server(Script([Reply(body=chat_answer("46"))])) as url:
        b = backend(url)
        await b.ensure_ready()
        await b.generate(await b.render("x", None, False), GenerationParams(4))
    reason = "no logprobs from /v1/chat (bool+top_logprobs: answered without logprobs)"
    assert b.identity()["observed"] == {
        "logprobs": False,
        "logprobs_shape": None,
        "logprobs_note": reason,
    }


@pytest.mark.asyncio
async def test_a_generation_without_logprobs_after_the_probe_is_recorded() -> None:
    script = Script([Reply(body=chat_answer("4", [("4", -0.1)])), Reply(body=chat_answer("46"))])
    with fake_server(script) as url:
        b = backend(url)
        await b.ensure_ready()
        await b.generate(await b.render("x", None, False), GenerationParams(4))
    assert b.logprob_unavailable_reason() == (
        "no logprobs from /v1/chat (bool+top_logprobs: logprobs; "
        "bool+top_logprobs: a generation without)"
    )


@pytest.mark.asyncio
async def test_a_server_error_at_the_probe_is_raised_not_taken_for_no_logprobs() -> None:
    with fake_server(Script([Reply(500, {"error": "engine dead"})])) as url:
        b = backend(url)
        with pytest.raises(HttpError, match="HTTP 500"):
            await b.ensure_ready()
    assert b.negotiated == {}


@pytest.mark.asyncio
async def test_the_other_endpoint_is_negotiated_on_first_use() -> None:
    """A chat backend sending a rendered prompt to /v1/completions (endpoint-parity) asks
    that endpoint's shapes before its first request there."""
    script = Script(
        [
            Reply(body=chat_answer("4", [("4", -0.1)])),
            Reply(400, {"error": MLX_BOOL}),
            Reply(body=LEGACY),
        ]
    )
    with fake_server(script) as url:
        b = backend(url)
        await b.ensure_ready()
        raw = PromptInput("<s>12+34=", None, templated=True)
        await b._generate(raw, GenerationParams(2), chat=False)
    paths = [r["path"] for r in script.requests]
    assert paths == ["/v1/chat/completions", *["/v1/completions"] * 3]
    assert script.requests[3]["json"]["top_logprobs"] == 5
    assert b.negotiated[False].shape == "bool+top_logprobs"
    assert b.observed["logprobs_shape"] == "bool+top_logprobs"  # the chat endpoint's


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
        with pytest.raises(HttpError, match="2 attempts: ReadTimeout"):
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


def test_model_name_names_the_served_model_and_the_source_stays_the_folder(
    tmp_path: Path,
) -> None:
    from pytest_infercheck.backends.openai_compat import create
    from pytest_infercheck.backends.spec import OpenAIServerSpec

    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text('{"max_position_embeddings": 512}')
    spec = OpenAIServerSpec(kind="openai", url="http://127.0.0.1:9", model_name="served")
    b = create("srv", spec, str(folder), None, None)
    assert b.model == "served" and b.model_folder() == folder and b.context_size() == 512
    assert b.identity()["model"] == "served" and b.identity()["source"] == str(folder)
    plain = create(
        "srv", OpenAIServerSpec(kind="openai", url="http://127.0.0.1:9"), str(folder), None, None
    )
    assert plain.model == str(folder) and "source" not in plain.identity()


@pytest.mark.asyncio
async def test_completions_with_a_model_name_render_the_source_folders_template(
    tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    """endpoint-parity's completions path: the chat template of the source folder rendered,
    the request naming the served model (before: "cannot render the chat template ... the
    model 'served' is not a local folder")."""
    from pytest_infercheck.backends.openai_compat import create
    from pytest_infercheck.backends.spec import OpenAIServerSpec
    from tests.integration.served import chat_model

    folder = chat_model(tiny_models["bf16"], tmp_path / "chat")
    script = Script([Reply(body=LEGACY)])
    with fake_server(script) as url:
        spec = OpenAIServerSpec(kind="openai", url=url, model_name="served", retries=0)
        b = create("srv", spec, str(folder), None, None)
        prompt = await b.render("12+34=", None, False)
        gen = await b.generate_via("completions", prompt, GenerationParams(2))
        await b.aclose()
    assert gen.prompt_text == "<s>12+34="
    sent = script.requests[-1]["json"]
    assert sent["prompt"] == "<s>12+34=" and sent["model"] == "served"


def _entry(token: str, token_id: int, logprob: float, top: list[tuple[str, int, float]]) -> Any:
    return {
        "token": token,
        "id": token_id,
        "logprob": logprob,
        "top_logprobs": [{"token": t, "id": i, "logprob": v} for t, i, v in top],
    }


def test_a_servers_ids_are_used_only_when_its_top_k_lists_are_sorted() -> None:
    """mlx_lm.server 0.32.2's shape, measured: "46" generated, each top-k list unsorted and
    the chosen entry copied from its first element ("5"). Its ids are not the generated
    tokens, so the generation keeps none and stays text-keyed (the unsorted lists remain a
    fault); the same answer with sorted lists keeps the server's ids."""
    top = [("5", 56, -9.94), ("4", 55, -0.01), ("3", 54, -12.0)]
    unsorted = {"content": [_entry("5", 56, -9.94, top)]}
    generation = text_generation("4", None, "length", unsorted)
    assert generation.token_ids is None
    assert generation.top_keys == "text"
    assert generation.top_logprobs == [{"5": -9.94, "4": -0.01, "3": -12.0}]
    faults = [f.fault for f in generation_faults("run 0", generation)]
    assert faults == ["top-k logprobs not sorted"]

    ordered = sorted(top, key=lambda t: -t[2])
    sorted_answer = {"content": [_entry("4", 55, -0.01, ordered)]}
    kept = text_generation("4", None, "length", sorted_answer)
    assert kept.token_ids == [55]
    assert kept.top_keys == "id"
    assert kept.top_logprobs == [{55: -0.01, 56: -9.94, 54: -12.0}]
    assert generation_faults("run 0", kept) == []


def test_a_raw_stream_keeps_its_legacy_logprobs() -> None:
    """``/v1/completions`` streamed: each chunk's legacy lists, joined in order, are the
    logprobs of the whole answer (they were dropped: only chat's ``content`` was read)."""
    from pytest_infercheck.backends.openai_compat import assemble_chunks

    def chunk(token: str, logprob: float, top: dict[str, float], finish: Any = None) -> Any:
        logprobs = {"tokens": [token], "token_logprobs": [logprob], "top_logprobs": [top]}
        return {"choices": [{"text": token, "logprobs": logprobs, "finish_reason": finish}]}

    chunks = [
        chunk("4", -0.25, {"4": -0.25, "5": -1.5}),
        chunk("6", -0.5, {"6": -0.5, "7": -1.0}, "length"),
        {"choices": [], "usage": {"completion_tokens": 2}},
    ]
    generation = assemble_chunks(chunks, chat=False)
    assert generation.text == "46" and generation.finish_reason == "length"
    assert generation.chosen_logprobs == [-0.25, -0.5]
    assert generation.top_logprobs == [{"4": -0.25, "5": -1.5}, {"6": -0.5, "7": -1.0}]
    assert generation.token_texts == ["4", "6"]


def test_logprobs_false_asks_for_none_and_says_why() -> None:
    """``logprobs: false`` on a backend: nothing negotiated, no logprob field in a request,
    and a text-only comparison names the matrix setting."""
    import asyncio

    from pytest_infercheck.backends.openai_compat import create_served
    from pytest_infercheck.backends.spec import OpenAIServerSpec

    spec = OpenAIServerSpec(kind="openai", url="http://127.0.0.1:9", chat=False, logprobs=False)
    backend = create_served(OpenAICompatBackend, "srv", spec, "/models/m", None)
    negotiation = asyncio.run(backend.negotiate_logprobs(False))
    assert negotiation.shape is None
    reason = backend.logprob_unavailable_reason()
    assert reason is not None and "logprobs: false in the matrix" in reason
    body = backend._payload(PromptInput("1+1=", None, templated=False), GenerationParams(4))
    assert "logprobs" not in body and "top_logprobs" not in body
    asyncio.run(backend.aclose())
