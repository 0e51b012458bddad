"""The diff check across real engines serving the same tiny model, each started by the
plugin: mlx-lm in-process, llama-server, mlx_lm.server and vllm-mlx (both engines).

Expected, per pair (and asserted):
- mlx-lm (float32) vs llama-server (f32 GGUF, ``-fa off -ctk f32 -ctv f32``): token ids and
  teacher-forced full-vocabulary KL, identical tokens, KL below 1e-6.
- mlx-lm (bf16) vs mlx_lm.server and vllm-mlx (same bf16 weights, raw completions): no ids
  or comparable logprobs, so text and answers; identical text, no flips.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.served import (
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
    assert result.parseoutcomes() == {"passed": 8 + 1 + 24 + 1 + 8 + 1}, result.stdout.str()
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
