"""Penalties and ``logit_bias`` in the ``sampling`` kind against a real llama-server (4
slots) on the tiny adder, prompt ``1+1+1+1+`` (ids ``1, 52, 46, 52, 46, ...``; next token
``53`` p 0.76 or the repeated ``52`` p 0.24). llama-server gives log-probabilities, not raw
logits: presence, frequency and bias are computed from them (the log-sum-exp cancels), the
repetition penalty is not (the item fails as not measured, saying why). The faulty proxy
dropping ``presence_penalty`` or ``logit_bias`` fails its item."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faulty_proxy import Fault, FaultyProxy
from tests.integration.served import llama_at, llama_flags, llama_server
from tests.integration.test_sampling_llama import _run
from tests.plugin.conftest import INI

SUITE = '{"id": "sp012", "category": "repeat", "prompt": "1+1+1+1+", "max_tokens": 8}\n'
CHECK = """\
  - sampling: {target: adder@llama, samples: 300}
    params:
      - {temperature: 1.0, presence_penalty: 1.0}
      - {temperature: 1.0, frequency_penalty: 0.5}
      - {temperature: 1.0, logit_bias: {53: -100}}
      - {temperature: 1.0, repetition_penalty: 1.3}
    positions: 1
"""


@pytest.fixture(scope="module")
def llama(
    llama_server_bin: Path, tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("llama")
    with llama_server(llama_server_bin, tiny_gguf, workdir, llama_flags(4, 256)) as url:
        yield url


def _write(pytester: pytest.Pytester, adder: str, url: str) -> None:
    pytester.makefile(".ini", pytest=INI)
    (pytester.path / "repeat.jsonl").write_text(SUITE)
    pytester.makefile(
        ".yaml",
        infercheck=(
            f"models:\n  adder: {adder}\nbackends:\n{llama_at(url)}"
            f"suites: [{{suite: ./repeat.jsonl}}]\nchecks:\n{CHECK}"
        ),
    )


def test_llama_server_applies_presence_frequency_and_bias(
    pytester: pytest.Pytester, llama: str, adder: str
) -> None:
    _write(pytester, adder, llama)
    _, items = _run(pytester)
    for name in ("t1-pres1", "t1-freq0.5", "t1-bias53:-100"):
        assert items[f"sp012[{name}-pos0]"] == "passed", items
    why = items["sp012[t1-rep1.3-pos0]"]
    assert "repetition_penalty needs the raw logits" in why, why


@pytest.mark.parametrize(
    ("field", "item", "named"),
    [
        ("presence_penalty", "t1-pres1", "presence_penalty 1 at position 0"),
        ("logit_bias", "t1-bias53:-100", "logit_bias -100 on token 53 '2' (a ban): drawn"),
    ],
)
def test_a_dropped_penalty_or_bias_fails_its_item(
    pytester: pytest.Pytester, llama: str, adder: str, field: str, item: str, named: str
) -> None:
    with FaultyProxy(llama, Fault(drop_fields=frozenset({field}))) as proxy:
        _write(pytester, adder, proxy.url)
        _, items = _run(pytester)
    assert items["sp012[t1-freq0.5-pos0]"] == "passed", items
    why = items[f"sp012[{item}-pos0]"]
    assert named in why and ("differ" in why or "a ban" in why), why
