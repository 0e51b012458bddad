"""``kind: sglang`` against SGLang's documented shapes: literal answers parsed by hand, and a
fake server (:mod:`.fake_sglang`) whose model the expectations are computed from. SGLang
itself cannot run here (CUDA builds only)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from pytest_infercheck.backends import GenerationParams
from pytest_infercheck.backends.base import BackendError, TopKRow
from pytest_infercheck.backends.http import HttpSettings
from pytest_infercheck.backends.sglang import (
    SglangBackend,
    assemble_events,
    input_rows,
    native_generation,
)

from .fake_sglang import ALPHABET, EOS, FakeSglang, Model, fake_sglang, model_folder

FAST = {"backoff_s": 0.01, "timeout_s": 5.0, "retries": 0}
V = len(ALPHABET)


def backend(url: str, folder: Path | None, **kwargs: object) -> SglangBackend:
    settings = HttpSettings(base_url=url, **FAST)  # type: ignore[arg-type]
    model = None if folder is None else str(folder)
    return SglangBackend("sg", settings, model=model, **kwargs)  # type: ignore[arg-type]


def greedy(model: Model, prompt: list[int], n: int) -> list[int]:
    """The fake model's greedy continuation of ``prompt``, by hand."""
    out: list[int] = []
    for _ in range(n):
        lps = model.logprobs([*prompt, *out])
        out.append(max(range(V), key=lambda v: (lps[v], -v)))
        if out[-1] == EOS:
            break
    return out


def top(lps: list[float], k: int) -> dict[int, float]:
    order = sorted(range(V), key=lambda v: (-lps[v], v))[:k]
    return {v: lps[v] for v in order}


# -- the documented shapes, parsed by hand ----------------------------------------------------


def test_a_generate_answer_is_read_by_id_with_its_eos() -> None:
    answer = {
        "text": "46",
        "output_ids": [52, 54, 0],
        "meta_info": {
            "finish_reason": {"type": "stop", "matched": 0},
            "prompt_tokens": 6,
            "completion_tokens": 3,
            "cached_tokens": 0,
            "output_token_logprobs": [[-0.5, 52, "4"], [-0.25, 54, "6"], [-1.0, 0, "</s>"]],
            "output_top_logprobs": [
                [[-0.5, 52, "4"], [-1.5, 53, "5"]],
                [[-0.25, 54, "6"]],
                [[-1.0, 0, "</s>"], [-1.25, 13, "-"]],
            ],
        },
    }
    gen = native_generation(answer)
    assert gen.text == "46" and gen.token_ids == [52, 54, 0] and gen.finish_reason == "stop"
    assert gen.chosen_logprobs == [-0.5, -0.25, -1.0] and gen.top_keys == "id"
    assert gen.top_logprobs == [{52: -0.5, 53: -1.5}, {54: -0.25}, {0: -1.0, 13: -1.25}]
    assert (gen.prompt_tokens, gen.completion_tokens) == (6, 3)
    length = {**answer, "meta_info": {**answer["meta_info"], "finish_reason": {"type": "length"}}}
    assert native_generation(length).finish_reason == "length"
    with pytest.raises(ValueError, match="differ from the logprob entries"):
        native_generation({**answer, "output_ids": [52, 55, 0]})
    aborted = {"type": "abort", "message": "out of memory"}
    with pytest.raises(ValueError, match="aborted: 'out of memory'"):
        native_generation({**answer, "meta_info": {"finish_reason": aborted}})


def test_teacher_forced_rows_are_the_last_entries_checked_by_id() -> None:
    # logprob_start_len = len(prompt) - 1: the prompt's last token, then the continuation.
    meta = {
        "input_token_logprobs": [[-2.0, 17, None], [-0.5, 52, None], [-0.25, 54, None]],
        "input_top_logprobs": [
            [[-1.0, 9, None]],
            [[-0.5, 52, None], [-1.0, 53, None]],
            [[-0.25, 54, None]],
        ],
    }
    assert input_rows(meta, [52, 54]) == [
        TopKRow(-0.5, {52: -0.5, 53: -1.0}),
        TopKRow(-0.25, {54: -0.25}),
    ]
    # An older server starts one later (no entry for the prompt's last token): same rows.
    older = {k: v[1:] for k, v in meta.items()}
    assert input_rows(older, [52, 54]) == input_rows(meta, [52, 54])
    # Position 0 has no distribution: None, which reads as NaN (a violation, never a pass).
    first = input_rows(
        {"input_token_logprobs": [[None, 1, None]], "input_top_logprobs": [None]}, [1]
    )
    assert math.isnan(first[0].chosen) and first[0].top == {}
    with pytest.raises(ValueError, match="do not match the continuation"):
        input_rows(meta, [53, 54])
    with pytest.raises(ValueError, match="3 input logprob entries and 3 top-k lists for 4"):
        input_rows(meta, [17, 17, 52, 54])


