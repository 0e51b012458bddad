"""The realistic models (real tokenizers and chat templates, random weights) on the real
engines: what the byte-level tiny models cannot show.

- The realistic Qwen3 (qwen35 vocabulary, 151,936 ids, the Qwen3 template) generates in
  mlx-lm in-process, llama-server and vllm-mlx.
- mlx-lm float32 and llama-server (``-fa off -ctk f32 -ctv f32``), fed the same prompt ids,
  generate the same tokens on every prompt of ``tokenizer-edge``; llama-server's ``/tokenize``
  of each rendered prompt equals the in-process ids; llama-server's UTF-8 gap (no probability
  entry for a token that ends inside a character) does not shift later positions.
- Thinking suppression with the real Qwen3 template: the empty think block in-process,
  through llama-server's ``/apply-template`` and, by prompt token count, through vllm-mlx
  (streamed usage; its non-streamed usage re-renders the template without
  ``chat_template_kwargs``: a vllm-mlx 0.6.0 bug pinned here) and mlx_lm.server.
- BOS with the Llama 3 tokenizer: exactly one ``<|begin_of_text|>`` in the ids each backend
  sends (``/apply-template`` drops the template's BOS; the backend's render adds it back).
- Llama 3.1's special tokens in the realistic Llama 3: a tool conversation rendered by mlx-lm's
  tokenizer (``<|python_tag|>``, ``<|eom_id|>``, headers, turns) tokenizes on llama-server to
  the same ids, each special token one id at Llama 3.1's id, and llama-server renders the
  same conversation to the same text; both end generation on Llama 3.1 Instruct's end ids
  (128001, 128008, 128009) and on no other special token.
- Text that spells special tokens is parsed as the special token by both tokenizers.
- Teacher-forced KL at V = 151,936 through the plugin: the model against itself (0) and
  against its 8-bit quantization (finite, positive, rows normalised).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import gguf
import httpx
import numpy as np
import pytest

from conftest import MODELS_CACHE, load_example
from pytest_infercheck.backends import GenerationParams
from pytest_infercheck.backends.base import Generation, PromptInput
from pytest_infercheck.backends.http import HttpSettings
from pytest_infercheck.backends.llama_server import LlamaServerBackend
from pytest_infercheck.backends.mlx_lm import MlxLmBackend, MlxModelSpec
from pytest_infercheck.suites import Prompt, load_suite
from tests.plugin.conftest import INI
from tests.unit.test_realistic_tokenizers import (
    ADD,
    BUILTIN_TOOLS,
    LLAMA31_END_IDS,
    LLAMA31_SPECIAL,
    expected_special_ids,
    render_tool_conversation,
    tool_conversation,
)

T = TypeVar("T")

THINK_OFF = "<think>\n\n</think>\n\n"
"""What the Qwen3 template appends to the generation prompt with ``enable_thinking: false``."""
IM_START = 151644
THINK = 151667
PROMOTED_EOS = 128247
"""``</s>`` in Qwen's vocabulary: NORMAL, but llama.cpp makes it CONTROL (an end-of-generation
token by its spelling)."""
BEGIN_OF_TEXT = 128000
LOGPROB_TOLERANCE = 1e-3
"""Largest |chosen logprob difference| accepted between mlx-lm float32 and llama-server f32.
Measured 3.6e-4 over the 1,570 compared positions of tokenizer-edge (66 prompts x 24 tokens,
minus the UTF-8 gaps): float32 sums over 151,936 logits, where the byte-level model's 259
gave 2.4e-6. A misaligned position compares two different tokens' logprobs (differences of
order 0.1 and more)."""


def in_process(model: Any) -> MlxLmBackend:
    """mlx-lm in this process on ``model``'s folder, computing in float32."""
    return MlxLmBackend("mlx", MlxModelSpec(str(model.path), dtype="float32"))


def with_llama(url: str, work: Callable[[LlamaServerBackend], Awaitable[T]], chat: bool) -> T:
    """``work(backend)`` on a ready llama-server backend (closed afterwards)."""

    async def run() -> T:
        backend = LlamaServerBackend("llama", HttpSettings(base_url=url), chat=chat)
        try:
            await backend.ensure_ready()
            return await work(backend)
        finally:
            await backend.aclose()

    return asyncio.run(run())


def suite_prompts() -> list[Prompt]:
    return list(load_suite("tokenizer-edge", Path.cwd()).prompts)


