"""The precision of a side's logprobs read from their values, and its mass tolerance
(:mod:`pytest_infercheck.metrics.precision`): exact bfloat16 / float16 numbers, and a golden's
6-decimal roundings of them, are told apart from float32 ones; a list of 0.0 and -inf only
tells nothing and takes the widest tolerance."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_infercheck.golden.file import DECIMALS
from pytest_infercheck.metrics.precision import (
    GOLDEN_DECIMALS,
    MASS_TOL,
    logprob_precision,
    mass_tolerance,
)

# bfloat16 numbers: 8 significant bits. -0.69140625 = -177/256, -2.203125 = -141/64.
BF16 = [-0.69140625, -2.203125, -7.5]
# float16 numbers that bfloat16 cannot hold: 11 significant bits. -0.69287109375 = -1419/2048.
F16 = [-0.69287109375, -2.203125]
# float32 values of ln 0.5 and ln 0.3 (24 significant bits).
F32 = [float(np.float32(math.log(0.5))), float(np.float32(math.log(0.3)))]


@pytest.mark.parametrize(
    ("values", "precision"),
    [
        (BF16, "bfloat16"),
        ([round(v, 6) for v in BF16], "bfloat16"),  # a golden stores -0.691406, -2.203125
        (F16, "float16"),
        ([round(v, 6) for v in F16], "float16"),
        (F32, "float32"),
        ([round(v, 6) for v in F32], "float32"),  # a golden of a float32 engine
        ([math.log(0.5), math.log(0.3)], "float32"),  # float64 values read as float32
        ([*BF16, F32[0]], "float32"),  # one value no narrow format holds decides
        ([0.0, -math.inf], "unknown"),  # held by every format: tells nothing
        ([], "unknown"),
        ([0.0, *BF16, -math.inf], "bfloat16"),
    ],
)
def test_the_precision_read_from_the_values(values: list[float], precision: str) -> None:
    assert logprob_precision(values) == precision
    assert mass_tolerance(values) == MASS_TOL[precision]


def test_the_tolerances_and_the_golden_rounding() -> None:
    assert MASS_TOL == {"bfloat16": 0.3, "float16": 0.15, "float32": 1e-3, "unknown": 0.3}
    assert GOLDEN_DECIMALS == DECIMALS  # the goldens' rounding, read here without the import


def test_random_float32_values_are_not_taken_for_bfloat16() -> None:
    # Two informative float32 values of random logprobs: a bfloat16 look-alike has odds 2^-32.
    rng = np.random.default_rng(0)
    for _ in range(200):
        values = rng.uniform(-12.0, -0.01, size=2).astype(np.float32).astype(np.float64)
        assert logprob_precision(values.tolist()) == "float32"
        assert logprob_precision(np.round(values, 6).tolist()) == "float32"
