"""Which parameters each backend kind takes, the refusal's words, and the YAML model of a
parameter set."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pytest_infercheck.backends.base import BackendError, GenerationParams
from pytest_infercheck.backends.params import (
    PARAM_NAMES,
    TAKEN,
    check_taken,
    neutral_for,
    refusal,
    taken,
)
from pytest_infercheck.backends.registry import BACKEND_NAMES
from pytest_infercheck.request_params import RequestParams


def test_every_backend_kind_declares_what_it_takes() -> None:
    assert set(TAKEN) == set(BACKEND_NAMES)
    assert TAKEN["vllm"] == frozenset(PARAM_NAMES)
    assert "min_tokens" not in TAKEN["llama-server"] and "n" in TAKEN["llama-server"]
    assert {"stop", "n", "min_tokens", "ignore_eos"}.isdisjoint(TAKEN["mlx-lm"])
    # vllm-mlx takes logit_bias on its chat request only (0.6.0's CompletionRequest has none)
    assert "logit_bias" in taken("vllm-mlx", None) and "logit_bias" in taken("vllm-mlx", True)
    assert "logit_bias" not in taken("vllm-mlx", False)


def test_refusal_names_the_backend_the_parameter_and_who_takes_it() -> None:
    assert refusal("llama", "llama-server", None, "top_p") is None
    assert refusal("llama", "llama-server", None, "min_tokens") == (
        "backend 'llama' (llama-server) does not take min_tokens (taken by vllm, sglang)"
    )
    assert refusal("vm", "vllm-mlx", False, "logit_bias") == (
        "backend 'vm' (vllm-mlx) does not take logit_bias on /v1/completions (chat: false) "
        "(taken by mlx-lm, llama-server, vllm, vllm-mlx, openai, sglang)"
    )
    with pytest.raises(BackendError, match=r"'local' \(mlx-lm\) does not take stop"):
        check_taken("local", "mlx-lm", None, GenerationParams(4, 1.0, stop=("x",)))


def test_neutral_values_only_for_a_sampled_request_and_what_the_kind_takes() -> None:
    assert neutral_for(GenerationParams(4, 0.0), TAKEN["vllm"]) == {}
    assert neutral_for(GenerationParams(4, 1.0, top_k=3), TAKEN["vllm-mlx"]) == {
        "top_p": 1.0,
        "min_p": 0.0,
        "presence_penalty": 0.0,
        "repetition_penalty": 1.0,
    }


def test_a_yaml_parameter_set() -> None:
    p = RequestParams.model_validate({"temperature": 1.0, "top_p": 0.9, "stop": "\n"})
    assert p.written() == ["temperature", "top_p", "stop"]
    assert p.label() == "t1-p0.9-stop\\n"
    made = p.generation_params(16, seed=7)
    assert made == GenerationParams(16, 1.0, 7, top_p=0.9, stop=("\n",))
    assert RequestParams().label() == "greedy"
    assert RequestParams(logit_bias={5: -100}).generation_params(2).logit_bias == ((5, -100.0),)
    with pytest.raises(ValidationError, match="top_pp"):
        RequestParams.model_validate({"top_pp": 0.9})
    with pytest.raises(ValidationError):
        RequestParams.model_validate({"top_p": 0})
