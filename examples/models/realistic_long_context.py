"""Long context for ``make_realistic.py``: a model's original context length and RoPE scaling
(:class:`LongContext`), and the ``rope_freqs`` tensor of ``llama3`` scaling.

``make_realistic.py`` re-exports these names; its ``--context``, ``--rope-scaling`` and
``--rope-factor`` make a :class:`LongContext`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

CONTEXT = 4096
"""The default original context length in tokens (``--context``)."""


@dataclass(frozen=True)
class LongContext:
    """The long-context variant of a model: an original context, RoPE scaling or not.

    ``config.json`` takes Hugging Face's conventions (as Llama 3.1, Qwen 2.5 and Llama 2's
    linear-scaled fine-tunes write them):

    - no scaling: ``max_position_embeddings = context``;
    - ``linear``: ``rope_scaling = {rope_type: linear, factor}``,
      ``max_position_embeddings = context`` (HF's linear has no original length);
    - ``llama3``: ``{rope_type: llama3, factor, low_freq_factor: 1, high_freq_factor: 4,
      original_max_position_embeddings: context}``, ``max_position_embeddings = context *
      factor``;
    - ``yarn``: ``{rope_type: yarn, factor, original_max_position_embeddings: context}``,
      ``max_position_embeddings = context * factor``.

    The GGUF carries the same, as llama.cpp's ``convert_hf_to_gguf.py`` writes it
    (``conversion/base.py`` ``set_gguf_parameters``; ``conversion/llama.py``
    ``generate_extra_tensors``): ``linear`` and ``yarn`` as ``rope.scaling.type`` and
    ``.factor`` (yarn also ``.original_context_length``), ``llama3`` as the
    ``rope_freqs.weight`` tensor of per-frequency divisors (:func:`llama3_rope_freqs`).
    """

    context: int = CONTEXT
    rope: str | None = None
    """None, ``linear``, ``llama3`` or ``yarn`` (:data:`ROPE_TYPES`)."""
    factor: float = 8.0

    def __post_init__(self) -> None:
        if self.rope is not None and self.rope not in ROPE_TYPES:
            raise ValueError(f"rope must be one of {ROPE_TYPES}, got {self.rope!r}")
        if self.context < 8:
            raise ValueError(f"context must be at least 8 tokens, got {self.context}")
        if self.rope is not None and not self.factor > 1:
            raise ValueError(f"the RoPE factor must be above 1, got {self.factor}")

    @property
    def max_positions(self) -> int:
        """``max_position_embeddings`` of ``config.json`` (see the class docstring)."""
        if self.rope in ("llama3", "yarn"):
            return int(self.context * self.factor)
        return self.context

    def rope_scaling(self) -> dict[str, Any] | None:
        """``rope_scaling`` of ``config.json``, or None."""
        if self.rope is None:
            return None
        out: dict[str, Any] = {"rope_type": self.rope, "factor": float(self.factor)}
        if self.rope == "llama3":
            out.update(low_freq_factor=1.0, high_freq_factor=4.0)
        if self.rope in ("llama3", "yarn"):
            out["original_max_position_embeddings"] = self.context
        return out


ROPE_TYPES = ("linear", "llama3", "yarn")


def llama3_rope_freqs(rope_theta: float, head_dim: int, scaling: dict[str, Any]) -> np.ndarray:
    """The ``rope_freqs.weight`` of a ``llama3`` RoPE, as llama.cpp's converter computes it.

    For each frequency ``f_i = theta^(-2i/d)`` with wavelength ``w = 2 pi / f_i``: divisor 1
    when ``w < L / high``, ``factor`` when ``w > L / low``, else ``1 / ((1 - s) / factor +
    s)`` with ``s = (L / w - low) / (high - low)`` (``L`` the original context).
    """
    freqs = 1.0 / (rope_theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    factor = float(scaling["factor"])
    low = float(scaling.get("low_freq_factor", 1.0))
    high = float(scaling.get("high_freq_factor", 4.0))
    old = float(scaling.get("original_max_position_embeddings", 8192))
    out = []
    for freq in freqs:
        wavelen = 2 * np.pi / float(freq)
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)
