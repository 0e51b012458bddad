"""Prefill schedule A/B on mlx-lm in process (docs/how-to/prefill.md): the backend option
``prefill_step_size`` (prompt tokens per prefill pass; mlx-lm's ``generate_step`` default
2048) reaches both generation and teacher-forced scoring, and a diff of the tiny adder in
float32 at a small step against the default, on prompts longer than the step, is measured.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.backends import create_backend
from pytest_infercheck.backends.base import GenerationParams
from pytest_infercheck.backends.registry import backend_spec
from tests.plugin.conftest import INI

PROMPTS = [
    ("p01", "12+34+56+78+90+11+22+33+44+55="),
    ("p02", "1+2+3+4+5+6+7+8+9+10+11+12+13+14="),
    ("p03", "99+1+98+2+97+3+96+4+95+5+94+6="),
    ("p04", "45+55+45+55+45+55+45+55+45+55="),
    ("p05", "7+8+7+8+7+8+7+8+7+8+7+8+7+8+7+8="),
    ("p06", "63+29+18+77+81+9+50+25+12+34="),
    ("p07", "10+20+30+40+50+60+70+80+90="),
    ("p08", "3+33+333+3+33+333+3+33+333+3+33="),
]
"""Eight prompts of 27 to 33 bytes (28 to 34 ids with the BOS): longer than a prefill step
of 4 (7 to 9 passes) and well inside the adder's 64-token context with 5 generated."""


def suite() -> str:
    return "\n".join(json.dumps({"id": i, "prompt": p, "max_tokens": 5}) for i, p in PROMPTS)


def test_prefill_step_size_reaches_generation_and_scoring(
    tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    generate = importlib.import_module("mlx_lm.generate")  # the module, not the function

    seen: list[Any] = []
    real = generate.generate_step

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("prefill_step_size"))
        return real(*args, **kwargs)

    monkeypatch.setattr(generate, "generate_step", spy)
    spec = backend_spec({"kind": "mlx-lm", "dtype": "float32", "prefill_step_size": 4})
    backend: Any = create_backend("small", spec, str(tiny_models["bf16"]), None)

    async def both() -> None:
        rendered = await backend.render(PROMPTS[0][1], None, False)
        ids = list(rendered.token_ids)
        assert len(ids) > 4 * 2
        generation = await backend.generate(rendered, GenerationParams(max_tokens=3))
        assert seen == [4], "generation did not get prefill_step_size"
        await backend.score(ids, list(generation.token_ids))
        assert seen == [4, 4], "scoring did not get prefill_step_size"

    asyncio.run(both())


def test_diff_of_a_small_prefill_step_against_the_default_is_identical(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", long=suite())
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  adder: {{path: '{tiny_models['bf16']}'}}\n"
        "backends:\n"
        "  default: {kind: mlx-lm, dtype: float32}\n"
        "  step4: {kind: mlx-lm, dtype: float32, prefill_step_size: 4}\n"
        "  step1: {kind: mlx-lm, dtype: float32, prefill_step_size: 1}\n"
        "suites: [long.jsonl]\n"
        "checks:\n"
        "  - diff: {model: adder, backends: [default, step4, step1]}\n"
        "    max_kl: 1.0e-5\n",
    )
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "--infercheck-results=r.json")
    doc = json.loads((pytester.path / "r.json").read_text())
    items = [i for i in doc["items"] if i["role"] == "prompt"]
    assert len(items) == 16
    kl = [i["data"]["kl_max"] for i in items]
    print("largest per-position KL", max(kl))
    failed = [i["name"] for i in doc["items"] if i["outcome"] != "passed"]
    assert failed == [], result.stdout.str()[-4000:]
    assert max(kl) < 1e-5
