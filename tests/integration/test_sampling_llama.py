"""The ``sampling`` kind against a real llama-server (4 slots) on the tiny adder: it passes on
the faithful server, and fails the right item, naming the parameter, when the faulty proxy
(tests/faulty_proxy.py ``drop_fields``) removes one parameter from every sampled request
(the server's own default applies instead: ``top_p`` 0.95, ``top_k`` 40, ``min_p`` 0.05,
``temperature`` 0.8, a random seed).

The prompt is ``31+`` (``sp001`` of the bundled ``sampling`` suite): at its first position the
adder's raw probabilities are 0.318, 0.318, 0.284 ('5', '4', '3'), then 0.028 ('6') and
0.026 ('2'), so ``top_p`` 0.9 keeps three tokens and 0.95 four; ``min_p`` 0.1 keeps three
(0.1 x 0.318 = 0.032 > 0.028) and 0.05 five; ``top_k`` 3 keeps three and 40 all. A dropped
truncation therefore draws '6' in about 3% of the requests: outside the support, a failure at
once (the chance that 300 draws miss it is 0.97^300 < 1e-3). A dropped temperature (1.5 ->
0.8) shows in the distribution llama-server reports it drew from (``post_sampling_probs``),
compared with the expected one directly.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faulty_proxy import Fault, FaultyProxy
from tests.integration.served import llama_at, llama_flags, llama_server
from tests.plugin.conftest import INI
from tests.plugin.helpers import junit_outcomes


@pytest.fixture(scope="module")
def llama(
    llama_server_bin: Path, tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A real llama-server with 4 slots, started here so a proxy can sit in front of it."""
    workdir = tmp_path_factory.mktemp("llama")
    with llama_server(llama_server_bin, tiny_gguf, workdir, llama_flags(4, 256)) as url:
        yield url


def _write(pytester: pytest.Pytester, adder: str, url: str, check: str) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(
        ".yaml",
        infercheck=(
            f"models:\n  adder: {adder}\nbackends:\n{llama_at(url)}"
            f"suites: [{{suite: sampling, limit: 1}}]\nchecks:\n{check}"
        ),
    )


def _run(pytester: pytest.Pytester) -> tuple[pytest.RunResult, dict[str, str]]:
    """The run (a subprocess: the proxy lives here) and each item's outcome by name."""
    result = pytester.runpytest_subprocess("-q", "--junitxml=out.xml", "-p", "no:cacheprovider")
    return result, junit_outcomes(pytester.path / "out.xml")


FAITHFUL = """\
  - sampling: {target: adder@llama, samples: 300}
    params:
      - {temperature: 1.5}
      - {temperature: 1.0, top_k: 3}
      - {temperature: 1.0, top_p: 0.9}
      - {temperature: 1.0, min_p: 0.1}
    positions: 1
    seed: true
"""


def test_llama_server_samples_what_its_parameters_define(
    pytester: pytest.Pytester, llama: str, adder: str
) -> None:
    _write(pytester, adder, llama, FAITHFUL)
    result, items = _run(pytester)
    assert result.ret == 0, result.stdout.str()
    assert len(items) == 6 and set(items.values()) == {"passed"}, items
    result.stdout.fnmatch_lines(["*sampling(adder)*adder@llama*4/4*0*PASS*"])


TRUNCATED = """\
  - sampling: {{target: adder@llama, samples: 300}}
    params:
      - {{temperature: 1.0, {dropped}: {value}}}
      - {{temperature: 1.0, {other}: {other_value}}}
    positions: 1
"""
VALUES = {"top_k": 3, "top_p": 0.9, "min_p": 0.1}


@pytest.mark.parametrize(
    ("dropped", "other", "failing", "passing"),
    [
        ("top_p", "top_k", "t1-p0.9", "t1-k3"),
        ("top_k", "top_p", "t1-k3", "t1-p0.9"),
        ("min_p", "top_k", "t1-minp0.1", "t1-k3"),
    ],
)
def test_a_dropped_truncation_fails_its_item_naming_it(
    pytester: pytest.Pytester,
    llama: str,
    adder: str,
    dropped: str,
    other: str,
    failing: str,
    passing: str,
) -> None:
    """The draws are asked 4 at a time (``n_cmpl`` up to the server's 4 slots). Every sampled
    request carries all three truncations (the unset ones at their neutral
    values), so the proxy drops the field from both items' draws; the server's default
    (0.95, 40, 0.05) keeps the other item's three tokens, so that item still passes."""
    check = TRUNCATED.format(
        dropped=dropped, value=VALUES[dropped], other=other, other_value=VALUES[other]
    )
    with FaultyProxy(llama, Fault(drop_fields=frozenset({dropped}))) as proxy:
        _write(pytester, adder, proxy.url, check)
        _, items = _run(pytester)
        # every draw request of both items (n_cmpl 4: 4 slots) and their post-sampling ones
        assert proxy.altered == 150 + 2
    assert items[f"sp001[{passing}-pos0]"] == "passed", items
    failed = {name: why for name, why in items.items() if why != "passed"}
    assert set(failed) == {f"sp001[{failing}-pos0]", "aggregate"}, items
    why = failed[f"sp001[{failing}-pos0]"]
    assert "sampled outside the support" in why and f"excluded by {dropped}" in why, why


def test_a_dropped_temperature_fails_by_the_reported_distribution(
    pytester: pytest.Pytester, llama: str, adder: str
) -> None:
    check = """\
  - sampling: {target: adder@llama, samples: 400}
    params:
      - {temperature: 1.5}
    positions: 1
"""
    with FaultyProxy(llama, Fault(drop_fields=frozenset({"temperature"}))) as proxy:
        _write(pytester, adder, proxy.url, check)
        _, items = _run(pytester)
    why = items["sp001[t1.5-pos0]"]
    # llama-server reports the distribution it drew from (post_sampling_probs): at 0.8, not
    # 1.5; the item names the token furthest from the expected probability.
    assert "temperature 1.5 at position 0: the engine's post-sampling probabilities differ" in why
    assert re.search(r"token \d+ '\d' 0\.\d+ vs 0\.\d+ expected", why), why


def test_an_ignored_seed_fails_the_seed_item(
    pytester: pytest.Pytester, llama: str, adder: str
) -> None:
    check = """\
  - sampling: {target: adder@llama, samples: 50}
    params:
      - {temperature: 1.5}
    positions: 1
    seed: true
"""
    with FaultyProxy(llama, Fault(drop_fields=frozenset({"seed"}))) as proxy:
        _write(pytester, adder, proxy.url, check)
        _, items = _run(pytester)
    assert items["sp001[t1.5-pos0]"] == "passed", items
    assert "seed 1234 gave" in items["sp001[seed]"], items
