"""The ``sampling`` kind on mlx-lm in-process (real mlx on the tiny adder, no mocks): its
sampler draws what ``make_sampler``'s documented chain defines at every position, and its
seed replays a sample; the same draws judged against another model's logprobs (the 4-bit
adder as ``reference``) fail, naming the parameters and the token drawn outside the support.
The bundled ``sampling`` suite's stated entropies are re-measured."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO
from pytest_infercheck.backends import GenerationParams
from pytest_infercheck.backends.mlx_lm import MlxLmBackend, MlxModelSpec
from pytest_infercheck.suites import load_suite
from tests.plugin.conftest import INI
from tests.plugin.helpers import junit_outcomes


def _write(pytester: pytest.Pytester, models: dict[str, Path], check: str, limit: int) -> None:
    pytester.makefile(".ini", pytest=INI)
    lines = ["models:", *(f"  {k}: {{path: '{v}'}}" for k, v in models.items())]
    lines += ["backends:", "  local: {kind: mlx-lm, dtype: float32}"]
    lines += [f"suites: [{{suite: sampling, limit: {limit}}}]", "checks:", check]
    pytester.makefile(".yaml", infercheck="\n".join(lines) + "\n")


def _items(pytester: pytest.Pytester) -> dict[str, str]:
    return junit_outcomes(pytester.path / "out.xml")


CHECK = """\
  - sampling: {target: adder, samples: 2000}
    params:
      - {temperature: 1.0}
      - {temperature: 1.5, top_k: 3}
      - {temperature: 1.0, top_p: 0.9}
      - {temperature: 0.7, min_p: 0.1}
    positions: 3
    seed: true
"""


def test_mlx_lm_samples_what_its_parameters_define(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    _write(pytester, {"adder": tiny_models["bf16"]}, CHECK, limit=3)
    result = pytester.runpytest_subprocess("-q", "--junitxml=out.xml", "-p", "no:cacheprovider")
    items = _items(pytester)
    assert len(items) == 3 * 4 * 3 + 3 + 1, items
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*sampling(adder)*adder@local*36/36*0*PASS*"])


def test_draws_judged_against_another_models_logprobs_fail(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    """After ``28+`` the 4-bit adder's top three tokens are '5', '7', '6' and the bf16
    adder's include '4': the bf16 draws under ``top_k 3`` fall outside the support the 4-bit
    reference defines, and its untruncated draws differ from the 4-bit distribution."""
    models = {"adder": tiny_models["bf16"], "q4": tiny_models["q4"]}
    check = CHECK.replace("samples: 2000}", "samples: 2000, reference: q4}").replace(
        "    seed: true\n", ""
    )
    _write(pytester, models, check.replace("positions: 3", "positions: 1"), limit=2)
    pytester.runpytest_subprocess("-q", "--junitxml=out.xml", "-p", "no:cacheprovider")
    items = _items(pytester)
    why = items["sp002[t1.5-k3-pos0]"]
    assert "temperature 1.5, top_k 3 at position 0: sampled outside the support" in why, why
    assert re.search(r"token 55 '4' x\d+ \(excluded by top_k 3\)", why), why
    assert "sampled distribution differs from the expected" in items["sp002[t1-pos0]"], items
    assert "Holm" in items["aggregate"] or "items failed" in items["aggregate"]


def test_the_suites_stated_entropies(tiny_models: dict[str, Path]) -> None:
    """``suites/README.md`` states each ``sampling`` prompt's next-token entropies on the tiny
    adder (nats, temperature 1, positions 0-2 of its greedy continuation); they are what
    mlx-lm measures, and every prompt has three positions (no end of sequence before)."""
    table = (REPO / "suites" / "README.md").read_text()
    stated = {
        m[0]: [float(x) for x in m[1:4]]
        for m in re.findall(
            r"^\| (sp\d{3}) \| \w+ \| `[^`]*` \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$",
            table,
            re.M,
        )
    }
    suite = load_suite("sampling", REPO)
    assert sorted(stated) == sorted(p.id for p in suite.prompts)
    backend = MlxLmBackend("adder", MlxModelSpec(str(tiny_models["bf16"]), dtype="float32"))
    for prompt in suite.prompts:
        rendered = backend.render_sync(prompt.text, None, thinking=False)
        g = backend.generate_sync(rendered, GenerationParams(3), full_logprobs=True)
        assert g.full_logprobs is not None and len(g.full_logprobs) == 3, prompt.id
        p = np.exp(g.full_logprobs.astype(np.float64))
        h = [float(-(r[r > 0] * np.log(r[r > 0])).sum()) for r in p]
        assert h == pytest.approx(stated[prompt.id], abs=0.006), prompt.id
