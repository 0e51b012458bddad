"""Penalties and ``logit_bias`` in the ``sampling`` kind on mlx-lm in-process (real mlx on
the tiny adder): its logits processors shift the raw logits as ``make_logits_processors``
documents, so the faithful engine passes every item; an mlx sampler that drops one of them
(monkeypatched in the run's conftest) fails its items, naming the parameter.

On ``1+1+1+1+`` (prompt ids ``1, 52, 46, 52, 46, ...``) the adder's next token is ``53``
(p 0.76) or the repeated ``52`` (p 0.24, raw logit 16.75 > 0): presence, frequency and
repetition penalties all move mass off ``52``; ``logit_bias {53: -100}`` bans the greedy
token and ``{59: 100}`` forces ``59``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_sampling_mlx import _items
from tests.plugin.conftest import INI

SUITE = (
    '{"id": "sp012", "category": "repeat", "prompt": "1+1+1+1+", "max_tokens": 8}\n'
    '{"id": "sp013", "category": "repeat", "prompt": "99+99+99+", "max_tokens": 8}\n'
)
CHECK = """\
  - sampling: {target: adder, samples: 2000}
    params:
      - {temperature: 1.0, presence_penalty: 1.0}
      - {temperature: 1.0, frequency_penalty: 0.5}
      - {temperature: 1.0, repetition_penalty: 1.3}
      - {temperature: 1.0, top_k: 3, presence_penalty: 0.5}
      - {temperature: 1.0, logit_bias: {53: -100, 52: -100}}
      - {temperature: 1.0, logit_bias: {59: 100}}
    positions: 2
"""
DROP = """\
import dataclasses
from pytest_infercheck.backends import mlx_sampling
_processors = mlx_sampling.mlx_processors

def _dropping(params):
    return _processors(dataclasses.replace(params, {field}))

mlx_sampling.mlx_processors = _dropping
"""


def _run(pytester: pytest.Pytester, adder: Path, conftest: str | None = None) -> dict[str, str]:
    pytester.makefile(".ini", pytest=INI)
    (pytester.path / "repeat.jsonl").write_text(SUITE)
    lines = ["models:", f"  adder: {{path: '{adder}'}}"]
    lines += ["backends:", "  local: {kind: mlx-lm, dtype: float32}"]
    lines += ["suites: [{suite: ./repeat.jsonl}]", "checks:", CHECK]
    pytester.makefile(".yaml", infercheck="\n".join(lines) + "\n")
    if conftest is not None:
        pytester.makeconftest(conftest)
    pytester.runpytest_subprocess("-q", "--junitxml=out.xml", "-p", "no:cacheprovider")
    return _items(pytester)


def test_mlx_lm_applies_the_penalties_and_the_bias_it_is_given(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    items = _run(pytester, tiny_models["bf16"])
    assert len(items) == 2 * 6 * 2 + 1, items
    failed = {k: v for k, v in items.items() if v != "passed"}
    assert failed == {}, failed


@pytest.mark.parametrize(
    ("field", "item", "named"),
    [
        ("presence_penalty=None", "sp012[t1-pres1-pos0]", "without presence_penalty"),
        ("frequency_penalty=None", "sp012[t1-freq0.5-pos0]", "without frequency_penalty"),
        ("repetition_penalty=None", "sp012[t1-rep1.3-pos0]", "without repetition_penalty"),
        ("logit_bias=()", "sp012[t1-bias53:-100+52:-100-pos0]", "logit_bias -100 on token 53"),
        ("logit_bias=()", "sp012[t1-bias59:100-pos0]", "logit_bias +100 forces token 59"),
    ],
)
def test_a_dropped_penalty_or_bias_fails_naming_it(
    pytester: pytest.Pytester, tiny_models: dict[str, Path], field: str, item: str, named: str
) -> None:
    items = _run(pytester, tiny_models["bf16"], DROP.format(field=field))
    assert named in items[item], items[item]
