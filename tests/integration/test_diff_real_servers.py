"""The diff check across real engines serving the same tiny model, each started by the
plugin: mlx-lm in-process, llama-server, mlx_lm.server and vllm-mlx (both engines).

Expected, per pair (and asserted):
- mlx-lm (float32) vs llama-server (f32 GGUF, ``-fa off -ctk f32 -ctv f32``): token ids and
  teacher-forced full-vocabulary KL, identical tokens, KL below 1e-6.
- mlx-lm (bf16) vs mlx_lm.server and vllm-mlx (same bf16 weights, raw completions): no ids
  or comparable logprobs, so text and answers; identical text, no flips.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.integration.served import (
    MLX_LM_SERVE,
    backend,
    llama_flags,
    llama_serve,
    mlx_lm_backend,
    vllm_backends,
)
from tests.plugin.conftest import INI
from tests.plugin.helpers import junit_properties, suite_jsonl


def test_diff_across_real_engines(
    pytester: pytest.Pytester,
    adder: str,
    tiny_gguf: Path,
    llama_server_bin: Path,
    vllm_mlx_bin: Path,
) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", addition=suite_jsonl())
    hub = pytester.path / "hub"
    hub.mkdir()
    backends = (
        backend("llama", "llama-server", llama_serve(llama_server_bin, llama_flags(1, 64)))
        + mlx_lm_backend(hub)
        + vllm_backends(vllm_mlx_bin, hub)
    )
    pytester.makefile(
        ".yaml",
        infercheck=f"""\
models:
  adder: {adder}
backends:
  local: {{kind: mlx-lm}}
  local32: {{kind: mlx-lm, dtype: float32}}
{backends}suites: [addition.jsonl]
checks:
  - diff: {{model: adder, backends: [local32, llama]}}
    name: exact
    max_kl: 1.0e-6
    flips: {{fail_item_on: any}}
  - diff: {{model: adder, backends: [local, mlxserver, vllm, vllmcb]}}
    name: text
    min_similarity: 1.0
    flips: {{fail_item_on: any}}
  # llama-server as the baseline: a raw-completion server gets its prompt as the exact
  # string of llama-server's ids ("<s>12+34="), so it answers the same.
  - diff: {{model: adder, backends: [llama, vllm]}}
    name: from-llama
    min_similarity: 1.0
    flips: {{fail_item_on: any}}
""",
    )
    result = pytester.runpytest_subprocess("-q", "--junitxml=out.xml", "-p", "no:cacheprovider")
    # mlx_lm.server's negotiated top-k lists are unsorted, their chosen entry not the
    # generated token (tests/integration/test_mlx_server_logprobs.py): its 8 items fail on
    # that finding although its text agrees, and diff(text)'s aggregate fails for them.
    outcomes = {"passed": 8 + 1 + 16 + 8 + 1, "failed": 8 + 1}
    assert result.parseoutcomes() == outcomes, result.stdout.str()
    result.stdout.fnmatch_lines(["*diff(text)::addition::s01[[]mlxserver[]]*"])
    assert result.stdout.str().count("top-k logprobs not sorted in the test output") >= 8
    props = junit_properties(pytester.path / "out.xml")
    exact = props["s04[llama]"]
    assert exact["infercheck_method"] == "teacher-forced"
    assert float(exact["infercheck_kl_max"]) < 1e-6
    assert exact["infercheck_first_divergence"] == "None"
    import xml.etree.ElementTree as ET

    (exact_aggregate,) = [
        case
        for case in ET.parse(pytester.path / "out.xml").getroot().iter("testcase")
        if "diff(exact)" in case.get("classname", "") and case.get("name") == "aggregate"
    ]
    engines = next(
        p.get("value", "")
        for p in exact_aggregate.iter("property")
        if p.get("name") == "infercheck_engines"
    )
    assert '"build_info": "b1-' in engines and str(tiny_gguf) in engines  # from /props
    for name in ("mlxserver", "vllm", "vllmcb"):
        text = props[f"s04[{name}]"]
        assert text["infercheck_method"] == "text", name
        assert text["infercheck_severity"] == "identical", name


# --- where a divergence starts ------------------------------------------------------------
# The random-weight model (byte-level tokenizer, no merges) with the output row of " " (id
# 35) scaled by 4 generates spaces, some first ("The cat" -> " \ufffd\x0e ..."): such an
# output shows mlx_lm.server's streaming detokenizer dropping the first token's leading space.
SPACE_ID = 35


def _spacey_model(source: Path, dest: Path) -> Path:
    """A copy of the random model whose ``lm_head`` row of " " is scaled by 4."""
    import mlx.core as mx

    shutil.copytree(source, dest)
    weights = mx.load(str(dest / "model.safetensors"))
    assert isinstance(weights, dict)
    head = weights["lm_head.weight"]
    weights["lm_head.weight"] = mx.concatenate(
        [head[:SPACE_ID], head[SPACE_ID : SPACE_ID + 1] * 4, head[SPACE_ID + 1 :]]
    )
    mx.save_safetensors(str(dest / "model.safetensors"), weights)
    return dest


RANDOM_PROMPTS = [
    (f"r{i}", text, "")
    for i, text in enumerate(
        ["Hello", "The cat", "a", "Once upon", "12+34=", "x y z", "Why?", "ok then"]
    )
]


def _suite(rows: list[tuple[str, str, str]], max_tokens: int = 8) -> str:
    return "\n".join(
        json.dumps({"id": i, "prompt": p, "max_tokens": max_tokens}) for i, p, _ in rows
    )


def _items(path: Path) -> dict[str, dict[str, Any]]:
    """Prompt items of a results file by their name (``r0[mlxserver]``)."""
    items = json.loads(path.read_text())["items"]
    return {i["name"]: i for i in items if i["role"] == "prompt"}


def _with_template(source: Path, dest: Path, template: str) -> Path:
    """A copy of the model folder ``source`` whose tokenizer has the chat ``template``."""
    shutil.copytree(source, dest)
    config_path = dest / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = template
    config_path.write_text(json.dumps(config, indent=2))
    return dest


def test_mlx_lm_vs_its_server_diverge_by_detokenization_with_agreeing_tokens(
    pytester: pytest.Pytester, random_model: Path
) -> None:
    """mlx_lm.server returns no ids in raw mode and drops the first token's leading space:
    every item whose texts differ must say detokenization and that the tokens agree; an
    item with equal texts has no divergence."""
    pytester.makefile(".jsonl", random=_suite(RANDOM_PROMPTS))
    hub = pytester.path / "hub"
    hub.mkdir()
    model = _spacey_model(random_model, pytester.path / "spacey")
    pytester.makefile(
        ".yaml",
        infercheck=f"""\