def test_cumulative_and_incremental_streams_assemble_alike() -> None:
    meta = {"finish_reason": {"type": "length"}, "completion_tokens": 2}
    entries = [[-0.5, 52, "4"], [-0.25, 54, "6"]]

    def event(text: str, ids: list[int], lps: list[list[object]], **extra: object) -> object:
        info = {**meta, "output_token_logprobs": lps, **extra}
        return {"text": text, "output_ids": ids, "meta_info": info}

    cumulative = [
        event("4", [52], entries[:1], completion_tokens=1),
        event("46", [52, 54], entries),
    ]
    incremental = [event("4", [52], entries[:1]), event("6", [54], entries[1:])]
    for events in (cumulative, incremental):
        gen = native_generation(assemble_events("sg", events))
        assert (gen.text, gen.token_ids, gen.chosen_logprobs) == ("46", [52, 54], [-0.5, -0.25])
    with pytest.raises(BackendError, match=r"'sg' \(sglang\): the stream \[\{'message': 'x'\}\]"):
        assemble_events("sg", [{"error": {"message": "x"}}])


# -- against the fake server ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_generate_sends_the_prompt_ids_and_reads_ids_and_top_k(tmp_path: Path) -> None:
    fake = FakeSglang(model_folder(tmp_path / "m"))
    with fake_sglang(fake) as url:
        b = backend(url, fake.folder)
        await b.ensure_ready()
        prompt = await b.render("12+34=", None, False)
        gen = await b.generate(prompt, GenerationParams(5))
        await b.aclose()
    ids = [ALPHABET.index(c) for c in "12+34="]
    assert prompt.token_ids == tuple(ids) and prompt.text == "12+34="
    expected = greedy(Model(), ids, 5)
    # This prompt's greedy continuation ends on the EOS at the fifth token: kept in the ids
    # (so teacher forcing scores the decision to stop), not in the text.
    assert gen.token_ids == expected and expected[-1] == EOS and len(expected) == 5
    assert gen.finish_reason == "stop"
    rows = [Model().logprobs([*ids, *expected[:t]]) for t in range(5)]
    assert gen.chosen_logprobs == [r[v] for r, v in zip(rows, expected, strict=True)]
    assert gen.top_logprobs == [top(r, 8) for r in rows]
    assert gen.text == "".join(ALPHABET[v] for v in expected[:-1])
    path, body = fake.requests[-1]
    assert path == "/generate" and body["input_ids"] == ids and "text" not in body
    assert body["sampling_params"] == {"max_new_tokens": 5, "temperature": 0.0}
    assert (body["return_logprob"], body["logprob_start_len"], body["top_logprobs_num"]) == (
        True,
        -1,
        8,
    )
    assert b.capabilities.teacher_forcing and b.capabilities.token_ids and b.n_vocab == V
    identity = b.identity()
    assert identity["version"] == "0.5.23-fake" and identity["model_path"] == str(fake.folder)


@pytest.mark.asyncio
async def test_scoring_is_teacher_forced_in_one_request(tmp_path: Path) -> None:
    fake = FakeSglang(model_folder(tmp_path / "m"))
    prompt, cont = [17, 18, 11], [20, 21, EOS]
    with fake_sglang(fake) as url:
        b = backend(url, fake.folder)
        await b.ensure_ready()
        rows = await b.score_top_k(prompt, cont)
        full = await b.score(prompt, cont)
        assert await b.score_top_k(prompt, []) == []
        await b.aclose()
    dists = [Model().logprobs([*prompt, *cont[:t]]) for t in range(3)]
    assert rows == [TopKRow(d[v], top(d, 8)) for d, v in zip(dists, cont, strict=True)]
    assert full.shape == (3, V) and full.dtype == np.float32
    assert np.array_equal(full, np.array(dists, dtype=np.float32))
    assert np.allclose(np.log(np.exp(full.astype(np.float64)).sum(axis=1)), 0.0, atol=1e-6)
    scoring = [body for path, body in fake.requests if path == "/generate"]
    assert scoring[0]["input_ids"] == prompt + cont
    assert scoring[0]["logprob_start_len"] == 2 and scoring[0]["top_logprobs_num"] == 8
    assert scoring[1]["top_logprobs_num"] == V and len(scoring) == 2


