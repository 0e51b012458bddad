"""The ``request-params`` ability probe (``backends/endpoint_probe.py``), on a stub backend:
a parameter is lacking only when the server refuses its request (HTTP 400 or 422, with its
words) while a plain request answers; a 5xx, or a refusal of everything, is not probed (the
check's requests are then made and judged); what answers is offered."""

from __future__ import annotations

import asyncio
from typing import Any

from pytest_infercheck.backends.base import Generation, GenerationParams, PromptInput
from pytest_infercheck.backends.endpoint_probe import param_ability, probe_request_params
from pytest_infercheck.backends.http import HttpError


class Stub:
    """Answers every request but those ``refuse`` maps (by the first parameter asked)."""

    def __init__(self, refuse: dict[str, HttpError], plain: HttpError | None = None) -> None:
        self.refuse, self.plain = refuse, plain

    async def render(self, text: str, system: Any, thinking: bool) -> PromptInput:
        return PromptInput(text, None, templated=False)

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        asked = params.asked()
        name = next((n for n in asked if n != "seed"), "seed" if asked else None)
        if name is None and self.plain is not None:
            raise self.plain
        if name in self.refuse:
            raise self.refuse[name]
        return Generation("x", [1], "length")


def probe(stub: Stub, names: set[str]) -> Any:
    return asyncio.run(probe_request_params(stub, frozenset(names)))  # type: ignore[arg-type]


def test_a_refused_parameter_is_lacking_with_the_servers_words() -> None:
    refused = HttpError("refused", 400, '{"error": "n_cmpl must be <= 1"}')
    broken = HttpError("failed", 500, "boom")
    abilities = probe(Stub({"n": refused, "stop": broken}), {"n", "stop", "logprobs"})
    assert abilities.lacking == {
        param_ability("n"): 'a request with n: HTTP 400: {"error": "n_cmpl must be <= 1"}'
    }
    assert abilities.offered == {param_ability("logprobs")}
    lacking = abilities.unsupported(param_ability("n"), "probe n")
    assert lacking is not None and lacking.probed
    # a 5xx is no evidence of a missing parameter: not probed, the probe's requests are made
    assert abilities.unsupported(param_ability("stop"), "probe stop-token") is None


def test_nothing_is_lacking_when_the_plain_request_fails_too() -> None:
    refused = HttpError("refused", 400, "bad request")
    abilities = probe(Stub({"n": refused}, plain=refused), {"n", "stop"})
    assert abilities.lacking == {}