# --------------------------------------------------------------------------- tokenizer-edge


@dataclass(frozen=True)
class EdgeRun:
    """One tokenizer-edge prompt: the in-process render and both engines' generations."""

    prompt_id: str
    ids: tuple[int, ...]
    server_ids: tuple[int, ...]
    """llama-server's ``/tokenize`` of the rendered text (``parse_special``)."""
    mlx: Generation
    llama: Generation


@pytest.fixture(scope="module")
def edge_runs(realistic_qwen: Any, realistic_qwen_llama: str) -> list[EdgeRun]:
    """Every tokenizer-edge prompt rendered in-process (thinking off), generated greedily by
    mlx-lm float32 and, from the same ids, by llama-server."""
    mlx = in_process(realistic_qwen)
    prompts = suite_prompts()
    renders = [mlx.render_sync(p.text, p.system, thinking=False) for p in prompts]
    mlx_runs = [
        mlx.generate_sync(r, GenerationParams(max_tokens=p.max_tokens or 24))
        for p, r in zip(prompts, renders, strict=True)
    ]

    async def serve(llama: LlamaServerBackend) -> list[tuple[list[int], Generation]]:
        out = []
        for p, r in zip(prompts, renders, strict=True):
            server_ids = await llama.tokenize(r.text)
            sent = PromptInput(r.text, r.token_ids, True)
            out.append(
                (server_ids, await llama.generate(sent, GenerationParams(p.max_tokens or 24)))
            )
        return out

    served = with_llama(realistic_qwen_llama, serve, chat=False)
    return [
        EdgeRun(p.id, tuple(r.token_ids or ()), tuple(s_ids), m, g)
        for p, r, m, (s_ids, g) in zip(prompts, renders, mlx_runs, served, strict=True)
    ]


def test_tokenizer_edge_has_the_prompts_it_promises(edge_runs: list[EdgeRun]) -> None:
    assert len(edge_runs) >= 60
    assert all(len(run.ids) > 10 for run in edge_runs)


def test_llama_server_tokenizes_every_rendered_prompt_as_mlx_lm(
    edge_runs: list[EdgeRun],
) -> None:
    """Same tokenizer, real vocabulary: the rendered text (template, special tokens spelled in
    user text, scripts, emoji, marks) gives the same ids in both, except where the user text
    spells ``</s>``: a NORMAL token of Qwen's vocabulary (id 128247) that llama.cpp promotes to
    CONTROL at load ("control-looking token ... its type will be overridden") and so parses
    from text as one token, where the HF tokenizer spells it ``</``, ``s``, ``>`` (a property
    of the two tokenizers, named, not a bug of either)."""
    differ = {run.prompt_id: run for run in edge_runs if run.server_ids != run.ids}
    spells_eos = {p.id for p in suite_prompts() if "</s>" in p.text}
    assert set(differ) == spells_eos
    for run in differ.values():
        assert PROMOTED_EOS in run.server_ids and PROMOTED_EOS not in run.ids


def test_same_ids_give_identical_tokens(
    edge_runs: list[EdgeRun], record_property: Callable[[str, object], None]
) -> None:
    differ = [run.prompt_id for run in edge_runs if run.mlx.token_ids != run.llama.token_ids]
    tokens = sum(len(run.mlx.token_ids or []) for run in edge_runs)
    record_property("prompts", len(edge_runs))
    record_property("generated_tokens", tokens)
    assert differ == [], f"{len(differ)} of {len(edge_runs)} prompts differ"
    assert tokens >= 20 * len(edge_runs)


def logprob_differences(run: EdgeRun) -> list[float]:
    """|mlx - llama| of each position's chosen logprob (NaN where llama-server left the
    position's entry out)."""
    ours, theirs = run.mlx.chosen_logprobs or [], run.llama.chosen_logprobs or []
    assert len(ours) == len(theirs) == len(run.mlx.token_ids or [])
    return [abs(a - b) for a, b in zip(ours, theirs, strict=True)]


def test_chosen_logprobs_agree_at_every_reported_position(
    edge_runs: list[EdgeRun], record_property: Callable[[str, object], None]
) -> None:
    diffs = [d for run in edge_runs for d in logprob_differences(run) if not math.isnan(d)]
    worst = max(diffs)
    record_property("max_abs_logprob_difference", worst)
    print(
        f"\ntokenizer-edge: {len(edge_runs)} prompts, {len(diffs)} compared positions, "
        f"max |logprob difference| {worst:.3g}"
    )
    assert worst < LOGPROB_TOLERANCE


