"""Draws known by their text only (a server that returns neither logprobs nor token ids, as
vllm-mlx and mlx_lm.server do): a draw whose text is the text of no token of the reference's
vocabulary cannot be counted, and its item fails naming that text, never passes on the draws
it could count. A fake server answers every draw with the same text: the byte-level symbol
'Ā' of the adder's id 3 (the byte 0x00), which mlx-lm's streaming detokenizer sends instead
of ``\\x00`` (``tests/integration/test_sampling_vllm_mlx.py``), then, as the control, '5', the
text of one token, which is counted (and, every draw being '5', fails as a distribution off).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.plugin.conftest import INI
from tests.plugin.helpers import junit_outcomes

from .fake_server import Reply, Script, fake_server

SAMPLES = 20


def _outcomes(pytester: pytest.Pytester, model: Path, text: str) -> tuple[dict[str, str], int]:
    """Each item's outcome (``passed`` or its failure message) when every draw is ``text``,
    and the number of draw requests (at the item's temperature) the server saw."""
    body = {"choices": [{"index": 0, "text": text, "finish_reason": "length"}]}
    script = Script([Reply(body=body)])
    with fake_server(script) as url:
        pytester.makefile(".ini", pytest=INI)
        pytester.makefile(".jsonl", prompts='{"id": "sp001", "prompt": "31+", "max_tokens": 8}\n')
        pytester.makefile(
            ".yaml",
            infercheck=f"""\
models:
  adder: {{path: '{model}'}}
backends:
  ref: {{kind: mlx-lm}}
  srv: {{kind: openai, url: '{url}', chat: false}}
suites: [prompts.jsonl]
checks:
  - sampling: {{target: adder@srv, reference: adder@ref, samples: {SAMPLES}, per_request: 1}}
    params:
      - {{temperature: 1.0}}
    positions: 1
    seed: false
""",
        )
        pytester.runpytest_subprocess("-q", "--junitxml=out.xml", "-p", "no:cacheprovider")
    out = junit_outcomes(pytester.path / "out.xml")
    draws = sum(1 for r in script.requests if (r["json"] or {}).get("temperature") == 1.0)
    return out, draws


def test_a_draw_whose_text_is_no_tokens_fails_its_item_naming_it(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    items, draws = _outcomes(pytester, tiny_models["bf16"], "Ā")
    assert draws == SAMPLES, items
    item = items["sp001[t1-pos0]"]
    assert item.startswith("alpha: not measured"), items
    assert "drew 'Ā', the text of no one token of adder@ref's vocabulary" in item, items
    assert "sp001[t1-pos0]" in items["aggregate"], items


def test_a_draw_whose_text_is_one_tokens_is_counted(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    items, draws = _outcomes(pytester, tiny_models["bf16"], "5")
    assert draws == SAMPLES, items
    item = items["sp001[t1-pos0]"]
    assert "not measured" not in item, items
    assert "sampled distribution differs from the expected" in item, items
