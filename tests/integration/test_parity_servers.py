"""stream-parity and endpoint-parity on real servers, and on faulty proxies in front of them.

- llama-server (f32 GGUF, a chat template file): the native ``/completion`` streamed and not
  give the same token ids and logprobs; ``/v1/completions`` with the template rendered by
  ``/apply-template``, ``/v1/chat/completions`` and ``/v1/messages`` give the same text.
- vllm-mlx (simple and continuous-batching engines) and mlx_lm.server, started by the
  plugin: streamed and not give the same text; vllm-mlx's three endpoints agree on a copy of
  the adder with a chat template (without one its chat endpoints answer HTTP 500), and it
  survives the hostile requests of cache-pollution unchanged (``max_tokens: 0``: HTTP 422).
- A proxy that drops the 2nd content chunk of every stream fails stream-parity; one that
  alters every 2nd generation response (the other endpoint's, given the order of requests:
  reference then other, prompt by prompt) fails endpoint-parity.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faulty_proxy import Fault, FaultyProxy
from tests.integration.served import chat_model, llama_at, mlx_lm_backend, vllm_backends
from tests.plugin.conftest import INI
from tests.plugin.helpers import ADDITION, junit_properties, suite_jsonl

PROMPTS = ADDITION[:4]


def write_project(pytester: pytest.Pytester, backends: str, checks: str, model: str) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", addition=suite_jsonl(PROMPTS))
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  adder: {model}\nbackends:\n{backends}\n"
        f"suites: [addition.jsonl]\nchecks:\n{checks}\n",
    )


def run(pytester: pytest.Pytester) -> tuple[pytest.RunResult, dict[str, dict[str, str]]]:
    result = pytester.runpytest_subprocess("-q", "--junitxml=out.xml", "-p", "no:cacheprovider")
    return result, junit_properties(pytester.path / "out.xml")


LLAMA_CHECKS = """\
  - stream-parity: adder@llama
  - endpoint-parity: {target: adder@llama, endpoints: [completions, chat, messages]}"""


def test_parity_passes_on_llama_server(
    pytester: pytest.Pytester, llama_url: str, adder: str
) -> None:
    write_project(pytester, llama_at(llama_url), LLAMA_CHECKS, adder)
    result, props = run(pytester)
    assert result.parseoutcomes() == {"passed": 4 + 1 + 8 + 1}, result.stdout.str()
    assert props["s01"]["infercheck_match"] == "True"
    assert props["s01[messages]"]["infercheck_similarity"] == "1.0"
    assert "streamed vs not" in result.stdout.str()


def test_stream_parity_fails_when_a_chunk_is_dropped(
    pytester: pytest.Pytester, llama_url: str, adder: str
) -> None:
    with FaultyProxy(llama_url, Fault(drop_stream_chunk=True)) as proxy:
        write_project(pytester, llama_at(proxy.url), "  - stream-parity: adder@llama", adder)
        result, props = run(pytester)
    # every answer of these prompts has two digits, so its 2nd content chunk is a digit
    assert result.parseoutcomes() == {"failed": 4 + 1}, result.stdout.str()
    assert props["s01"]["infercheck_first_divergence"] == "1"
    assert "the streamed output differs from the non-streamed one" in result.stdout.str()


def test_endpoint_parity_fails_when_one_endpoint_is_altered(
    pytester: pytest.Pytester, llama_url: str, adder: str
) -> None:
    with FaultyProxy(llama_url, Fault(perturb_every=2)) as proxy:
        checks = "  - endpoint-parity: {target: adder@llama, endpoints: [completions, chat]}"
        write_project(pytester, llama_at(proxy.url), checks, adder)
        result, props = run(pytester)
        assert proxy.altered == len(PROMPTS)
    assert result.parseoutcomes() == {"failed": 4 + 1}, result.stdout.str()
    assert props["s01[chat]"]["infercheck_match"] == "False"


def test_parity_passes_on_vllm_mlx_and_mlx_lm_server(
    pytester: pytest.Pytester,
    tiny_models: dict[str, Path],
    vllm_mlx_bin: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    folder = chat_model(tiny_models["bf16"], tmp_path_factory.mktemp("chat") / "adder-chat")
    hub = pytester.path / "hub"
    hub.mkdir()
    backends = vllm_backends(vllm_mlx_bin, hub) + mlx_lm_backend(hub)
    checks = """\
  - stream-parity: adder@vllm
  - stream-parity: adder@vllmcb
  - stream-parity: adder@mlxserver
  - endpoint-parity: {target: adder@vllm, endpoints: [completions, chat, messages]}
  - cache-pollution: adder@vllm"""
    write_project(pytester, backends, checks, f"{{path: '{folder}'}}")
    result, props = run(pytester)
    assert result.parseoutcomes() == {"passed": 3 * (4 + 1) + 8 + 1 + 5 + 1}, result.stdout.str()
    assert props["s01[messages]"]["infercheck_similarity"] == "1.0"
    assert props["max-tokens-0"]["infercheck_alive"] == "True"