def test_utf8_gap_keeps_later_positions_aligned(
    edge_runs: list[EdgeRun], realistic_qwen_llama: str
) -> None:
    """A generated token that ends inside a UTF-8 character has no probability entry in
    llama-server's answer: that position is NaN and every later one still matches mlx-lm's
    logprob for the same token (a shifted alignment would compare other tokens' logprobs)."""
    gapped = [run for run in edge_runs if any(map(math.isnan, logprob_differences(run)))]
    assert gapped, "no tokenizer-edge generation ended a token inside a UTF-8 character"
    for run in gapped:
        diffs = logprob_differences(run)
        first = next(i for i, d in enumerate(diffs) if math.isnan(d))
        later = [d for d in diffs[first + 1 :] if not math.isnan(d)]
        assert later and max(later) < LOGPROB_TOLERANCE, run.prompt_id
    run = gapped[0]
    answer = httpx.post(
        f"{realistic_qwen_llama}/completion",
        json={
            "prompt": list(run.ids),
            "n_predict": len(run.mlx.token_ids or []),
            "temperature": 0,
            "n_probs": 1,
            "return_tokens": True,
            "cache_prompt": False,
        },
        timeout=60,
    ).json()
    gaps = sum(map(math.isnan, logprob_differences(run)))
    assert answer["tokens"] == run.mlx.token_ids
    assert len(answer["completion_probabilities"]) == len(answer["tokens"]) - gaps


# --------------------------------------------------------------------------- engines


def test_realistic_qwen_generates_in_every_engine(
    realistic_qwen: Any, realistic_qwen_llama: str, realistic_qwen_vllm: str
) -> None:
    mlx = in_process(realistic_qwen)
    rendered = mlx.render_sync("Bonjour, 世界! 👋🏽", None, thinking=False)
    ours = mlx.generate_sync(rendered, GenerationParams(max_tokens=8))
    assert ours.token_ids is not None and len(ours.token_ids) == 8

    async def generate(llama: LlamaServerBackend) -> Generation:
        return await llama.generate(rendered, GenerationParams(max_tokens=8))

    assert with_llama(realistic_qwen_llama, generate, chat=False).token_ids == ours.token_ids
    answer = httpx.post(
        f"{realistic_qwen_vllm}/v1/completions",
        json={
            "model": str(realistic_qwen.path),
            "prompt": rendered.text,
            "max_tokens": 8,
            "temperature": 0,
        },
        timeout=120,
    ).json()
    assert answer["usage"]["prompt_tokens"] == len(rendered.token_ids or ())
    assert answer["usage"]["completion_tokens"] == 8
    # vllm-mlx strips the answer's surrounding whitespace (``api/utils.clean_output_text``):
    # this model's first token starts with a space, which the tokens agree on.
    assert answer["choices"][0]["text"] == ours.text.strip()
    assert ours.text != ours.text.strip()  # the stripping is exercised, not assumed


# --------------------------------------------------------------------------- thinking


MESSAGE = "Is 17 prime?"


def test_thinking_off_ends_with_the_empty_think_block(
    realistic_qwen: Any, realistic_qwen_llama: str
) -> None:
    mlx = in_process(realistic_qwen)
    off = mlx.render_sync(MESSAGE, None, thinking=False)
    on = mlx.render_sync(MESSAGE, None, thinking=True)
    assert off.text.endswith("<|im_start|>assistant\n" + THINK_OFF)
    assert on.text.endswith("<|im_start|>assistant\n")
    assert off.text == on.text + THINK_OFF

    async def renders(llama: LlamaServerBackend) -> tuple[PromptInput, PromptInput]:
        return (
            await llama.render(MESSAGE, None, thinking=False),
            await llama.render(MESSAGE, None, thinking=True),
        )

    server_off, server_on = with_llama(realistic_qwen_llama, renders, chat=True)
    assert (server_off.text, server_off.token_ids) == (off.text, off.token_ids)
    assert (server_on.text, server_on.token_ids) == (on.text, on.token_ids)


