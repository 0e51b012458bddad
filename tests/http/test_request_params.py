"""Request parameters on the wire: each backend sends what its engine takes, by its engine's
field names, and a greedy request's body is exactly what it was before the parameters
existed (against scripted servers that record every request)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from pytest_infercheck.backends.base import GenerationParams, PromptInput
from pytest_infercheck.backends.http import HttpSettings
from pytest_infercheck.backends.llama_server import LlamaServerBackend
from pytest_infercheck.backends.ollama import OllamaBackend
from pytest_infercheck.backends.openai_compat import OpenAICompatBackend, parse_choice
from pytest_infercheck.backends.sglang import SglangBackend
from pytest_infercheck.backends.vllm import VllmBackend
from pytest_infercheck.backends.vllm_mlx import VllmMlxBackend
from pytest_infercheck.backends.vllm_wire import id_generation, streamed_id_generation

from .fake_server import Reply, Script, chat_answer, fake_server

FAST = {"backoff_s": 0.01, "timeout_s": 2.0}
PROMPT = PromptInput("<s>1+2=", (1, 5, 6, 7, 8), False)
SAMPLED = GenerationParams(
    max_tokens=4,
    temperature=0.7,
    seed=3,
    top_p=0.9,
    presence_penalty=0.5,
    logit_bias=((7, -100.0), (5, 2.5)),
    stop=("\n", "=="),
    n=2,
    logprobs=3,
)


def settings(url: str) -> HttpSettings:
    return HttpSettings(base_url=url, **FAST)  # type: ignore[arg-type]


def llama_answer(tokens: list[int], text: str, stop: str = "limit") -> dict[str, Any]:
    return {
        "content": text,
        "tokens": tokens,
        "stop_type": stop,
        "tokens_evaluated": 5,
        "tokens_predicted": len(tokens),
        "completion_probabilities": [
            {"id": t, "logprob": -0.5, "top_logprobs": [{"id": t, "logprob": -0.5}]} for t in tokens
        ],
    }


def test_greedy_params_keep_their_key_and_fields() -> None:
    greedy = GenerationParams(max_tokens=8, temperature=0.0, seed=1)
    assert greedy.key() == (8, 0.0, 1)  # as before the parameters existed: goldens match
    assert greedy.written() == {} and greedy.asked() == ["seed"] and not greedy.sampled
    assert SAMPLED.key() != GenerationParams(4, 0.7, 3).key()
    assert SAMPLED.written() == {
        "top_p": 0.9,
        "presence_penalty": 0.5,
        "logit_bias": [[5, 2.5], [7, -100.0]],
        "stop": ("\n", "=="),
        "n": 2,
        "logprobs": 3,
    }
    # a dict bias and a tuple bias are one key (sorted by id), and params stay hashable
    same = GenerationParams(4, 0.7, 3, top_p=0.9, presence_penalty=0.5, stop=("\n", "=="), n=2)
    biased = GenerationParams(**{**same.__dict__, "logit_bias": {7: -100, 5: 2.5}, "logprobs": 3})
    assert biased.key() == SAMPLED.key() and hash(biased) == hash(SAMPLED)


@pytest.mark.asyncio
async def test_llama_server_sends_native_fields_and_neutral_truncations() -> None:
    script = Script([Reply(body=llama_answer([9, 2], "ab", "eos"))])
    with fake_server(script) as url:
        b = LlamaServerBackend("l", settings(url))
        greedy = await b.generate(PROMPT, GenerationParams(4))
        script.replies = [Reply(body=[llama_answer([9, 2], "ab"), llama_answer([3], "c")])]
        sampled = await b.generate(PROMPT, SAMPLED)
        await b.aclose()
    first, second = (r["json"] for r in script.requests)
    assert first == {  # greedy: exactly the body of before
        "prompt": [1, 5, 6, 7, 8],
        "n_predict": 4,
        "temperature": 0.0,
        "n_probs": 8,
        "return_tokens": True,
        "cache_prompt": False,
    }
    assert greedy.prompt_tokens == 5 and greedy.completion_tokens == 2
    assert second == {
        **first,
        "temperature": 0.7,
        "seed": 3,
        "n_probs": 3,
        "top_p": 0.9,
        "top_k": 0,  # llama.cpp defaults top_k 40, min_p 0.05: sent neutral when unasked
        "min_p": 0.0,
        "repeat_penalty": 1.0,
        "frequency_penalty": 0.0,
        "presence_penalty": 0.5,
        "logit_bias": [[5, 2.5], [7, -100.0]],
        "stop": ["\n", "=="],
        "n_cmpl": 2,
    }
    # n_cmpl > 1: a list of completions, the first is the generation, the rest its others
    assert sampled.token_ids == [9, 2] and [o.token_ids for o in sampled.others] == [[3]]


@pytest.mark.asyncio
async def test_openai_server_sends_openai_fields_and_reads_every_choice() -> None:
    answer = chat_answer("x")
    answer["choices"].append({**answer["choices"][0], "index": 1, "message": {"content": "y"}})
    answer["usage"] = {"prompt_tokens": 11, "completion_tokens": 2}
    script = Script([Reply(body=answer)])
    with fake_server(script) as url:
        b = OpenAICompatBackend("o", settings(url), model="m")
        b.no_logprobs = "not asked in this test"
        await b.ensure_ready()
        rendered = await b.render("1+2=", None, False)
        greedy = await b.generate(rendered, GenerationParams(4))
        sampled = await b.generate(rendered, SAMPLED)
        await b.aclose()
    first, second = (r["json"] for r in script.requests)
    assert set(first) == {
        "max_tokens",
        "temperature",
        "stream",
        "model",
        "messages",
        "chat_template_kwargs",
    }
    assert {k: v for k, v in second.items() if k not in first} == {
        "seed": 3,
        "top_p": 0.9,
        "top_k": 0,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "frequency_penalty": 0.0,
        "presence_penalty": 0.5,
        "logit_bias": {"5": 2.5, "7": -100.0},
        "stop": ["\n", "=="],
        "n": 2,
    }
    assert greedy.prompt_tokens == 11 and greedy.completion_tokens == 2
    assert sampled.text == "x" and [o.text for o in sampled.others] == ["y"]


@pytest.mark.asyncio
async def test_vllm_mlx_sends_only_what_it_takes_as_neutral() -> None:
    """vllm-mlx 0.6.0 ignores ``frequency_penalty``: not sent as a neutral value either."""
    script = Script([Reply(body=chat_answer("x"))])
    params = GenerationParams(4, temperature=1.0, top_k=5)
    with fake_server(script) as url:
        b = VllmMlxBackend("vm", settings(url), model="m")
        await b.generate(await b.render("1+2=", None, False), params)
        await b.aclose()
    sent = script.requests[-1]["json"]
    assert (sent["top_k"], sent["top_p"], sent["min_p"]) == (5, 1.0, 0.0)
    assert sent["presence_penalty"] == 0.0 and sent["repetition_penalty"] == 1.0
    assert "frequency_penalty" not in sent and "seed" not in sent


@pytest.mark.asyncio
async def test_vllm_completion_fields_and_choices() -> None:
    def choice(index: int, ids: list[int]) -> dict[str, Any]:
        return {
            "index": index,
            "text": "t",
            "finish_reason": "stop",
            "logprobs": {
                "tokens": [f"token_id:{i}" for i in ids],
                "token_logprobs": [-0.1] * len(ids),
                "top_logprobs": [{f"token_id:{i}": -0.1} for i in ids],
            },
        }

    answer = {"choices": [choice(0, [4, 2]), choice(1, [6])], "usage": {"prompt_tokens": 5}}
    script = Script([Reply(body=answer)])
    params = GenerationParams(4, 0.5, min_tokens=2, ignore_eos=True, include_stop=True, n=2)
    with fake_server(script) as url:
        b = VllmBackend("v", settings(url), model="m")
        gen = await b.generate(PROMPT, params)
        await b.aclose()
    sent = script.requests[-1]["json"]
    assert sent["min_tokens"] == 2 and sent["ignore_eos"] is True and sent["n"] == 2
    assert sent["include_stop_str_in_output"] is True and sent["top_k"] == 0
    assert gen.token_ids == [4, 2] and [o.token_ids for o in gen.others] == [[6]]
    assert gen.prompt_tokens == 5
    # a stream of two interleaved choices is assembled per index
    chunks = [
        {"choices": [choice(0, [4])]},
        {"choices": [choice(1, [6])]},
        {"choices": [choice(0, [2])]},
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}},
    ]
    streamed = streamed_id_generation(chunks)
    assert streamed.token_ids == [4, 2] and streamed.others[0].token_ids == [6]
    assert streamed.completion_tokens == 3
    assert id_generation(answer, chat=False).others[0].token_ids == [6]


@pytest.mark.asyncio
async def test_sglang_and_ollama_fields() -> None:
    script = Script([Reply(body={"text": "x", "output_ids": [3], "meta_info": {}})])
    params = GenerationParams(4, 0.5, min_tokens=1, top_k=3, stop=("z",), logprobs=2)
    with fake_server(script) as url:
        b = SglangBackend("sg", settings(url), model="m")
        with contextlib.suppress(Exception):  # a partial answer: the request is the point
            await b.generate(PROMPT, params)
        await b.aclose()
    sent = script.requests[-1]["json"]
    sampling = sent["sampling_params"]
    assert sampling["min_new_tokens"] == 1 and sampling["top_k"] == 3
    assert sampling["stop"] == ["z"] and sampling["top_p"] == 1.0
    assert sent["top_logprobs_num"] == 2
    answer = {"response": "x", "done": True, "done_reason": "stop"}
    script = Script([Reply(body=answer)])
    with fake_server(script) as url:
        o = OllamaBackend("ol", settings(url), model="m", chat=False)
        await o.generate(PROMPT, GenerationParams(4, 0.5, repetition_penalty=1.2, stop=("z",)))
        await o.aclose()
    options = script.requests[-1]["json"]["options"]
    assert options["repeat_penalty"] == 1.2 and options["stop"] == ["z"]
    assert options["top_k"] == 0 and options["min_p"] == 0.0


def test_parse_choice_reads_usage_once_and_every_choice() -> None:
    answer = {
        "choices": [
            {"index": 0, "text": "a", "finish_reason": "length"},
            {"index": 1, "text": "b", "finish_reason": "stop"},
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4},
    }
    gen = parse_choice(answer, chat=False)
    assert (gen.text, gen.finish_reason, gen.prompt_tokens, gen.completion_tokens) == (
        "a",
        "length",
        3,
        4,
    )
    assert [(o.text, o.finish_reason, o.completion_tokens) for o in gen.others] == [
        ("b", "stop", None)
    ]