@pytest.mark.asyncio
async def test_an_older_server_scores_alike_and_a_misaligned_one_is_an_error(
    tmp_path: Path,
) -> None:
    folder = model_folder(tmp_path / "m")
    found = {}
    for fault in ("legacy_offset", "misaligned"):
        fake = FakeSglang(folder, **{fault: True})  # type: ignore[arg-type]
        with fake_sglang(fake) as url:
            b = backend(url, folder)
            await b.ensure_ready()
            try:
                found[fault] = await b.score_top_k([17, 18, 11], [20, 21])
            except BackendError as exc:
                found[fault] = str(exc)
            await b.aclose()
    dists = [Model().logprobs([17, 18, 11, *[20, 21][:t]]) for t in range(2)]
    assert found["legacy_offset"] == [
        TopKRow(d[v], top(d, 8)) for d, v in zip(dists, [20, 21], strict=True)
    ]
    assert found["misaligned"] == (
        "backend 'sg' (sglang): teacher-forced scoring: the input entries' ids [11, 20] do "
        "not match the continuation"
    )


@pytest.mark.asyncio
async def test_without_a_vocabulary_size_only_top_k_is_scored(tmp_path: Path) -> None:
    fake = FakeSglang(tmp_path / "absent")
    with fake_sglang(fake) as url:
        b = backend(url, None)
        await b.ensure_ready()
        assert b.n_vocab is None and not b.capabilities.teacher_forcing
        assert b.capabilities.top_k_logprobs == 8
        assert len(await b.score_top_k([17], [20])) == 1
        with pytest.raises(BackendError, match="cannot score teacher-forced"):
            await b.score([17], [20])
        await b.aclose()


@pytest.mark.asyncio
async def test_the_cache_is_flushed_at_readiness_and_cached_tokens_are_counted(
    tmp_path: Path,
) -> None:
    fake = FakeSglang(model_folder(tmp_path / "m"))
    with fake_sglang(fake) as url:
        b = backend(url, fake.folder)
        fake.cache.add((ALPHABET.index("1"),))  # left by an earlier run
        await b.ensure_ready()
        assert fake.flushes == 1 and not fake.cache
        prompt = await b.render("12+34=", None, False)
        await b.generate(prompt, GenerationParams(2))
        assert b.observed["cached_tokens"] == 0
        await b.generate(prompt, GenerationParams(2))
        assert b.observed["cached_tokens"] == 6  # the whole prompt, the second time
        assert b.identity()["observed"]["cache_flushed"] is True
        fake.busy = True
        with pytest.raises(BackendError, match=r"'sg' \(sglang\): POST /flush_cache -> HTTP 400"):
            await b.flush_cache()
        # A server busy with other clients' requests at readiness: said, not fatal.
        await b.ensure_ready()
        assert b.observed["cache_flushed"] == "refused: Cache not flushed: requests are running."
        await b.aclose()


@pytest.mark.asyncio
async def test_a_bos_is_spelled_out_and_ids_are_verified(tmp_path: Path) -> None:
    fake = FakeSglang(model_folder(tmp_path / "m"), bos=True)
    with fake_sglang(fake) as url:
        b = backend(url, fake.folder)
        await b.ensure_ready()
        prompt = await b.render("7+8=", "sys", False)
        assert prompt.text == "<s>sys\n\n7+8=" and prompt.token_ids is not None
        assert prompt.token_ids[0] == 1 and len(prompt.token_ids) == 1 + len("sys\n\n7+8=")
        assert await b.accepts_token_ids(prompt)
        wrong = (*prompt.token_ids[:-1], ALPHABET.index("9"))
        assert not await b.accepts_token_ids(type(prompt)(prompt.text, wrong, False))
        assert await b.token_pieces([1, 0, ALPHABET.index("7")]) == ["<s>", "</s>", "7"]
        assert await b.prompt_token_count(prompt) == len(prompt.token_ids)
        await b.aclose()


@pytest.mark.asyncio
async def test_the_stream_equals_the_generation(tmp_path: Path) -> None:
    for incremental in (False, True):
        fake = FakeSglang(model_folder(tmp_path / "m"), incremental=incremental)
        with fake_sglang(fake) as url:
            b = backend(url, fake.folder)
            await b.ensure_ready()
            prompt = await b.render("45+55=", None, False)
            whole = await b.generate(prompt, GenerationParams(4))
            streamed = await b.generate_stream(prompt, GenerationParams(4))
            await b.aclose()
        assert streamed.token_ids == whole.token_ids and streamed.text == whole.text
        assert streamed.chosen_logprobs == whole.chosen_logprobs
        assert streamed.top_logprobs == whole.top_logprobs