def vllm_chat(url: str, model: Any, thinking: bool, stream: bool) -> dict[str, Any]:
    """A greedy chat request to vllm-mlx; its usage (from the last streamed event when
    streaming) and the text."""
    body: dict[str, Any] = {
        "model": str(model.path),
        "messages": [{"role": "user", "content": MESSAGE}],
        "max_tokens": 4,
        "temperature": 0,
        "chat_template_kwargs": {"enable_thinking": thinking},
    }
    if not stream:
        answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120).json()
        return {"usage": answer["usage"], "text": answer["choices"][0]["message"]["content"]}
    body |= {"stream": True, "stream_options": {"include_usage": True}}
    usage: dict[str, Any] = {}
    text: list[str] = []
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as reply:
        for line in reply.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: ") :])
            usage = event.get("usage") or usage
            for choice in event.get("choices") or []:
                text.append((choice.get("delta") or {}).get("content") or "")
    return {"usage": usage, "text": "".join(text)}


def test_vllm_mlx_counts_the_think_block_in_streamed_usage(
    realistic_qwen: Any, realistic_qwen_vllm: str
) -> None:
    mlx = in_process(realistic_qwen)
    off = mlx.render_sync(MESSAGE, None, thinking=False).token_ids or ()
    on = mlx.render_sync(MESSAGE, None, thinking=True).token_ids or ()
    assert len(off) - len(on) == 4  # "<think>", "\n\n", "</think>", "\n\n"
    for thinking, ids in ((False, off), (True, on)):
        got = vllm_chat(realistic_qwen_vllm, realistic_qwen, thinking, stream=True)
        assert got["usage"]["prompt_tokens"] == len(ids), f"enable_thinking={thinking}"


def test_mlx_lm_server_counts_the_think_block(
    realistic_qwen: Any, realistic_qwen_mlx_server: str
) -> None:
    mlx = in_process(realistic_qwen)
    for thinking in (False, True):
        ids = mlx.render_sync(MESSAGE, None, thinking=thinking).token_ids or ()
        answer = httpx.post(
            f"{realistic_qwen_mlx_server}/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": MESSAGE}],
                "max_tokens": 2,
                "temperature": 0,
                "chat_template_kwargs": {"enable_thinking": thinking},
            },
            timeout=120,
        ).json()
        assert answer["usage"]["prompt_tokens"] == len(ids), f"enable_thinking={thinking}"


def test_vllm_mlx_non_streamed_usage_ignores_chat_template_kwargs(
    realistic_qwen: Any, realistic_qwen_vllm: str
) -> None:
    """vllm-mlx 0.6.0 bug: the simple engine's non-streamed chat generates from the prompt
    with the think block (same text as streamed) but counts ``usage.prompt_tokens`` on a
    second render without ``chat_template_kwargs``: the thinking-on count for both."""
    on = in_process(realistic_qwen).render_sync(MESSAGE, None, thinking=True).token_ids or ()
    streamed = vllm_chat(realistic_qwen_vllm, realistic_qwen, False, stream=True)
    plain = vllm_chat(realistic_qwen_vllm, realistic_qwen, False, stream=False)
    assert plain["text"] == streamed["text"]
    assert plain["usage"]["prompt_tokens"] == len(on) != streamed["usage"]["prompt_tokens"]


# --------------------------------------------------------------------------- BOS


def test_llama3_prompts_carry_exactly_one_bos(
    realistic_llama3: Any, realistic_llama3_llama: str
) -> None:
    """The Llama 3.1 template starts with ``{{ bos_token }}`` and the tokenizer adds BOS too:
    in-process chat render (template text, ids without special tokens added), in-process raw
    render (the tokenizer's BOS, spelled out in the text), llama-server's chat render
    (``/apply-template`` drops the BOS, the server's tokenizer adds it) and raw render."""
    mlx = in_process(realistic_llama3)
    chat = mlx.render_sync("Hi there", None, thinking=False)
    raw = MlxLmBackend("raw", mlx.spec, chat=False).render_sync("Hi there", None, False)

    async def server_side(llama: LlamaServerBackend) -> tuple[str, PromptInput, bool]:
        applied = await llama._apply_template(PromptInput("Hi there", None, True))
        rendered = await llama.render("Hi there", None, thinking=False)
        return applied, rendered, await llama.accepts_token_ids(raw)

    applied, server_chat, accepts_raw = with_llama(realistic_llama3_llama, server_side, True)
    assert chat.text.startswith("<|begin_of_text|><|start_header_id|>system")
    assert not applied.startswith("<|begin_of_text|>")  # what llama-server's template gives
    for name, ids, text in (
        ("in-process chat", chat.token_ids, chat.text),
        ("in-process raw", raw.token_ids, raw.text),
        ("llama-server chat", server_chat.token_ids, server_chat.text),
    ):
        assert ids is not None and ids[0] == BEGIN_OF_TEXT, name
        assert ids.count(BEGIN_OF_TEXT) == 1, name
        assert text.startswith("<|begin_of_text|>"), name
        assert text.count("<|begin_of_text|>") == 1, name
    assert accepts_raw  # the raw render's text tokenizes to its ids on the server


