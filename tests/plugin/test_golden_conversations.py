"""Golden baselines of conversations through real mlx-lm (the realistic Qwen2: random weights,
the Qwen2.5 chat template): a suite with a conversation holding a ``generate`` turn and an
all-given one is recorded, then replayed against the same model (every turn identical, the
generated turn served from the file), against a test side that swaps a token of every
generation (the first divergent turn is the generated one) and with an edited conversation
(no recording of it, naming the prompt). Runs in-process: five short runs of the tiny
model (15 s here, warm)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO

CONFTEST = f"""\
import sys

sys.path.insert(0, {str(REPO)!r})

from tests.faults import pytest_infercheck_wrap_backend  # noqa: E402, F401
"""
SYSTEM = {"role": "system", "content": "You are brief."}
GEN = [
    SYSTEM,
    {"role": "user", "content": "Say hello."},
    {"role": "assistant", "generate": True},
    {"role": "user", "content": "Now count to three."},
]
GIVEN = [
    {"role": "user", "content": "Name a colour."},
    {"role": "assistant", "content": "Blue."},
    {"role": "user", "content": "Another one."},
]
GOLDEN = Path("goldens/qwen2-v1.json")


@pytest.fixture
def write(pytester: pytest.Pytester, realistic_qwen2: Any) -> Any:
    """Write the conftest, and a function writing the suite (``gen``'s turns given) and the
    gate against ``golden:qwen2-v1`` with the given test backend."""
    pytester.makeconftest(CONFTEST)

    def write(test: str = "local", gen: list[dict[str, Any]] = GEN) -> None:
        suite = [
            {"id": "gen", "max_tokens": 6, "messages": gen},
            {"id": "given", "max_tokens": 6, "messages": GIVEN},
        ]
        pytester.makefile(".jsonl", conv="\n".join(json.dumps(r) for r in suite))
        pytester.makefile(
            ".yaml",
            infercheck=(
                f"models:\n  qwen2: {{path: '{realistic_qwen2.path}'}}\n"
                "backends:\n  local: {kind: mlx-lm}\n  faulty-swapped: {kind: mlx-lm}\n"
                "suites: [conv.jsonl]\nchecks:\n"
                f'  - compare: {{baseline: "golden:qwen2-v1", test: qwen2@{test}}}\n'
                "    max_kl: 1.0e-4\n    min_similarity: 1.0\n"
            ),
        )

    return write


def _run(pytester: pytest.Pytester, *args: str) -> tuple[dict[str, Any], str]:
    """One run: its items by the last part of the node id (``gen``, ``given``,
    ``aggregate``; one check), and its output."""
    out = pytester.path / "r.json"
    result = pytester.runpytest("-p", "no:cacheprovider", f"--infercheck-results={out}", *args)
    items = json.loads(out.read_text())["items"]
    return {i["nodeid"].rsplit("::", 1)[-1]: i for i in items}, result.stdout.str()


def test_conversation_golden_record_and_replay(pytester: pytest.Pytester, write: Any) -> None:
    write()
    recorded, stdout = _run(pytester, "--infercheck-record")
    assert all(i["outcome"] == "passed" for i in recorded.values()), stdout[-3000:]
    assert "recorded goldens/qwen2-v1.json: 2 prompts from qwen2@local" in stdout
    first = (pytester.path / GOLDEN).read_bytes()
    entries = {e["prompt_id"]: e for e in json.loads(first)["prompts"]}
    gen, given = entries["gen"], entries["given"]
    assert gen["prompt"]["messages"] == [
        ["system", "You are brief."],
        ["user", "Say hello."],
        ["assistant", None],
        ["user", "Now count to three."],
    ]
    (turn,) = gen["turns"]
    assert turn["index"] == 2 and turn["output"]["token_ids"]
    said = turn["output"]["text"]  # what the recording target said at turn 2, fed back
    assert gen["input"]["messages"] == [
        ["system", "You are brief."],
        ["user", "Say hello."],
        ["assistant", said],
        ["user", "Now count to three."],
    ]
    # The final input is the Qwen2.5 template over every turn, the generated one included;
    # turn 2's input is the template over the turns before it.
    assert f"<|im_start|>assistant\n{said}<|im_end|>" in gen["input"]["text"]
    assert turn["input"]["text"].endswith("Say hello.<|im_end|>\n<|im_start|>assistant\n")
    assert "turns" not in given and given["prompt"]["messages"][1] == ["assistant", "Blue."]
    assert len(gen["output"]["top_logprobs"]) == len(gen["output"]["token_ids"])
    _run(pytester, "--infercheck-record")
    assert (pytester.path / GOLDEN).read_bytes() == first  # deterministic

    # The same model: every turn identical, turn 2 as the golden recorded it.
    same, stdout = _run(pytester)
    outcomes = {k: i["outcome"] for k, i in same.items()}
    assert outcomes == {"gen": "passed", "given": "passed", "aggregate": "passed"}, stdout
    assert "compare(golden.qwen2-v1-vs-qwen2)::conv::gen" in same["gen"]["nodeid"]
    data = same["gen"]["data"]
    assert data["method"] == "golden-top-k-lower-bound"
    assert data["first_divergent_turn"] is None and data["first_divergence"] is None
    assert [(t["index"], t["kind"], t["same"]) for t in data["turns"]] == [
        (0, "given", None),
        (1, "given", None),
        (2, "generated", True),
        (3, "given", None),
        (4, "final", True),
    ]
    assert data["turns"][2]["base_text"] == data["turns"][2]["test_text"] == said
    assert data["turns"][4]["base_text"] == gen["output"]["text"]
    assert data["prompt_inputs"]["base_ids"] == gen["input"]["token_ids"]

    # A test side that swaps a token of every generation: turn 2 diverges first.
    write(test="faulty-swapped")
    swapped, stdout = _run(pytester, "-rf")
    item = swapped["gen"]
    assert item["outcome"] == "failed", stdout
    # the budget gates judge the final turn (its text differs from token 3 of the swap)
    assert [v.split(" < ")[0][:15] for v in item["violations"]] == ["text similarity"]
    assert item["data"]["first_divergent_turn"] == 2
    assert item["data"]["turns"][2]["same"] is False
    assert item["data"]["turns"][2]["base_text"] == said
    assert "turn 2 generated" in stdout and "<- first divergent turn" in stdout

    # An edited conversation (an earlier user turn; its system prompt and last turn as they
    # were): no recording of it, naming the prompt; the untouched one still replays.
    write(gen=[SYSTEM, {"role": "user", "content": "Say goodbye."}, *GEN[2:]])
    edited, stdout = _run(pytester, "-rf")
    outcomes = {k: i["outcome"] for k, i in edited.items()}
    assert outcomes == {"gen": "failed", "given": "passed", "aggregate": "failed"}, stdout
    assert (
        "no recording of prompt gen ('Now count to three.', a conversation of 4 turns) of "
        "suite conv: the suite or the settings changed since it was recorded"
    ) in stdout
    assert (pytester.path / GOLDEN).read_bytes() == first  # replay never writes