@pytest.mark.asyncio
async def test_server_errors_name_the_backend(tmp_path: Path) -> None:
    prompt_ids, params = [17, 18], GenerationParams(2)
    for fault, message in (
        ({"status": 500}, "backend 'sg': POST /generate -> HTTP 500: "),
        ({"malformed": True}, "backend 'sg': POST /generate returned malformed JSON"),
    ):
        fake = FakeSglang(model_folder(tmp_path / "m"), **fault)  # type: ignore[arg-type]
        with fake_sglang(fake) as url:
            b = backend(url, fake.folder)
            await b.ensure_ready()
            prompt = await b.render("1+1=", None, False)
            with pytest.raises(BackendError) as raised:
                await b.generate(prompt, params)
            assert str(raised.value).startswith(message)
            with pytest.raises(BackendError) as raised:
                await b.score_top_k(prompt_ids, [20])
            assert str(raised.value).startswith(message)
            await b.aclose()
    with fake_sglang(FakeSglang(tmp_path)) as url:
        dead = backend(url.rsplit(":", 1)[0] + ":9", None)
        assert not await dead.alive()
        with pytest.raises(BackendError, match=r"'sg' \(sglang\): /health did not answer 200"):
            await dead.ensure_ready()


# -- a diff through the plugin, against two fake servers --------------------------------------

DIFF = """\
models:
  fake: {{path: '{folder}'}}
backends:
  a: {{kind: sglang, url: '{a}', retries: 0}}
  b: {{kind: sglang, url: '{b}', retries: 0}}
suites: [addition.jsonl]
checks:
  - diff: {{model: fake, backends: [a, b]}}
    expect: budget
    max_kl: 0.001
"""


def kl(p: list[float], q: list[float]) -> float:
    """KL(p || q) in float64 from float32-rounded logprobs, as the plugin computes it."""
    p32, q32 = np.array(p, dtype=np.float32), np.array(q, dtype=np.float32)
    return float(np.sum(np.exp(p32.astype(np.float64)) * (p32.astype(np.float64) - q32)))


@pytest.mark.parametrize("perturb", [0.0, 0.05])
def test_a_diff_of_two_servers_is_teacher_forced(
    pytester: pytest.Pytester, tmp_path: Path, perturb: float
) -> None:
    import json

    from tests.plugin.helpers import ADDITION, suite_jsonl

    from .fake_sglang import tokenize

    folder = model_folder(tmp_path / "fake")
    base, other = FakeSglang(folder), FakeSglang(folder, perturb=perturb)
    pytester.makefile(".ini", pytest="[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makefile(".jsonl", addition=suite_jsonl())
    with fake_sglang(base) as a, fake_sglang(other) as b:
        pytester.makefile(".yaml", infercheck=DIFF.format(folder=folder, a=a, b=b))
        run = pytester.runpytest("-q", "-p", "no:cacheprovider", "--infercheck-results=r.json")
    items = json.loads((pytester.path / "r.json").read_text())["items"]
    compared = {i["data"]["prompt_id"]: i for i in items if i["role"] == "prompt"}
    assert sorted(compared) == sorted(pid for pid, _, _ in ADDITION)
    worst = 0.0
    for pid, text, _ in ADDITION:
        data = compared[pid]["data"]
        prompt = tokenize(text, True, False)
        expected = greedy(Model(), prompt, 5)
        assert data["base_ids"] == data["test_ids"] == expected, pid  # same argmax
        assert (data["method"], data["scoring"]) == ("teacher-forced", "separate"), pid
        # Each position's KL between the two models, by hand, after the baseline's tokens.
        kls = [
            kl(Model().logprobs([*prompt, *expected[:t]]), Model(perturb).logprobs(
                [*prompt, *expected[:t]]))
            for t in range(len(expected))
        ]  # fmt: skip
        assert data["kl_max"] == pytest.approx(max(kls), rel=1e-4, abs=1e-9), pid
        assert data["kl_mean"] == pytest.approx(sum(kls) / len(kls), rel=1e-4, abs=1e-9), pid
        worst = max(worst, data["kl_mean"])
    if perturb == 0.0:
        assert worst == 0.0
        run.assert_outcomes(passed=len(ADDITION) + 1)
    else:
        assert worst > 0.001
        assert run.ret == 1
        failed = {pid for pid, o in compared.items() if o["outcome"] == "failed"}
        assert failed == {pid for pid, o in compared.items() if o["data"]["kl_mean"] > 0.001}
        assert len(failed) == len(ADDITION)  # mean KL 0.0011-0.0014 on every prompt
    # Teacher forcing: one scoring request per side and prompt, each the baseline's ids.
    for fake in (base, other):
        scoring = [body for path, body in fake.requests if path == "/generate" and
                   body["top_logprobs_num"] == len(ALPHABET)]  # fmt: skip
        assert len(scoring) == len(ADDITION)