def test_llama31_tool_conversation_tokenizes_alike_with_one_id_per_special_token(
    realistic_llama3: Any, realistic_llama3_llama: str
) -> None:
    """The Llama 3.1 template on a conversation with a custom and a built-in tool call and
    their results, rendered by mlx-lm's tokenizer of the model folder: its ids hold each
    special token as one id at Llama 3.1's id (``<|python_tag|>`` 128010, ``<|eom_id|>``
    128008, ...). llama-server's ``/tokenize`` (``parse_special``) of the text gives the same
    ids; llama-server's own render of the same conversation (OpenAI messages, arguments as
    JSON text, ``builtin_tools`` and the template's default date as ``chat_template_kwargs``)
    is the same text without the BOS, and with the BOS it adds the same ids; ``/detokenize``
    spells the special ids by Llama 3.1's names."""
    tokenizer = in_process(realistic_llama3)._loaded.tokenizer
    text = render_tool_conversation(tokenizer)
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    assert "<|python_tag|>" in text and "<|eom_id|>" in text
    assert [i for i in ids if i >= BEGIN_OF_TEXT] == expected_special_ids(text)
    names = sorted(LLAMA31_SPECIAL.items(), key=lambda item: item[1])
    messages = tool_conversation()
    for message in messages:
        for call in message.get("tool_calls", []):
            call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
    body = {
        "messages": messages,
        "tools": [ADD.openai()],
        "chat_template_kwargs": {"builtin_tools": BUILTIN_TOOLS, "date_string": "26 Jul 2024"},
        "add_generation_prompt": True,
    }

    async def server(llama: LlamaServerBackend) -> tuple[list[int], str, list[int], list[str]]:
        applied = await llama.http.request("POST", "/apply-template", body)
        prompt = str(applied["prompt"])
        spelled = [await llama.detokenize([i]) for _, i in names]
        own_ids = await llama._tokenize(prompt, add_special=True)
        return await llama.tokenize(text), prompt, own_ids, spelled

    server_ids, prompt, own_ids, spelled = with_llama(realistic_llama3_llama, server, chat=False)
    assert server_ids == ids
    assert "<|begin_of_text|>" + prompt == text
    assert own_ids == ids
    assert spelled == [name for name, _ in names]


def test_llama31_end_ids_end_generation_in_mlx_lm_and_llama_server(
    realistic_llama3: Any, realistic_llama3_llama: str
) -> None:
    """mlx-lm ends on the config's end ids; llama-server on the ids it takes as end of
    generation by their spelling (``<|end_of_text|>``, ``<|eom_id|>``, ``<|eot_id|>``): a
    greedy completion forced onto each end id stops after it, one forced onto
    ``<|python_tag|>`` (special, not an end) runs to ``n_predict``."""
    tokenizer = in_process(realistic_llama3)._loaded.tokenizer
    assert sorted(tokenizer.eos_token_ids) == LLAMA31_END_IDS == list(realistic_llama3.eos_ids)

    def forced(token: int) -> dict[str, Any]:
        answer: dict[str, Any] = httpx.post(
            f"{realistic_llama3_llama}/completion",
            json={
                "prompt": "Hello",
                "n_predict": 3,
                "temperature": 0,
                "logit_bias": [[token, 1000.0]],
                "return_tokens": True,
                "cache_prompt": False,
            },
            timeout=60,
        ).json()
        return answer

    for end in LLAMA31_END_IDS:
        answer = forced(end)
        assert (answer["stop_type"], answer["tokens"]) == ("eos", [end]), end
    tag = forced(LLAMA31_SPECIAL["<|python_tag|>"])
    assert tag["stop_type"] == "limit" and len(tag["tokens"]) == 3


