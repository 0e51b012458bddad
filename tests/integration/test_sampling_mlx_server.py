"""The ``sampling`` kind against the real mlx_lm.server 0.32.2 (plugin-started, ``kind:
openai``, raw completions) on the tiny adder, with mlx-lm in process (the same bf16 weights
and tokenizer) as the reference.

mlx_lm.server ignores ``n`` (one choice for ``n: 50``), so the check asks one draw per
request (``per_request: 1``); its logprob entries are not the drawn tokens (its top-k bug,
``test_mlx_server_logprobs.py``), so the prompt goes as the reference's ids' exact text
(``<s>31+``) and each draw is counted by its text. An ``openai`` backend's parameters are
judged where the engines' orders agree (a temperature alone, one truncation at temperature
1): mlx_lm.server's own order (mlx-lm's ``make_sampler``) gives the same distribution there.

Measured:

- with its prompt cache off (``--prompt-cache-size 0``), every position item and the seed
  item pass: it samples what its parameters define, and honours the seed;
- with ``n: 50`` asked, every item fails saying the engine answered fewer choices;
- with its prompt cache on (the default 10 sequences) its generation thread dies when a
  request that joins its running batch has a prompt entirely in the cache (``server.py``
  ``_generate``: the cached prefix leaves no segment, and ``BatchGenerator.insert_segments``
  raises "Sequence N has an empty prompt"): here the draws at position 1 (``<s>31+5``),
  whose prompt a draw at position 0 stored, or now and then one of position 0's own last
  draws (its prompt stored by an earlier draw); every later request is answered HTTP 404
  "generation thread died" (one request at a time, ``max_concurrency: 1``, dies too).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.served import MLX_LM_SERVE, backend
from tests.plugin.conftest import INI
from tests.plugin.helpers import junit_outcomes

CHECK = """\
  - sampling: {{target: adder@mlxserver, reference: adder@ref, samples: {samples}{per}}}
    params:
{params}
    positions: {positions}
    seed: {seed}
"""
PARAMS = """\
      - {temperature: 1.5}
      - {temperature: 1.0, top_k: 3}
      - {temperature: 1.0, top_p: 0.9}
      - {temperature: 1.0, min_p: 0.1}
"""


def _run(
    pytester: pytest.Pytester,
    model: Path,
    *,
    per: str = ", per_request: 1",
    flags: str = " --prompt-cache-size 0",
    samples: int = 400,
    params: str = PARAMS,
    positions: int = 2,
    seed: bool = True,
) -> dict[str, str]:
    """The check on ``sp001`` (``31+``) run in a subprocess: each item's outcome by name
    (``passed`` or its failure message)."""
    hub = pytester.path / "hub"
    hub.mkdir()
    served = backend(
        "mlxserver",
        "openai",
        MLX_LM_SERVE + flags,
        {"HF_HUB_CACHE": str(hub)},
        chat=False,
    )
    check = CHECK.format(
        samples=samples,
        per=per,
        params=params.rstrip("\n"),
        positions=positions,
        seed=str(seed).lower(),
    )
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", prompts='{"id": "sp001", "prompt": "31+", "max_tokens": 8}\n')
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  adder: {{path: '{model}'}}\nbackends:\n  ref: {{kind: mlx-lm}}\n"
        f"{served}suites: [prompts.jsonl]\nchecks:\n{check}",
    )
    pytester.runpytest_subprocess("-q", "--junitxml=out.xml", "-p", "no:cacheprovider")
    return junit_outcomes(pytester.path / "out.xml")


def test_mlx_lm_server_samples_what_its_parameters_define(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    # 200 draws an item, one a request: 1,600 requests (the p-value is valid at any count)
    items = _run(pytester, tiny_models["bf16"], samples=200)
    assert len(items) == 4 * 2 + 1 + 1, items
    assert set(items.values()) == {"passed"}, items


def test_mlx_lm_server_ignoring_n_fails_every_item(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    items = _run(pytester, tiny_models["bf16"], per="", positions=1, seed=False)
    positions = {k: v for k, v in items.items() if k.startswith("sp001[t")}
    assert len(positions) == 4, items
    for name, why in positions.items():
        assert "400 draws asked, 8 returned" in why, (name, why)  # n: 50, 8 requests


def test_mlx_lm_server_dies_on_a_batched_prompt_it_has_cached_whole(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    items = _run(
        pytester,
        tiny_models["bf16"],
        samples=200,
        params="      - {temperature: 1.0}\n",
        seed=False,
        flags="",
    )
    # When the thread dies depends on which request first finds its whole prompt cached while
    # a batch runs: usually a draw at position 1, sometimes one of the last draws at position
    # 0 (a CI run: 198 of 200 drawn there). Either way position 1 never gets its draws, and
    # position 0 either passes or dies the same way; it never fails for another reason.
    died = "HTTP 404: generation thread died"
    assert died in items["sp001[t1-pos1]"], items
    assert items["sp001[t1-pos0]"] == "passed" or died in items["sp001[t1-pos0]"], items
