"""LoRA adapters in the matrix (``models: {m: {adapter: ...}}``) and the pure rules by which
llama-server and vLLM backends apply one (values worked out by hand)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_infercheck.backends.base import BackendError, Generation
from pytest_infercheck.backends.llama_wire import lora_scales
from pytest_infercheck.backends.registry import ADAPTER_KINDS
from pytest_infercheck.backends.vllm_lora import lora_module
from pytest_infercheck.config import load_matrix
from pytest_infercheck.features import (
    ADAPTER,
    Feature,
    FeatureActivity,
    adapter_differs,
    unexercised,
)
from pytest_infercheck.matrix import AdapterSpec
from pytest_infercheck.yamlpos import SourceError

MATRIX = """\
models:
  base: {path: ./m/base, gguf: ./m/base.gguf}
  tuned:
    path: ./m/base
    gguf: ./m/base.gguf
    adapter: {path: ./lora/adapter, gguf: ./lora/adapter.gguf}
backends:
  mlx: {kind: mlx-lm}
  llama: {kind: llama-server, url: "http://127.0.0.1:1"}
  vllm: {kind: vllm, url: "http://127.0.0.1:2"}
  mlxsrv: {kind: vllm-mlx, url: "http://127.0.0.1:3"}
suites: [reasoning]
checks:
"""


def _write(tmp_path: Path, checks: str, matrix: str = MATRIX) -> Path:
    path = tmp_path / "infercheck.yaml"
    path.write_text(matrix + checks)
    return path


def test_each_kind_gets_its_adapter_file(tmp_path: Path) -> None:
    loaded = load_matrix(
        _write(tmp_path, "  - diff: {model: tuned, backends: [mlx, llama, vllm]}\n")
    )
    assert loaded.model_adapter("tuned", "mlx-lm") == str(tmp_path / "lora/adapter")
    assert loaded.model_adapter("tuned", "vllm") == str(tmp_path / "lora/adapter")
    assert loaded.model_adapter("tuned", "llama-server") == str(tmp_path / "lora/adapter.gguf")
    assert loaded.model_adapter("base", "mlx-lm") is None


def test_a_kind_that_applies_no_adapter_is_refused_at_the_target_line(tmp_path: Path) -> None:
    checks = "  - diff:\n      model: tuned\n      backends: [mlx, mlxsrv]\n"
    with pytest.raises(SourceError) as info:
        load_matrix(_write(tmp_path, checks))
    text = str(info.value)
    assert "model 'tuned' has a LoRA adapter, which a vllm-mlx backend cannot apply" in text
    assert "mlx-lm, vllm, llama-server" in text
    assert "infercheck.yaml:16: checks[0].diff.backends[1]: model 'tuned'" in text


def test_an_adapter_without_the_file_the_kind_loads_is_refused(tmp_path: Path) -> None:
    matrix = MATRIX.replace(
        "adapter: {path: ./lora/adapter, gguf: ./lora/adapter.gguf}", "adapter: ./lora/adapter"
    )
    with pytest.raises(
        SourceError, match=r"adapter has no 'gguf' \(a GGUF LoRA file\), which a llama"
    ):
        load_matrix(_write(tmp_path, "  - diff: {model: tuned, backends: [mlx, llama]}\n", matrix))
    load_matrix(_write(tmp_path, "  - diff: {model: tuned, backends: [mlx, vllm]}\n", matrix))


def test_the_base_model_runs_anywhere(tmp_path: Path) -> None:
    load_matrix(_write(tmp_path, "  - diff: {model: base, backends: [mlx, mlxsrv]}\n"))


def test_adapter_shorthand() -> None:
    assert AdapterSpec.model_validate("./a/x.gguf") == AdapterSpec(gguf="./a/x.gguf")
    assert AdapterSpec.model_validate("./a/folder") == AdapterSpec(path="./a/folder")
    with pytest.raises(ValueError, match=r"'path' \(a folder\) or 'gguf'"):
        AdapterSpec.model_validate({})
    assert ADAPTER_KINDS == ("mlx-lm", "vllm", "llama-server")


def test_a_missing_adapter_is_a_collection_error_at_its_line(tmp_path: Path) -> None:
    (tmp_path / "m" / "base").mkdir(parents=True)
    loaded = load_matrix(_write(tmp_path, "  - diff: {model: tuned, backends: [mlx, llama]}\n"))
    with pytest.raises(SourceError, match=r"the adapter .*lora/adapter does not exist"):
        loaded.check_local_models()


LOADED = [
    {"id": 0, "path": "/x/a.gguf", "scale": 1.0},
    {"id": 1, "path": "/x/b.gguf", "scale": 1.0},
]


def test_llama_lora_scales_apply_one_adapter_and_zero_the_others() -> None:
    assert lora_scales(LOADED, "/x/b.gguf", "l") == [
        {"id": 0, "scale": 0.0},
        {"id": 1, "scale": 1.0},
    ]
    assert lora_scales(LOADED, "/x/../x/a.gguf", "l") == [
        {"id": 0, "scale": 1.0},
        {"id": 1, "scale": 0.0},
    ]
    # the base model on a server that loaded adapters: every scale 0 (the server's own
    # default for a request naming none is 1)
    assert lora_scales(LOADED, None, "l") == [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 0.0}]
    assert lora_scales([], None, "l") == []


def test_llama_adapter_not_loaded_fails_naming_what_is() -> None:
    with pytest.raises(BackendError, match=r"has not loaded the LoRA adapter /x/c.gguf .*a.gguf"):
        lora_scales(LOADED, "/x/c.gguf", "l")
    with pytest.raises(BackendError, match="its /lora-adapters: none"):
        lora_scales([], "/x/c.gguf", "l")


SERVED = [
    {"id": "/m/base", "root": "/m/base", "parent": None},
    {"id": "tuned", "root": "/l/adapter", "parent": "/m/base"},
]


def test_vllm_asks_for_the_lora_module_serving_the_adapter() -> None:
    assert lora_module(SERVED, "/l/adapter/", "v") == "tuned"
    with pytest.raises(BackendError, match=r"no LoRA module for the adapter /l/other .*tuned="):
        lora_module(SERVED, "/l/other", "v")
    # the base model's own entry is not a LoRA module, even at the adapter's path
    with pytest.raises(BackendError, match="its modules: none"):
        lora_module(SERVED[:1], "/m/base", "v")


def _gen(ids: list[int] | None, logprobs: list[float] | None, text: str = "46") -> Generation:
    return Generation(text=text, token_ids=ids, finish_reason="stop", chosen_logprobs=logprobs)


def test_adapter_differs_by_tokens_text_or_a_single_logprob_bit() -> None:
    base = _gen([1, 2], [-0.5, -0.25])
    assert not adapter_differs(_gen([1, 2], [-0.5, -0.25]), base)
    assert adapter_differs(_gen([1, 3], [-0.5, -0.25]), base)
    # same tokens, one logprob one float32 step away: the adapter moved the distribution
    assert adapter_differs(_gen([1, 2], [-0.5, float(np.nextafter(np.float32(-0.25), 0))]), base)
    # a text-only server: the text decides, then the logprobs (none here)
    assert adapter_differs(_gen(None, None, "47"), _gen(None, None, "46"))
    assert not adapter_differs(_gen(None, None), _gen(None, None))


def test_an_adapter_feature_engages_only_when_measured_and_different() -> None:
    adapter = Feature(ADAPTER, "/l/a")
    assert unexercised([adapter], FeatureActivity(adapter_differs=True)) == []
    assert unexercised([adapter], FeatureActivity(adapter_differs=False)) == [
        "LoRA adapter never engaged: the output equals the base model's on the same engine, "
        "token for token and logprob for logprob (/l/a)"
    ]
    not_measured = ["LoRA adapter: the base model's output was not measured"]
    assert unexercised([adapter], None) == not_measured
    assert unexercised([adapter], FeatureActivity()) == not_measured


def test_require_engaged_accepts_a_diff_whose_model_has_an_adapter(tmp_path: Path) -> None:
    checks = "  - diff: {model: tuned, backends: [base@mlx, llama]}\n    require_engaged: true\n"
    load_matrix(_write(tmp_path, checks))
    checks = "  - diff: {model: base, backends: [mlx, llama]}\n    require_engaged: true\n"
    with pytest.raises(SourceError, match="none of the check's backends declares a feature"):
        load_matrix(_write(tmp_path, checks))