@pytest.mark.parametrize("chat", [False, True], ids=["raw", "chat"])
@pytest.mark.parametrize("vocabulary", ["qwen", "llama3"])
def test_a_llama_server_render_is_the_exact_string_of_its_ids(
    vocabulary: str, chat: bool, request: pytest.FixtureRequest
) -> None:
    """A render tokenizes once (``add_special``) and spells the BOS into its text when the
    server adds exactly one token in front, which it learns once by tokenizing "0" both ways.
    That rests on llama.cpp adding its special tokens around the same tokens whatever the
    text; pinned here on every tokenizer-edge prompt of a vocabulary that adds a BOS (Llama 3)
    and one that adds none (Qwen): both tokenizations of each render, and the render's text
    tokenized back (``parse_special``, nothing added) to exactly its ids."""
    url = request.getfixturevalue(f"realistic_{vocabulary}_llama")
    texts = [p.text for p in suite_prompts()]

    async def check(llama: LlamaServerBackend) -> tuple[bool, list[str]]:
        bos = str(llama.props.get("bos_token", "")) if llama._adds_bos_only else ""
        wrong = []
        for text in texts:
            rendered = await llama.render(text, None, thinking=False)
            if not rendered.text.startswith(bos):
                wrong.append(f"{text!r}: the render does not spell the BOS")
            body = rendered.text[len(bos) :]  # what the server tokenized
            special = await llama._tokenize(body, add_special=True)
            plain = await llama._tokenize(body, add_special=False)
            if (special[1:] == plain and len(special) == len(plain) + 1) != llama._adds_bos_only:
                wrong.append(f"{text!r}: add_special added {special[:2]} ... to {plain[:2]} ...")
            if await llama.tokenize(rendered.text) != list(rendered.token_ids or ()):
                wrong.append(f"{text!r}: the render's text does not tokenize to its ids")
        return llama._adds_bos_only, wrong

    adds_bos, wrong = with_llama(url, check, chat)
    assert adds_bos is (vocabulary == "llama3")
    assert wrong == []


# --------------------------------------------------------------------------- special tokens


def test_special_tokens_in_user_text_are_parsed_alike(
    realistic_qwen: Any, realistic_qwen_llama: str
) -> None:
    mlx = in_process(realistic_qwen)
    texts = [p.text for p in suite_prompts() if p.category == "special-tokens"]

    async def tokenize(llama: LlamaServerBackend) -> list[list[int]]:
        return [await llama.tokenize(t) for t in texts]

    theirs = with_llama(realistic_qwen_llama, tokenize, chat=False)
    ours = [asyncio.run(mlx.tokenize(t)) for t in texts]
    for text, a, b in zip(texts, ours, theirs, strict=True):
        if "</s>" in text:  # llama.cpp's promoted EOS: see the tokenize test above
            assert PROMOTED_EOS in b and PROMOTED_EOS not in a, text
        else:
            assert a == b, text
    spelled = texts.index("What does <|im_start|> mean in a chat template?")
    assert IM_START in ours[spelled]


# --------------------------------------------------------------------------- GGUF vocabulary


def gguf_token_types(path: Path, ids: list[int]) -> dict[int, tuple[str, int]]:
    """``{id: (token, type)}`` for ``ids`` of a GGUF, read from the field parts directly."""
    reader = gguf.GGUFReader(path)
    tokens = reader.fields["tokenizer.ggml.tokens"]
    types = reader.fields["tokenizer.ggml.token_type"]
    return {
        i: (
            bytes(tokens.parts[tokens.data[i]]).decode("utf-8"),
            int(types.parts[types.data[i]][0]),
        )
        for i in ids
    }


def test_qwen_gguf_marks_added_and_unused_ids(realistic_qwen: Any) -> None:
    """The rule of llama.cpp's converter: special or ``<|...|>`` added tokens are CONTROL,
    other added tokens USER_DEFINED, ids no token uses UNUSED ``[PADn]``."""
    t = gguf.TokenType
    got = gguf_token_types(realistic_qwen.gguf, [198, IM_START, 151659, THINK, 151669, 151935])
    assert got == {
        198: ("\u010a", t.NORMAL),
        IM_START: ("<|im_start|>", t.CONTROL),
        151659: ("<|fim_prefix|>", t.CONTROL),  # not special in HF, but spelled <|...|>
        THINK: ("<think>", t.USER_DEFINED),
        151669: ("[PAD151669]", t.UNUSED),
        151935: ("[PAD151935]", t.UNUSED),
    }