models:
  rnd: {{path: '{model}'}}
backends:
  local: {{kind: mlx-lm}}
{mlx_lm_backend(hub)}suites: [random.jsonl]
checks:
  - diff: {{model: rnd, backends: [local, mlxserver]}}
    min_similarity: 1.0
""",
    )
    result = pytester.runpytest_subprocess(
        "-q", "--infercheck-results=r.json", "-p", "no:cacheprovider"
    )
    items = _items(pytester.path / "r.json")
    assert len(items) == len(RANDOM_PROMPTS), result.stdout.str()
    leading_space = 0
    for name, item in items.items():
        data = item["data"]
        assert data["prompt_inputs"]["sharing"] == "shared text", name
        if data["base_text"] == data["test_text"]:
            assert data["divergence_origin"] is None, (name, data["origin_detail"])
            continue
        assert data["divergence_origin"] == "detokenization", (name, data["origin_detail"])
        assert "the tokens agree" in data["origin_detail"], name
        if data["base_text"].startswith(" ") and data["test_text"] == data["base_text"][1:]:
            leading_space += 1
            assert "leading space dropped" in data["origin_detail"], name
    assert leading_space >= 1, {n: i["data"]["base_text"] for n, i in items.items()}
    # the failure text says it too (diff fails an item whose texts differ)
    out = result.stdout.str()
    assert "divergence starts at: detokenization - the tokens agree" in out


def test_a_template_rendered_differently_by_the_server_says_template(
    pytester: pytest.Pytester, random_model: Path
) -> None:
    """mlx-lm renders its folder's template; mlx_lm.server (chat) renders a perturbed copy
    itself: the item names the template, at the first differing character."""
    plain = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    perturbed = "{{ bos_token }}User: {% for m in messages %}{{ m['content'] }}{% endfor %}"
    base = _with_template(random_model, pytester.path / "base-model", plain)
    served = _with_template(random_model, pytester.path / "served-model", perturbed)
    pytester.makefile(".jsonl", random=_suite(RANDOM_PROMPTS[:2]))
    hub = pytester.path / "hub"
    hub.mkdir()
    server = backend("chatserver", "openai", MLX_LM_SERVE, {"HF_HUB_CACHE": str(hub)}, chat=True)
    pytester.makefile(
        ".yaml",
        infercheck=f"""\
models:
  rnd: {{path: '{base}'}}
  served: {{path: '{served}'}}
backends:
  local: {{kind: mlx-lm}}
{server}suites: [random.jsonl]
checks:
  - compare: {{baseline: rnd@local, test: served@chatserver}}
    min_similarity: 1.0
""",
    )
    result = pytester.runpytest_subprocess(
        "-q", "--infercheck-results=r.json", "-p", "no:cacheprovider"
    )
    items = _items(pytester.path / "r.json")
    assert len(items) == 2, result.stdout.str()
    for name, item in items.items():
        data = item["data"]
        assert data["prompt_inputs"]["sharing"] == "own render", name
        if data["base_text"] == data["test_text"]:
            assert (
                data["divergence_origin"] is None
                and "prompts differ (template" in (data["origin_detail"])
            ), name
            continue
        assert data["divergence_origin"] == "template", (name, data["origin_detail"])
        assert "render the template differently" in data["origin_detail"]
        assert "from character 3" in data["origin_detail"], data["origin_detail"]  # after <s>
    assert "divergence starts at: template" in result.stdout.str()
