"""A LoRA adapter served by llama-server (``--lora FILE``, per-request ``lora`` scales),
through the plugin on the tiny adder, against the adapter's merged weights in mlx-lm
(float32, in-process); and the same adapter dropped from every request by a faulty proxy.

One llama-server (f32 GGUF, ``-fa off -ctk f32 -ctv f32``) with the adapter loaded serves
three checks:

- ``tuned`` (base GGUF + the GGUF LoRA made by llama.cpp's ``convert_lora_to_gguf.py``)
  against ``merged@f32`` (the base + 2 B A, float32), ``expect: identical`` and
  ``require_engaged: true``: identical on every prompt, and engaged (each output differs
  from the base model's on the same server, whose scale-0 answer the backend asks for);
- the base model on the same server against mlx-lm's base: identical, because the base
  model's requests carry every adapter's scale 0 (the server's default for a request naming
  none is 1: without it the base model would be answered with the adapter);
- ``tuned`` behind ``tests/faulty_proxy.py`` with ``drop_lora`` (every ``lora`` scale set to
  0, ``/lora-adapters`` untouched): its outputs equal the base model's, so every item is
  ``unexercised`` and fails under ``require_engaged: true``, besides differing from the
  merged weights.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faulty_proxy import Fault, FaultyProxy
from tests.integration.served import llama_flags, llama_server
from tests.plugin.conftest import INI
from tests.plugin.helpers import suite_jsonl


@pytest.fixture(scope="module")
def llama_lora_url(
    llama_server_bin: Path,
    tiny_gguf: Path,
    tiny_lora_gguf: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """llama-server on the tiny f32 GGUF with the adapter loaded (``--lora``)."""
    flags = f"{llama_flags(slots=1, context=64)} --lora {tiny_lora_gguf}"
    with llama_server(llama_server_bin, tiny_gguf, tmp_path_factory.mktemp("lora"), flags) as url:
        yield url


def test_llama_server_adapter_is_identical_to_merged_and_a_dropped_one_is_unexercised(
    pytester: pytest.Pytester,
    tiny_models: dict[str, Path],
    tiny_gguf: Path,
    tiny_lora: Any,
    tiny_lora_gguf: Path,
    llama_lora_url: str,
) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", addition=suite_jsonl())
    bf16 = tiny_models["bf16"]
    with FaultyProxy(llama_lora_url, Fault(drop_lora=True)) as proxy:
        pytester.makefile(
            ".yaml",
            infercheck=f"""\
models:
  tuned:
    path: '{bf16}'
    gguf: '{tiny_gguf}'
    adapter: {{path: '{tiny_lora.adapter}', gguf: '{tiny_lora_gguf}'}}
  base: {{path: '{bf16}', gguf: '{tiny_gguf}'}}
  merged: {{path: '{tiny_lora.merged}'}}
backends:
  f32: {{kind: mlx-lm, dtype: float32}}
  llama: {{kind: llama-server, url: '{llama_lora_url}'}}
  dropped: {{kind: llama-server, url: '{proxy.url}'}}
suites: [addition.jsonl]
checks:
  - diff: {{model: tuned, backends: [merged@f32, llama]}}
    name: served
    require_engaged: true
  - diff: {{model: base, backends: [f32, llama]}}
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
    served, base, dropped = (
        by_check["diff(served)"],
        by_check["diff(base)"],
        by_check["diff(dropped)"],
    )
    assert len(served) == len(base) == len(dropped) == 8
    for item in served:
        assert item["outcome"] == "passed", item["violations"]
        assert item["data"]["sameness"] == "identical"
        (record,) = item["data"]["feature_activity"]
        assert record["features"] == [f"LoRA adapter ({tiny_lora_gguf})"]
        assert "unexercised" not in record
    kl_max = max(i["data"]["kl_max"] for i in served)
    print(f"served vs merged: KL max {kl_max:.3g}")
    assert kl_max < 1e-5  # measured 1.5e-6: W x + 2 B (A x) against (W + 2 B A) x, float32
    assert all(i["outcome"] == "passed" for i in base), [i["violations"] for i in base]
    unexercised = (
        "unexercised: test tuned@dropped: LoRA adapter never engaged: the output equals the "
        "base model's on the same engine, token for token and logprob for logprob "
        f"({tiny_lora_gguf}) (require_engaged: true)"
    )
    for item in dropped:
        assert item["outcome"] == "failed"
        assert unexercised in item["violations"], item["violations"]
    assert altered >= 8  # every generation request of the dropped side lost its adapter
    result.assert_outcomes(passed=9 + 9, failed=9)