# --------------------------------------------------------------------------- KL at 152k


@pytest.fixture(scope="module")
def realistic_qwen_q8(realistic_qwen: Any) -> Path:
    """The realistic Qwen3 quantized to 8 bits by mlx_lm.convert (group size 32)."""
    makers = load_example("make_models")
    target = MODELS_CACHE / "realistic" / "qwen3-s0-q8"
    stamp = makers._stamp(
        kind="q8", source_stamp=(realistic_qwen.path / ".infercheck-stamp.json").read_text()
    )

    def quantize(work: Path) -> None:
        makers._quantize_with_mlx_lm(realistic_qwen.path, work, 8, 32)

    path: Path = makers._build_atomically(target, stamp, quantize)
    return path


def test_teacher_forced_kl_at_full_qwen_vocabulary(
    pytester: pytest.Pytester, realistic_qwen: Any, realistic_qwen_q8: Path
) -> None:
    """``compare`` through the plugin at V = 151,936, in-process: the model against itself has
    KL exactly 0 at every position; against its 8-bit quantization every KL_t is finite and
    positive, no row fails normalisation, the item's mean and max are those of its
    positions, and position 0 of the first prompt equals KL(base || test) computed here with
    numpy over the whole vocabulary."""
    pytester.makefile(".ini", pytest=INI)
    prompts = suite_prompts()[::16]  # 5 prompts, one from each part of the suite
    rows = [{"id": p.id, "prompt": p.text, "max_tokens": 12} for p in prompts]
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    pytester.makefile(".jsonl", prompts="\n".join(lines))
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  f32: {{path: '{realistic_qwen.path}'}}\n"
        f"  same: {{path: '{realistic_qwen.path}'}}\n"
        f"  q8: {{path: '{realistic_qwen_q8}'}}\n"
        "suites: [prompts.jsonl]\nchecks:\n"
        "  - compare: {baseline: f32, test: same}\n    max_kl: 0.0\n"
        "  - compare: {baseline: f32, test: q8}\n    max_kl: 0.1\n",
    )
    result = pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "--infercheck-results=results.json"
    )
    assert result.parseoutcomes() == {"passed": 2 * (len(rows) + 1)}, result.stdout.str()
    items = json.loads((pytester.path / "results.json").read_text())["items"]
    data = {(i["check"], i["name"]): i["data"] for i in items if i["role"] == "prompt"}
    assert len(data) == 2 * len(rows)
    for row in rows:
        same = data["compare(f32-vs-same)", row["id"]]
        assert same["method"] == "teacher-forced" and same["problems"] == []
        assert same["kl_per_position"] == [0.0] * len(same["base_ids"])
        quant = data["compare(f32-vs-q8)", row["id"]]
        kl = quant["kl_per_position"]
        assert quant["method"] == "teacher-forced" and quant["problems"] == []
        assert len(kl) == len(quant["base_ids"]) > 0
        assert all(math.isfinite(k) and 0 < k < 0.1 for k in kl), kl
        assert quant["kl_mean"] == pytest.approx(sum(kl) / len(kl), rel=1e-12)
        assert quant["kl_max"] == max(kl)

    first = data["compare(f32-vs-q8)", rows[0]["id"]]
    base = MlxLmBackend("f32", MlxModelSpec(str(realistic_qwen.path)))
    test = MlxLmBackend("q8", MlxModelSpec(str(realistic_qwen_q8)))
    rendered = base.render_sync(prompts[0].text, None, thinking=False)
    ids = list(rendered.token_ids or ())
    p = base.score_sync(ids, first["base_ids"][:1])[0].astype(np.float64)
    q = test.score_sync(ids, first["base_ids"][:1])[0].astype(np.float64)
    assert p.shape == q.shape == (151_936,)
    # mlx's float32 logsumexp over 151,936 logits is off by about 2e-4 (numpy's pairwise
    # float32 sum: 4e-8), so the rows sum to 1 +- 2e-4: within normalisation's tolerance.
    assert abs(np.exp(p).sum() - 1) < 1e-3
    p, q = p - np.logaddexp.reduce(p), q - np.logaddexp.reduce(q)
    by_hand = float(np.sum(np.exp(p) * (p - q)))
    print(f"KL_0 plugin {first['kl_per_position'][0]:.8g}, numpy float64 {by_hand:.8g}")
    assert first["kl_per_position"][0] == pytest.approx(by_hand, rel=1e-2)
