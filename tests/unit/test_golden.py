"""Golden files by hand: the lower-bound KL against hand-computed values, a deterministic
format that round-trips, refusals with the file and the difference named, and where a golden
may appear in the matrix."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_infercheck.backends import BackendError, Generation, GenerationParams, PromptInput
from pytest_infercheck.config import load_matrix
from pytest_infercheck.conversation import Conversation, GeneratedTurn, Message, Turn
from pytest_infercheck.generation_cache import GenerationCache, ResolvedTarget
from pytest_infercheck.golden import (
    GoldenBackend,
    GoldenError,
    dumps,
    golden_path,
    load_golden,
    make_entry,
    make_header,
    replay_problems,
    top_k_maps,
    top_k_rows,
    write_golden,
)
from pytest_infercheck.golden.writer import merge_payloads
from pytest_infercheck.metrics.kl import DEFAULT_MASS_TOL as D
from pytest_infercheck.metrics.topk_full import topk_vs_full_stats
from pytest_infercheck.suites import Prompt
from pytest_infercheck.yamlpos import SourceError

LN = math.log


# -- the lower bound -------------------------------------------------------------------------
def test_topk_vs_full_hand_computed() -> None:
    # position 0: golden top-2 {0: .6, 1: .3} (tail .1 to within D = 1e-3), test
    #   [.5, .25, .2, .05] (tail .25, summed); .25 / e = .092 < (.1 - D): x = (.1 - D)
    # position 1: golden top-1 {2: .7} (tail .3 to within D), test [.1, .6, .3, 0] (tail .7);
    #   .7 / e = .258 < (.3 - D): x = (.3 - D) -> argmaxes differ
    base_top = [{0: LN(0.6), 1: LN(0.3)}, {2: LN(0.7)}]
    test = np.log(np.array([[0.5, 0.25, 0.2, 0.05], [0.1, 0.6, 0.3, 1e-300]]))
    stats = topk_vs_full_stats(base_top, [LN(0.6), LN(0.7)], test, [0, 2])
    kl0 = 0.6 * LN(0.6 / 0.5) + 0.3 * LN(0.3 / 0.25) + (0.1 - D) * LN((0.1 - D) / 0.25)
    kl1 = 0.7 * LN(0.7 / 0.3) + (0.3 - D) * LN((0.3 - D) / 0.7)
    assert stats.kl == pytest.approx([kl0, kl1], abs=1e-12)
    assert stats.same_top.tolist() == [True, False]
    assert stats.delta_p == pytest.approx([0.5 - 0.6, 0.3 - 0.7], abs=1e-12)


def test_topk_vs_full_is_a_lower_bound_and_zero_on_identical() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 50))
    base = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    test_logits = logits + rng.normal(scale=0.3, size=logits.shape)
    test = test_logits - np.log(np.exp(test_logits).sum(axis=1, keepdims=True))
    ids = base.argmax(axis=1).tolist()
    top = [{v: float(row[v]) for v in np.argsort(-row)[:5]} for row in base]
    chosen = [float(base[t, i]) for t, i in enumerate(ids)]
    full = (np.exp(base) * (base - test)).sum(axis=1)
    bound = topk_vs_full_stats(top, chosen, test, ids).kl
    assert np.all(bound <= full + 1e-12) and np.all(bound > 0)
    same = topk_vs_full_stats(top, chosen, base, ids)
    assert np.allclose(same.kl, 0.0, atol=1e-12) and same.same_top.all()


def test_topk_vs_full_refuses_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="one top-k map"):
        topk_vs_full_stats([{0: 0.0}], [0.0], np.zeros((2, 3)), [0])


# -- the file --------------------------------------------------------------------------------
def test_top_k_rows_orders_by_logprob_then_id_and_rounds() -> None:
    rows = top_k_rows(np.array([[-1.0, -0.5, -0.5, -np.inf, -3.1234567891]]), 4)
    assert rows == [[[1, -0.5], [2, -0.5], [0, -1.0], [4, -3.123457]]]
    assert top_k_maps([{"a": -2.0, "b": -0.1, "c": -0.1}], 2) == [[["b", -0.1], ["c", -0.1]]]


def _entry(prompt_id: str, text: str, ids: list[int], max_tokens: int = 5) -> dict[str, Any]:
    rendered = PromptInput(f"<s>{text}", (1, *ids), False, "fp", None, False)
    generation = Generation("7", [9, 2], "stop", [-0.1, -0.01])
    top = [[[9, -0.1], [8, -2.5]], [[2, -0.01]]]
    return make_entry(
        suite="addition",
        prompt_id=prompt_id,
        asked=(text, None, False),
        rendered=rendered,
        params=GenerationParams(max_tokens),
        generation=generation,
        top=top,
        top_keys="id",
    )


def _header(**changes: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "name": "adder-v1",
        "target": "adder@local",
        "model": {"name": "adder", "path": "models/bf16"},
        "engine": {"kind": "mlx-lm", "mlx": "0.1"},
        "tokenizer": "fp",
        "top_k": 20,
    }
    return make_header(**{**fields, **changes})


def test_dumps_is_deterministic_json_one_line_per_prompt() -> None:
    a, b = _entry("s01", "3+4=", [5, 6]), _entry("s02", "1+1=", [7, 8])
    text = dumps(_header(), [b, a, a])
    assert text == dumps(_header(), [a, b])
    data = json.loads(text)
    assert [e["prompt_id"] for e in data["prompts"]] == ["s01", "s02"]
    assert data["format"] == "pytest-infercheck-golden" and data["version"] == 1
    prompt_lines = [line for line in text.splitlines() if line.startswith('  {"input"')]
    assert len(prompt_lines) == 2


@pytest.mark.parametrize("name", ["g.json", "g.json.gz"])
def test_write_load_replay_round_trip(tmp_path: Path, name: str) -> None:
    path = tmp_path / "goldens" / name
    entries = [_entry("s01", "3+4=", [5, 6])]
    write_golden(path, _header(), entries)
    first = path.read_bytes()
    write_golden(path, _header(), entries)
    assert path.read_bytes() == first  # gzip too: fixed mtime
    assert [p.name for p in path.parent.iterdir()] == [name]  # no temporary file left
    if name.endswith(".gz"):
        assert json.loads(gzip.decompress(first))["name"] == "adder-v1"
    golden = load_golden(path)
    rendered = golden.render("3+4=", None, False)
    assert rendered == PromptInput("<s>3+4=", (1, 5, 6), False, "fp", None, False)
    generation = golden.generation(rendered, GenerationParams(5))
    assert generation.token_ids == [9, 2] and generation.text == "7"
    assert generation.top_logprobs == [{9: -0.1, 8: -2.5}, {2: -0.01}]
    assert generation.chosen_logprobs == [-0.1, -0.01] and generation.finish_reason == "stop"


def test_replay_lookups_name_the_file_and_the_difference(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    write_golden(path, _header(), [_entry("s01", "3+4=", [5, 6])])
    golden = load_golden(path)
    with pytest.raises(GoldenError, match=r"g\.json: no recording of prompt '9\+9='"):
        golden.render("9+9=", None, False)
    rendered = golden.render("3+4=", None, False)
    with pytest.raises(GoldenError, match=r'recorded with params .*"max_tokens": 5.*not .*8'):
        golden.generation(rendered, GenerationParams(8))


def test_load_refuses_missing_foreign_and_newer_files(tmp_path: Path) -> None:
    with pytest.raises(GoldenError, match=r"no golden file .*--infercheck-record"):
        load_golden(tmp_path / "none.json")
    (tmp_path / "other.json").write_text('{"format": "something"}')
    with pytest.raises(GoldenError, match="not a pytest-infercheck golden"):
        load_golden(tmp_path / "other.json")
    (tmp_path / "v2.json").write_text(dumps({**_header(), "version": 2}, []))
    with pytest.raises(GoldenError, match="format version 2"):
        load_golden(tmp_path / "v2.json")


def test_replay_problems_model_name_and_tokenizer(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    write_golden(path, _header(), [])
    golden = load_golden(path)
    assert replay_problems(golden, "adder", "fp") == []
    assert replay_problems(golden, "adder", None) == []  # unknown: cannot be checked
    (model,) = replay_problems(golden, "other", "fp")
    assert "recorded from model 'adder', compared with model 'other'" in model
    (tokenizer,) = replay_problems(golden, "adder", "zz")
    assert "recorded with tokenizer fp, the test side's tokenizer is zz" in tokenizer


def test_merge_refuses_one_golden_from_two_targets() -> None:
    entry = _entry("s01", "3+4=", [5, 6])
    same = [{"file": "/g.json", "header": _header(), "entry": entry}] * 2
    assert merge_payloads(same)[Path("/g.json")] == (_header(), [entry, entry])
    other = {"file": "/g.json", "header": _header(target="adder@llama"), "entry": entry}
    with pytest.raises(GoldenError, match="adder@local and adder@llama"):
        merge_payloads([same[0], other])


# -- conversations ---------------------------------------------------------------------------
TURNS = (
    Turn("system", "Be brief."),
    Turn("user", "Hi"),
    Turn("assistant", None),
    Turn("user", "Again"),
)
HISTORY = (Message("system", "Be brief."), Message("user", "Hi"))
FILLED = (*HISTORY, Message("assistant", "Yo"), Message("user", "Again"))


def _conversation_entry(max_tokens: int = 4) -> dict[str, Any]:
    """A conversation recorded by hand: turn 2 generated as 'Yo' (ids 7, 2) from the history
    [system, user] (ids 1 3 4 5), the final answer 'ok' (ids 8, 2) to every turn."""
    turn_input = PromptInput("<s>S|Hi|", (1, 3, 4, 5), True, "fp", None, False)
    final = PromptInput("<s>S|Hi|Yo|Again|", (1, 3, 4, 5, 7, 6, 5), True, "fp", None, False, FILLED)
    turn = GeneratedTurn(
        2, turn_input, Generation("Yo", [7, 2], "stop", [-0.25, -0.5], [{7: -0.25, 9: -2.0}] * 2)
    )
    return make_entry(
        suite="chat",
        prompt_id="c01",
        asked=("Again", "Be brief.", False),
        rendered=final,
        params=GenerationParams(max_tokens),
        generation=Generation("ok", [8, 2], "stop", [-0.1, -0.2]),
        top=[[[8, -0.1]], [[2, -0.2]]],
        top_keys="id",
        conversation=Conversation(TURNS, (turn,), FILLED, final),
        turn_top_k=1,
    )


def test_conversation_entry_format() -> None:
    entry = _conversation_entry()
    assert entry["prompt"] == {
        "text": "Again",
        "system": "Be brief.",
        "thinking": False,
        "messages": [
            ["system", "Be brief."],
            ["user", "Hi"],
            ["assistant", None],
            ["user", "Again"],
        ],
    }
    assert entry["input"]["messages"] == [[m.role, m.content] for m in FILLED]
    assert entry["turns"] == [
        {
            "index": 2,
            "input": {
                "text": "<s>S|Hi|",
                "token_ids": [1, 3, 4, 5],
                "templated": True,
                "system": None,
                "thinking": False,
            },
            "output": {
                "text": "Yo",
                "token_ids": [7, 2],
                "finish_reason": "stop",
                "chosen_logprobs": [-0.25, -0.5],
                "top_logprobs": [[[7, -0.25]], [[7, -0.25]]],  # at most turn_top_k = 1
                "top_keys": "id",
            },
        }
    ]
    # A single-turn entry is as it always was: no messages, no turns.
    single = _entry("s01", "3+4=", [5, 6])
    assert set(single) == {"suite", "prompt_id", "prompt", "input", "params", "output"}
    assert set(single["prompt"]) == {"text", "system", "thinking"}
    assert "messages" not in single["input"]


def test_conversation_replay_matches_recorded_turns(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    write_golden(path, _header(), [_conversation_entry(), _entry("s01", "3+4=", [5, 6])])
    first = path.read_bytes()
    write_golden(path, _header(), [_entry("s01", "3+4=", [5, 6]), _conversation_entry()])
    assert path.read_bytes() == first  # the same bytes whatever the order
    golden = load_golden(path)
    assert golden.asked("Again", "Be brief.", False, TURNS)
    assert not golden.asked("Again", "Be brief.", False)  # a conversation, not a prompt
    history = golden.render_messages(HISTORY, False)
    assert history.token_ids == (1, 3, 4, 5)
    turn = golden.generation(history, GenerationParams(4))
    assert (turn.text, turn.token_ids, turn.chosen_logprobs) == ("Yo", [7, 2], [-0.25, -0.5])
    final = golden.render_messages(FILLED, False)
    assert final.token_ids == (1, 3, 4, 5, 7, 6, 5) and final.messages == FILLED
    assert golden.generation(final, GenerationParams(4)).text == "ok"
    assert golden.render("3+4=", None, False).token_ids == (1, 5, 6)  # single-turn unchanged


@pytest.mark.parametrize(
    ("messages", "shown"),
    [
        ((Message("system", "Be kind."), Message("user", "Hi")), "2 turns ending with user 'Hi'"),
        (
            (*HISTORY, Message("assistant", "Hey"), Message("user", "Again")),
            "4 turns ending with user 'Again'",
        ),
        (
            (
                *HISTORY[:1],
                Message("user", "Hi"),
                Message("assistant", "Yo"),
                Message("user", "Once more"),
            ),
            "4 turns ending with user 'Once more'",
        ),
    ],
)
def test_conversation_replay_refuses_changed_turns(
    tmp_path: Path, messages: tuple[tuple[str, str], ...], shown: str
) -> None:
    path = tmp_path / "g.json"
    write_golden(path, _header(), [_conversation_entry()])
    golden = load_golden(path)
    with pytest.raises(GoldenError, match=rf"g\.json: no recording of a conversation of {shown}"):
        golden.render_messages(messages, False)
    with pytest.raises(GoldenError, match="no recording of a conversation"):
        golden.render_messages(FILLED, True)  # thinking on: another rendering


def test_generation_cache_fills_a_conversation_in_from_a_golden(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    write_golden(path, _header(), [_conversation_entry()])
    prompt = Prompt("c01", "Again", None, 4, None, None, "Be brief.", "chat.jsonl:1", TURNS)
    cache = GenerationCache()
    try:
        golden = GoldenBackend("golden:g", load_golden(path))
        target = ResolvedTarget("golden:g", ("golden", str(path)), golden)
        filled = cache.conversation(target, prompt, False, GenerationParams(4))
        assert filled.messages == FILLED
        assert [(t.index, t.generation.token_ids) for t in filled.generated] == [(2, [7, 2])]
        assert filled.final.token_ids == (1, 3, 4, 5, 7, 6, 5)
        turns = (Turn("system", "Be kind."), *TURNS[1:])
        edited = dataclasses.replace(prompt, system="Be kind.", messages=turns)
        missing = r"prompt c01 \(chat\.jsonl:1\): golden .*: no recording of a conversation of 2"
        with pytest.raises(BackendError, match=missing):
            cache.conversation(target, edited, False, GenerationParams(4))
    finally:
        cache.close()


# -- the matrix ------------------------------------------------------------------------------
MATRIX = """\
models:
  adder: {path: ./m}
