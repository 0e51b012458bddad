"""A LoRA adapter served by vLLM's CPU build (``--enable-lora --lora-modules tuned=FOLDER``,
requests naming the module), through the plugin on the tiny adder, against the adapter's
merged weights in mlx-lm (float32, in-process); and the adapter dropped by a faulty proxy
that rewrites each generation request's ``model`` to the base model's name.

One vLLM (float32, ``--max-logprobs 259``: full-vocabulary rows, so exact KL) with the
adapter's PEFT folder as a LoRA module serves three checks, as for llama-server
(``test_adapters_llama.py``): the adapter against ``merged@f32`` (identical, engaged), the
base model on the same server against mlx-lm's base (identical), and the adapter behind
``Fault(model_to=BASE)`` (every item ``unexercised``, failed by ``require_engaged``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faulty_proxy import Fault, FaultyProxy
from tests.integration.conftest import _running_with_env
from tests.integration.served import VLLM_ENV, VLLM_HEALTH_TIMEOUT_S, vllm_cpu_command
from tests.plugin.conftest import INI
from tests.plugin.helpers import suite_jsonl

pytestmark = pytest.mark.xdist_group("vllm")

LORA_FLAGS = (
    "--dtype float32 --max-model-len 64 --enforce-eager --max-logprobs 259 "
    "--enable-lora --max-lora-rank 8 --lora-modules tuned={adapter}"
)
"""The tiny adder's context is 64 (vLLM refuses a longer ``--max-model-len``)."""


@pytest.fixture(scope="module")
def vllm_lora_url(
    vllm_python: Path,
    tiny_models: dict[str, Path],
    tiny_lora: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """vLLM (float32) on the tiny adder with the adapter as the LoRA module ``tuned``; its
    base model's name is the folder's path."""
    flags = LORA_FLAGS.format(adapter=tiny_lora.adapter)
    model = tiny_models["bf16"]

    def command(port: int) -> list[str]:
        return vllm_cpu_command(vllm_python, flags).format(model=model, port=port).split()

    workdir = tmp_path_factory.mktemp("vllm-lora")
    with _running_with_env("vllm", command, workdir, VLLM_ENV, VLLM_HEALTH_TIMEOUT_S) as url:
        yield url


def test_vllm_adapter_is_identical_to_merged_and_a_dropped_one_is_unexercised(
    pytester: pytest.Pytester,
    tiny_models: dict[str, Path],
    tiny_lora: Any,
    vllm_lora_url: str,
) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", addition=suite_jsonl())
    bf16 = tiny_models["bf16"]
    with FaultyProxy(vllm_lora_url, Fault(model_to=str(bf16))) as proxy:
        pytester.makefile(
            ".yaml",
            infercheck=f"""\
models:
  tuned: {{path: '{bf16}', adapter: '{tiny_lora.adapter}'}}
  base: {{path: '{bf16}'}}
  merged: {{path: '{tiny_lora.merged}'}}
backends:
  f32: {{kind: mlx-lm, dtype: float32}}
  vllm: {{kind: vllm, url: '{vllm_lora_url}', chat: false}}
  dropped: {{kind: vllm, url: '{proxy.url}', chat: false}}
suites: [addition.jsonl]
checks:
  - diff: {{model: tuned, backends: [merged@f32, vllm]}}
    name: served
    require_engaged: true
  - diff: {{model: base, backends: [f32, vllm]}}
    name: base
  - diff: {{model: tuned, backends: [merged@f32, dropped]}}
    name: dropped
    require_engaged: true
""",
        )
        result = pytester.runpytest_subprocess(
            "--infercheck-results=out.json", "-p", "no:cacheprovider"
        )
        altered = proxy.altered
    items = json.loads((pytester.path / "out.json").read_text())["items"]
    by_check: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        if item["role"] == "prompt":
            by_check.setdefault(item["check"], []).append(item)
    served, base = by_check["diff(served)"], by_check["diff(base)"]
    dropped = by_check["diff(dropped)"]
    assert len(served) == len(base) == len(dropped) == 8, result.stdout.str()
    for item in served:
        assert item["outcome"] == "passed", item["violations"]
        assert item["data"]["sameness"] == "identical"
        (record,) = item["data"]["feature_activity"]
        assert record["features"] == [f"LoRA adapter ({tiny_lora.adapter})"]
        assert "unexercised" not in record
    kl_max = max(i["data"]["kl_max"] for i in served)
    print(f"vLLM adapter vs merged: KL max {kl_max:.3g}")
    assert kl_max < 1e-5  # measured 2.1e-6
    assert all(i["outcome"] == "passed" for i in base), [i["violations"] for i in base]
    unexercised = (
        "unexercised: test tuned@dropped: LoRA adapter never engaged: the output equals the "
        "base model's on the same engine, token for token and logprob for logprob "
        f"({tiny_lora.adapter}) (require_engaged: true)"
    )
    for item in dropped:
        assert item["outcome"] == "failed"
        assert unexercised in item["violations"], item["violations"]
    assert altered >= 8
    result.assert_outcomes(passed=9 + 9, failed=9)
