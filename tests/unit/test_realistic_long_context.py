"""The long-context variants of examples/models/make_realistic.py: ``config.json`` and the
GGUF carry the original context and the RoPE scaling (as llama.cpp's converter writes it),
and the llama3 ``rope_freqs`` divisors equal values worked out by hand."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from conftest import load_example

realistic = load_example("make_realistic")


def _gguf_fields(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    reader = gguf.GGUFReader(path)
    fields = {k: f.contents() for k, f in reader.fields.items() if "rope" in k or "context" in k}
    tensors = {t.name: np.asarray(t.data) for t in reader.tensors if "rope" in t.name}
    return fields, tensors


def test_llama3_rope_freqs_by_hand() -> None:
    # theta 10000, d 8: f = 1, 0.1, 0.01, 0.001; wavelengths 2pi, 62.83, 628.3, 6283.
    # L = 64, low 1, high 4: w < 16 -> 1; w > 64 -> factor 8; 62.83 is between:
    # s = (64 / 62.832 - 1) / 3 = 0.0061979; divisor 1 / (0.124225 + 0.006198) = 7.6674.
    scaling = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    scaling["original_max_position_embeddings"] = 64
    got = realistic.llama3_rope_freqs(10000.0, 8, scaling)
    s = (64 / (2 * math.pi / 0.1) - 1) / 3
    assert got.tolist() == pytest.approx([1.0, 1 / ((1 - s) / 8 + s), 8.0, 8.0], rel=1e-5)
    assert got[1] == pytest.approx(7.6674, abs=1e-3)


@pytest.mark.parametrize(
    ("rope", "max_positions", "scaling"),
    [
        (None, 64, None),
        ("linear", 64, {"rope_type": "linear", "factor": 8.0}),
        (
            "yarn",
            512,
            {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64},
        ),
        (
            "llama3",
            512,
            {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        ),
    ],
)
def test_config_of_each_variant(rope: str | None, max_positions: int, scaling: Any) -> None:
    long = realistic.LongContext(64, rope, 8.0)
    config = realistic.model_config("llama-bpe", 128256, 128000, 128009, long)
    assert config["max_position_embeddings"] == max_positions
    assert config.get("rope_scaling") == scaling


def test_bad_variants_are_refused() -> None:
    with pytest.raises(ValueError, match="rope must be one of"):
        realistic.LongContext(64, "dynamic")
    with pytest.raises(ValueError, match="factor must be above 1"):
        realistic.LongContext(64, "yarn", 1.0)


@pytest.mark.parametrize("rope", ["linear", "yarn", "llama3"])
def test_gguf_keys_of_each_variant(tmp_path: Path, rope: str) -> None:
    """The GGUF keys as llama.cpp's converter writes them (the whole model's GGUF, rope_freqs
    included, is read back in tests/integration/test_long_context_mlx.py)."""
    scaling = realistic.LongContext(64, rope, 8.0).rope_scaling()
    writer = gguf.GGUFWriter(tmp_path / "m.gguf", arch="llama")
    realistic._add_rope_scaling(writer, scaling)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    fields, _ = _gguf_fields(tmp_path / "m.gguf")
    if rope == "llama3":
        assert not fields  # the rope_freqs tensor carries it
    elif rope == "linear":
        assert fields == {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 8.0}
    else:
        assert fields == {
            "llama.rope.scaling.type": "yarn",
            "llama.rope.scaling.factor": 8.0,
            "llama.rope.scaling.original_context_length": 64,
        }