settings: {golden_dir: gold}
suites: [reasoning]
checks:
"""


def _load(tmp_path: Path, checks: str) -> Any:
    path = tmp_path / "infercheck.yaml"
    path.write_text(MATRIX + checks)
    return load_matrix(path)


def test_golden_baseline_of_a_compare(tmp_path: Path) -> None:
    loaded = _load(tmp_path, '  - compare: {baseline: "golden:adder-v1", test: adder}\n')
    side = loaded.matrix.checks[0].baseline_side(0)
    target = loaded.target(side.ref, side.loc)
    assert target.golden == "adder-v1" and target.label == "golden:adder-v1"
    assert golden_path(loaded, "adder-v1") == tmp_path / "gold" / "adder-v1.json"


@pytest.mark.parametrize(
    ("checks", "line", "message"),
    [
        ('  - compare: {baseline: adder, test: "golden:x"}\n', 6, "baseline of a compare"),
        ('  - sweep: {baseline: "golden:x", models: [adder]}\n', 6, "baseline of a compare"),
        ('  - determinism: "golden:x"\n', 6, "baseline of a compare"),
        ('  - compare: {baseline: "golden:a/b", test: adder}\n', 6, "a golden name is"),
    ],
)
def test_golden_misplaced_is_a_collection_error(
    tmp_path: Path, checks: str, line: int, message: str
) -> None:
    with pytest.raises(SourceError, match=message) as info:
        _load(tmp_path, checks)
    assert info.value.line == line


def test_record_is_not_a_yaml_setting(tmp_path: Path) -> None:
    path = tmp_path / "infercheck.yaml"
    path.write_text(
        MATRIX.replace("golden_dir: gold", "record: true")
        + "  - compare: {baseline: adder, test: adder}\n"
    )
    with pytest.raises(SourceError, match="--infercheck-record"):
        load_matrix(path)
