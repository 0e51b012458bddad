"""Adapter isolation on llama-server (the ``stress`` kind with ``beside``): the tiny adder's
base model and two LoRA adapters (``make_lora`` seeds 0 and 1) on ONE llama-server
(``--lora A --lora B``, per-request ``lora`` scales, ``-np 4``), their requests interleaved
and concurrent, each compared with its own model's output alone on that server.

- Straight to the server: every output equals its reference, token for token, and logprob
  for logprob within a float step (``logprob_diff`` 0 in most runs, 6.3e-7 in one): pass.
- Through ``tests/faulty_proxy.py`` with ``set_params: cache_prompt: true``: the request is
  the plugin's, the mixing is the engine's. llama-server's prompt cache reuses a slot's
  prompt tokens computed under another adapter (``timings.cache_n`` 6 of 7), so outputs
  keep their tokens with other logprobs, or take another model's tokens: the levels fail,
  naming the model whose outputs changed.
- The same ``cache_prompt: true`` on a llama-server started with ``--cache-ram 0`` (no
  prompt cache in host memory, which restores a prompt computed under another adapter):
  every output keeps its model's tokens, logprobs within a float step of the output alone
  (measured up to 6.3e-6, under the default ``logprob_tolerance`` 1e-4): pass.
- Through the proxy with ``swap_lora_every: 2``: every second request that asks for an
  adapter is served with the other adapter's scales (a server that mixes up the adapters of
  concurrent requests). The adapters' outputs change and the items say which: ``tuned`` and
  ``tuned2``, never ``base``, whose requests pass untouched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faulty_proxy import Fault, FaultyProxy
from tests.integration.served import llama_flags, llama_server
from tests.plugin.conftest import INI
from tests.plugin.helpers import suite_jsonl


@pytest.fixture(scope="module")
def llama_two_loras(
    llama_server_bin: Path,
    tiny_gguf: Path,
    tiny_lora_gguf: Path,
    tiny_lora2_gguf: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """llama-server on the tiny f32 GGUF with both adapters loaded, 4 slots."""
    flags = f"{llama_flags(slots=4, context=256)} --lora {tiny_lora_gguf} --lora {tiny_lora2_gguf}"
    workdir = tmp_path_factory.mktemp("two-loras")
    with llama_server(llama_server_bin, tiny_gguf, workdir, flags) as url:
        yield url


@pytest.fixture(scope="module")
def llama_two_loras_no_cache_ram(
    llama_server_bin: Path,
    tiny_gguf: Path,
    tiny_lora_gguf: Path,
    tiny_lora2_gguf: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """:func:`llama_two_loras` with ``--cache-ram 0``."""
    loras = f"--lora {tiny_lora_gguf} --lora {tiny_lora2_gguf}"
    flags = f"{llama_flags(slots=4, context=256)} {loras} --cache-ram 0"
    workdir = tmp_path_factory.mktemp("two-loras-no-cache-ram")
    with llama_server(llama_server_bin, tiny_gguf, workdir, flags) as url:
        yield url


def _yaml(models: str, backends: dict[str, str]) -> str:
    entries = "\n".join(
        f"  {name}: {{kind: llama-server, url: '{url}'}}" for name, url in backends.items()
    )
    checks = "\n".join(
        f"  - stress: {{target: base@{name}, beside: [tuned, tuned2], levels: [1, 4], "
        f"repeats: 2}}\n    name: {name}"
        for name in backends
    )
    return f"models:\n{models}\nbackends:\n{entries}\nsuites: [addition.jsonl]\nchecks:\n{checks}\n"


def test_base_and_two_adapters_are_isolated_on_llama_server_and_mixing_fails_naming_the_model(
    pytester: pytest.Pytester,
    tiny_models: dict[str, Path],
    tiny_gguf: Path,
    tiny_lora: Any,
    tiny_lora_gguf: Path,
    tiny_lora2: Any,
    tiny_lora2_gguf: Path,
    llama_two_loras: str,
    llama_two_loras_no_cache_ram: str,
) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", addition=suite_jsonl())
    bf16 = tiny_models["bf16"]
    models = (
        f"  base: {{path: '{bf16}', gguf: '{tiny_gguf}'}}\n"
        f"  tuned:\n    path: '{bf16}'\n    gguf: '{tiny_gguf}'\n"
        f"    adapter: {{path: '{tiny_lora.adapter}', gguf: '{tiny_lora_gguf}'}}\n"
        f"  tuned2:\n    path: '{bf16}'\n    gguf: '{tiny_gguf}'\n"
        f"    adapter: {{path: '{tiny_lora2.adapter}', gguf: '{tiny_lora2_gguf}'}}"
    )
    cached_fault = Fault(set_params=(("cache_prompt", True),))
    with (
        FaultyProxy(llama_two_loras, cached_fault) as cached,
        FaultyProxy(llama_two_loras, Fault(swap_lora_every=2)) as swapped,
        FaultyProxy(llama_two_loras_no_cache_ram, cached_fault) as no_ram,
    ):
        backends = {
            "llama": llama_two_loras,
            "cached": cached.url,
            "swapped": swapped.url,
            "noram": no_ram.url,
        }
        pytester.makefile(".yaml", infercheck=_yaml(models, backends))
        result = pytester.runpytest_subprocess(
            "--infercheck-results=out.json", "-p", "no:cacheprovider"
        )
        assert cached.altered > 0 and swapped.altered > 0 and no_ram.altered > 0
    items = json.loads((pytester.path / "out.json").read_text())["items"]
    levels = {(i["check"], i["data"]["level"]): i for i in items if i["role"] == "level"}
    for level in (1, 4):
        faithful = levels["stress(llama)", level]
        assert faithful["outcome"] == "passed", faithful["violations"]
        data = faithful["data"]
        # 8 prompts x 2 copies x 3 models, each equal to its own model's output alone
        assert data["requests"] == 48 and data["consistent"] == 48
        for side in ("base", "tuned", "tuned2"):
            assert data["sides"][side]["requests"] == data["sides"][side]["consistent"] == 16
        # measured: 0 in most runs, 6.3e-7 in one (4 slots sharing one KV cache)
        assert data["logprob_diff"] < 1e-5
        print(f"faithful c{level}: {data['max_in_flight']} in flight, {data['logprob_diff']=}")

    # cache_prompt: true, the engine mixes: every level fails, naming the model(s) changed
    for level in (1, 4):
        item = levels["stress(cached)", level]
        assert item["outcome"] == "failed"
        said = " | ".join(item["violations"])
        print(f"cache_prompt c{level}: {said}")
        changed = re.findall(r"(base|tuned2|tuned) \d+/16", said)
        moved = re.search(r"logprobs moved by [\d.e-]+ > logprob_tolerance 0.0001", said)
        assert changed or moved, said

    # cache_prompt: true without the host-memory prompt cache: a float step, no mixing
    for level in (1, 4):
        item = levels["stress(noram)", level]
        assert item["outcome"] == "passed", item["violations"]
        data = item["data"]
        assert data["consistent"] == 48 and data["logprob_diff"] < 1e-4
        print(f"cache_prompt, --cache-ram 0, c{level}: logprob_diff {data['logprob_diff']:.3g}")

    # swapped adapters: the adapters' outputs change, the base model's never
    for level in (1, 4):
        item = levels["stress(swapped)", level]
        assert item["outcome"] == "failed"
        sides = item["data"]["sides"]
        assert sides["base"]["consistent"] == 16 and sides["base"]["logprob_diff"] == 0.0
        assert sides["tuned"]["consistent"] < 16 and sides["tuned2"]["consistent"] < 16
        (consistency,) = [v for v in item["violations"] if v.startswith("consistency")]
        assert "changed: tuned " in consistency and "tuned2 " in consistency
        assert "base " not in consistency.split("changed:")[1], consistency
        print(f"swapped c{level}: {consistency}")
    result.assert_outcomes(passed=6, failed=6)
