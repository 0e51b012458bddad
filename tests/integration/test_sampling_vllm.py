"""The ``sampling`` kind against the real vLLM (its CPU build, ``scripts/install_vllm.sh``)
serving the tiny adder in float32 with ``--max-logprobs 259`` (its whole vocabulary, so the
expected distribution is made of full teacher-forced rows): vLLM's sampler (temperature,
then min-p on the tempered probabilities, then top-k, then top-p over the survivors) draws
what its parameters define, 50 draws (``n``) per request.

Its own server (started once for the module, about 4 GB): the session's shared vLLM serves
the realistic Qwen2, whose 151,643-token vocabulary of random weights has no spread
distribution a few thousand draws can test.

The prompts are the ``sampling`` suite's first two, on a backend with ``add_bos: true``:
vLLM's ``/tokenize`` (``add_special_tokens`` true, its default) adds no BOS for the adder,
whose ``tokenizer.json`` post-processor declares none (mlx-lm's ``add_bos`` and llama.cpp's
GGUF ``add_bos_token`` add it), and without it the adder's first token is the end of sequence
with probability 0.97 (nothing to test).

Through the faulty proxy (``drop_fields``) a dropped ``top_p``, temperature or seed fails the
item of that parameter, naming it, and only that item.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faulty_proxy import Fault, FaultyProxy
from tests.integration.conftest import _running_with_env
from tests.integration.served import (
    VLLM_ENV,
    VLLM_FLAGS,
    VLLM_HEALTH_TIMEOUT_S,
    vllm_cpu_command,
)
from tests.plugin.conftest import INI
from tests.plugin.helpers import junit_outcomes

pytestmark = pytest.mark.xdist_group("vllm")


@pytest.fixture(scope="module")
def vllm_adder(
    vllm_python: Path, tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("vllm-adder")
    model = str(tiny_models["bf16"])

    def command(port: int) -> list[str]:
        flags = VLLM_FLAGS.replace("--max-model-len 1024", "--max-model-len 64")
        flags += " --max-logprobs 259"
        return vllm_cpu_command(vllm_python, flags).format(model=model, port=port).split()

    with _running_with_env("vllm", command, workdir, VLLM_ENV, VLLM_HEALTH_TIMEOUT_S) as url:
        yield url


def test_vllm_samples_what_its_parameters_define(
    pytester: pytest.Pytester, vllm_adder: str, tiny_models: dict[str, Path]
) -> None:
    model = tiny_models["bf16"]
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(
        ".yaml",
        infercheck=f"""\
models:
  adder: {{path: '{model}'}}
backends:
  vllm: {{kind: vllm, url: '{vllm_adder}', chat: false, add_bos: true}}
suites: [{{suite: sampling, limit: 2}}]
checks:
  - sampling: {{target: adder@vllm, samples: 1000}}
    params:
      - {{temperature: 1.5}}
      - {{temperature: 1.0, top_k: 3}}
      - {{temperature: 1.0, top_p: 0.9}}
      - {{temperature: 0.7, min_p: 0.1}}
    positions: 2
    seed: true
""",
    )
    result = pytester.runpytest_subprocess("-q", "--junitxml=out.xml", "-p", "no:cacheprovider")
    outcomes = junit_outcomes(pytester.path / "out.xml")
    failed = {k: v for k, v in outcomes.items() if v != "passed"}
    assert result.ret == 0, failed or result.stdout.str()
    assert len(outcomes) == 2 * 4 * 2 + 2 + 1
    result.stdout.fnmatch_lines(["*sampling(adder)*adder@vllm*16/16*0*PASS*"])


def _items(pytester: pytest.Pytester) -> tuple[pytest.RunResult, dict[str, str]]:
    """The run (a subprocess: the proxy lives in this process) and each item's outcome by
    name (``passed`` or its failure message)."""
    result = pytester.runpytest_subprocess("-q", "--junitxml=out.xml", "-p", "no:cacheprovider")
    return result, junit_outcomes(pytester.path / "out.xml")


def _matrix(pytester: pytest.Pytester, model: Path, url: str, check: str) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(
        ".yaml",
        infercheck=f"""\
models:
  adder: {{path: '{model}'}}
backends:
  vllm: {{kind: vllm, url: '{url}', chat: false, add_bos: true}}
suites: [{{suite: sampling, limit: 1}}]
checks:
{check}""",
    )


FAULTS = """\
  - sampling: {target: adder@vllm, samples: 1000}
    params:
      - {temperature: 1.5}
      - {temperature: 1.0, top_k: 3}
      - {temperature: 1.0, top_p: 0.9}
    positions: 1
    seed: true
"""


@pytest.mark.parametrize(
    ("dropped", "failing", "why"),
    [
        # top_p 0.9 keeps '5', '4', '3' (0.318, 0.318, 0.284): vLLM's default 1.0 draws '6'
        # and '2' (0.028, 0.026) about 55 times in 1000
        ("top_p", "sp001[t1-p0.9-pos0]", "excluded by top_p 0.9"),
        # vLLM's default temperature 1.0 instead of 1.5: the tail's share falls from about
        # 0.18 to 0.08 (a G-test far below alpha at 1000 draws)
        ("temperature", "sp001[t1.5-pos0]", "fit the distribution without temperature 1.5"),
        # a random seed per request: four requests of seed 1234 give several outputs
        ("seed", "sp001[seed]", "seed 1234 gave"),
    ],
)
def test_a_dropped_parameter_fails_its_item_naming_it(
    pytester: pytest.Pytester,
    vllm_adder: str,
    tiny_models: dict[str, Path],
    dropped: str,
    failing: str,
    why: str,
) -> None:
    """Through the faulty proxy (``drop_fields``: the field removed from every sampled
    request, so vLLM's own default applies), only the item of the dropped parameter fails,
    and its message names it; the other items (which send the field at its neutral value, or
    at vLLM's default) still pass."""
    with FaultyProxy(vllm_adder, Fault(drop_fields=frozenset({dropped}))) as proxy:
        _matrix(pytester, tiny_models["bf16"], proxy.url, FAULTS)
        _, items = _items(pytester)
        assert proxy.altered > 0
    failed = {name: message for name, message in items.items() if message != "passed"}
    assert set(failed) == {failing, "aggregate"}, items
    assert why in failed[failing], failed[failing]
    assert len(items) == 3 + 1 + 1, items
