"""request-conformance on a real llama-server (the tiny tool model, which answers in words
of several characters a token, on two slots so that ``n: 2`` is taken), faithful and behind
a faulty proxy: each dropped parameter (``stop``, ``n_predict``, ``n_cmpl``, ``ignore_eos``),
the stop string returned, ``usage`` miscounted (prompt and completion) and the wrong number
of top logprobs fails the right items, naming the parameter and both values; a parameter
the server refuses (HTTP 400, the readiness probe's request included) makes its probes
unsupported, not failed.

Measured on llama-cpp-python 0.3.36's llama.cpp: stop strings of one token, two tokens and
spanning a token boundary (starting inside a token) are honoured streamed and not (text cut
before the stop string, ``stop_type: word``); ``n_predict`` is exact with ``finish_reason
length``; ``tokens_evaluated`` is the prompt's ids and ``tokens_predicted`` the tokens
returned, end-of-sequence included; ``n_probs: 3`` gives three top logprobs per token;
``ignore_eos`` runs to ``n_predict``; ``n_cmpl: 2`` answers two choices; ``min_tokens`` and
``include_stop`` are not taken (not exercised, from the matrix).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faulty_proxy import Fault, FaultyProxy
from tests.integration.served import llama_flags, running
from tests.plugin.conftest import INI

SUITE = (
    '{"id": "t01", "prompt": "what is 57 plus 444?", "max_tokens": 24}\n'
    '{"id": "t02", "prompt": "What is the capital of Norway?", "max_tokens": 24}\n'
)
ONE = SUITE.splitlines(keepends=True)[0]
"""The fault runs' suite: its first prompt (a run of every probe costs seconds a prompt on
a loaded machine, and the module has two minutes)."""
CHECK = "  - request-conformance: {target: tool@llama}"


@pytest.fixture(scope="module")
def tool_llama(
    llama_server_bin: Path, tiny_tool_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """llama-server on the tool model's f32 GGUF with its template (``--jinja``), exact f32
    flags, two slots (``n_cmpl`` is at most the slots) of 128 tokens; a request without
    ``n_predict`` generates 32 tokens (``-n 32``: a dropped ``n_predict`` costs little)."""
    flags = llama_flags(slots=2, context=256).split()

    def command(port: int) -> list[str]:
        host = ["--host", "127.0.0.1", "--port", str(port)]
        model = ["-m", str(tiny_tool_gguf), "--jinja", "-n", "32"]
        return [str(llama_server_bin), *model, *host, *flags]

    with running("llama-server", command, tmp_path_factory.mktemp("reqconf-llama")) as url:
        yield url


def run(
    pytester: pytest.Pytester, url: str, model: Path, check: str = CHECK, suite: str = SUITE
) -> Any:
    """The check on the tool model (``model``: its folder, the GGUF inside) served at
    ``url``."""
    gguf = model / "gguf" / "tiny-tool-f32.gguf"
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", plain=suite)
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  tool: {{path: '{model}', gguf: '{gguf}'}}\n"
        f"backends:\n  llama: {{kind: llama-server, url: '{url}'}}\n"
        f"suites: [plain.jsonl]\nchecks:\n{check}\n",
    )
    return pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "-rA", "--infercheck-results=results.json"
    )


def items(pytester: pytest.Pytester) -> dict[str, dict[str, Any]]:
    """Item name -> its JSON result."""
    results = json.loads((pytester.path / "results.json").read_text())
    return {item["name"]: item for item in results["items"]}


def failed(pytester: pytest.Pytester) -> dict[str, list[str]]:
    return {
        name: item["violations"]
        for name, item in items(pytester).items()
        if item["outcome"] == "failed" and name != "aggregate"
    }


def test_faithful_llama_server_conforms(
    pytester: pytest.Pytester, tool_llama: str, tiny_tool: Path, tiny_tool_gguf: Path
) -> None:
    assert tiny_tool_gguf == tiny_tool / "gguf" / "tiny-tool-f32.gguf"
    result = run(pytester, tool_llama, tiny_tool)
    out = result.stdout.str()
    assert failed(pytester) == {}, out[-4000:]
    data = {n: i["data"] for n, i in items(pytester).items()}
    for prompt in ("t01", "t02"):
        reference = data[f"{prompt}[usage]"]["reference"]
        spanning = data[f"{prompt}[stop-spanning]"]
        (stop,) = spanning["asked"]["stop"]
        cut = reference.find(stop)
        # the stop string starts inside a token: its first character ends one
        assert cut > 0 and len(stop) == 2, (reference, stop)
        assert [(a["mode"], a["text"], a["finish_reason"]) for a in spanning["answers"]] == [
            ("non-streamed", reference[:cut], "stop"),
            ("streamed", reference[:cut], "stop"),
        ]
        usage = data[f"{prompt}[usage]"]["answers"]
        assert [a["completion_tokens"] for a in usage] == [usage[0]["tokens"]] * 2
        assert data[f"{prompt}[n]"]["answers"][0]["choices"] == 2
        m = data[f"{prompt}[max-tokens]"]["asked"]["max_tokens"]
        assert [a["tokens"] for a in data[f"{prompt}[max-tokens]"]["answers"]] == [m, m]
        eos = data[f"{prompt}[ignore-eos]"]
        assert [a["tokens"] for a in eos["answers"]] == [eos["asked"]["max_tokens"]] * 2
        assert data[f"{prompt}[min-tokens]"]["not_sent"] == (
            "not exercised: backend 'llama' (llama-server) does not take min_tokens "
            "(taken by vllm, sglang)"
        )
    assert data["aggregate"]["probes"]["stop-spanning"] == {
        "conforming": 2,
        "failed": 0,
        "not sent": 0,
    }


FAULTS = {
    "drop-stop-n-ignore_eos-wrong-n_probs-miscount-completion": (
        Fault(
            drop_params=frozenset({"stop", "n_cmpl", "ignore_eos"}),
            set_params=(("n_probs", 2),),
            usage_offset=1,
        ),
        {
            "stop-token": "(non-streamed): text ",
            "stop-tokens": "(non-streamed): text ",
            "stop-spanning": "(non-streamed): text ",
            "n": "n 2 (non-streamed): 1 choices != 2 asked",
            "ignore-eos": "ignore_eos (non-streamed): finish_reason 'stop' != 'length'",
            "logprobs": "logprobs 3 (non-streamed): 2 top logprobs at token 0 != 3 asked",
            "usage": "usage.completion_tokens {c} != {t} tokens returned (non-streamed)",
        },
    ),
    "return-stop-drop-n_predict-miscount-prompt": (
        Fault(return_stop=True, drop_params=frozenset({"n_predict"}), prompt_usage_offset=1),
        {
            "stop-token": "(the stop string returned)",
            "stop-tokens": "(the stop string returned)",
            "stop-spanning": "(the stop string returned)",
            "max-tokens": "finish_reason 'stop' != 'length'",
            "ignore-eos": "tokens returned != max_tokens",
            "usage": "usage.prompt_tokens {p} != {s} tokens sent (non-streamed)",
        },
    ),
}
"""Two runs, each with faults that hit different probes (a run per fault would take over
the module's two minutes on a loaded machine): the probes each fails, and what the finding
says (``{c}``, ``{t}``: the completion count reported and the tokens returned; ``{p}``,
``{s}``: the prompt count reported and the tokens sent). The prompt count is one too many:
one too few is a truncated prompt, which fails every generation's item
(:mod:`pytest_infercheck.backends.prompt_count`), not the ``usage`` probe alone."""


@pytest.mark.parametrize("name", list(FAULTS))
def test_each_fault_fails_its_probe_naming_the_parameter(
    pytester: pytest.Pytester, tool_llama: str, tiny_tool: Path, name: str
) -> None:
    fault, broken = FAULTS[name]
    with FaultyProxy(tool_llama, fault) as proxy:
        run(pytester, proxy.url, tiny_tool, suite=ONE)
    found = failed(pytester)
    assert set(found) == {f"t01[{probe}]" for probe in broken}, found
    data = {n: i["data"] for n, i in items(pytester).items()}
    for item, violations in found.items():
        probe = item[4:-1]
        answer = data[item]["answers"][0]
        named = broken[probe].format(
            c=answer["completion_tokens"],
            t=answer["tokens"],
            p=answer["prompt_tokens"],
            s=(answer["prompt_tokens"] or 0) - 1,
        )
        assert any(named in v for v in violations), (item, named, violations)
    assert items(pytester)["aggregate"]["outcome"] == "failed"


def test_a_probe_the_engine_does_not_take_is_a_collection_error(
    pytester: pytest.Pytester, tool_llama: str, tiny_tool: Path
) -> None:
    check = "  - request-conformance: {target: tool@llama, probes: [stop-token, min-tokens]}"
    result = run(pytester, tool_llama, tiny_tool, check)
    out = result.stdout.str()
    assert result.ret != 0
    assert (
        "infercheck.yaml:7: checks[0].request-conformance.probes[1]: probe min-tokens: backend "
        "'llama' (llama-server) does not take min_tokens (taken by vllm, sglang)" in out
    ), out[-3000:]


def test_a_parameter_the_server_refuses_at_the_probe_is_unsupported(
    pytester: pytest.Pytester, tool_llama: str, tiny_tool: Path
) -> None:
    """The server refuses ``n_cmpl`` (HTTP 400) and ``ignore_eos`` on every request, the
    readiness probe's included: their probes are unsupported with the server's words, not
    failed; the others are judged as ever."""
    check = "  - request-conformance: {target: tool@llama, probes: [n, ignore-eos, max-tokens]}"
    with FaultyProxy(tool_llama, Fault(refuse_params=frozenset({"n_cmpl", "ignore_eos"}))) as proxy:
        result = run(pytester, proxy.url, tiny_tool, check, suite=ONE)
    found = items(pytester)
    assert {n: i["outcome"] for n, i in found.items()} == dict.fromkeys(found, "passed"), (
        result.stdout.str()[-3000:]
    )
    assert found["t01[n]"]["data"]["not_sent"] == (
        'unsupported: a request with n: HTTP 400: {"error": {"code": 400, "message": '
        '"faulty proxy: field not supported: n_cmpl", "type": "invalid_request_error"}}'
    )
    assert found["t01[ignore-eos]"]["data"]["not_sent"].startswith(
        "unsupported: a request with ignore_eos: HTTP 400"
    )
    assert found["t01[max-tokens]"]["data"]["not_sent"] is None
    counts = found["aggregate"]["data"]["probes"]
    assert counts["n"] == {"conforming": 0, "failed": 0, "not sent": 1}
    assert counts["max-tokens"] == {"conforming": 1, "failed": 0, "not sent": 0}
