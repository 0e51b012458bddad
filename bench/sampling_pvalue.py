"""What the ``sampling`` check's valid p-value (``metrics/sampling/exact.py``) costs and what it
sees, on exact multinomial draws (seeded numpy, no engine):

* the harness time of a check of ``--items`` positions at ``--alpha`` (each judged at
  ``alpha / items``, Holm up to ``alpha``), ``--samples`` draws each, over a 40-token spread
  distribution (``p_i`` proportional to ``1 / (i + 1)``, temperature 1): faithful draws, draws
  at the item's ``detectable_tv`` (mass moved between two halves in proportion to ``p``:
  the least detectable alternative), and draws at temperature 0.7 (a dropped temperature);
  milliseconds per item, the p-values' methods;
* the power at ``detectable_tv`` of the test as used, beside the 0.8 it claims;
* the size of the valid p-value and of the chi-square p-value of the same statistic at 0.05.

    .venv/bin/python bench/sampling_pvalue.py [--items 20] [--alpha 0.001] [--samples 2000]
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter

import numpy as np

from pytest_infercheck.metrics.sampling import (
    Expected,
    SamplingParams,
    chi2_sf,
    expected_distribution,
    goodness_of_fit,
    holm,
)

_W = np.array([1.0 / (i + 1) for i in range(40)])
SPREAD = {i: float(np.log(w)) for i, w in enumerate(_W / _W.sum())}


def _draw(rng: np.random.Generator, probs: np.ndarray, n: int) -> dict[int, int]:
    return {i: int(c) for i, c in enumerate(rng.multinomial(n, probs)) if c}


def _least_detectable(p: np.ndarray, d: float) -> np.ndarray:
    """``p`` with mass ``d`` moved from the tokens past half the mass to those before it, in
    proportion to ``p`` (the alternative ``detectable_tv`` is computed for)."""
    head = np.cumsum(p) - p < 0.5
    q = p.copy()
    q[head] *= 1 + d / p[head].sum()
    q[~head] *= 1 - d / p[~head].sum()
    return q / q.sum()


def check(
    rng: np.random.Generator, expected: Expected, draw: np.ndarray, items: int, alpha: float, n: int
) -> tuple[float, list[float], Counter[str], float]:
    """(seconds, p-values, methods, detectable_tv) of one check of ``items`` positions."""
    started = time.perf_counter()
    fits = [
        goodness_of_fit(_draw(rng, draw, n), expected, alpha=alpha / items, up_to=alpha)
        for _ in range(items)
    ]
    elapsed = time.perf_counter() - started
    holm([f.p_value for f in fits], alpha)
    return (
        elapsed,
        [f.p_value for f in fits],
        Counter(f.method for f in fits),
        fits[0].detectable_tv,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--alpha", type=float, default=0.001)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--checks", type=int, default=5)
    parser.add_argument("--power-reps", type=int, default=400)
    parser.add_argument("--size-reps", type=int, default=4000)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    rng = np.random.default_rng(2026)
    expected = expected_distribution(SPREAD, SamplingParams(1.0), "llama-server")
    tokens = sorted(expected.probs)
    p = np.array([expected.probs[t] for t in tokens])
    colder = expected_distribution(SPREAD, SamplingParams(0.7), "llama-server")
    cold = np.array([colder.probs[t] for t in tokens])
    d = goodness_of_fit(_draw(rng, p, args.samples), expected, alpha=args.alpha / args.items)
    far = _least_detectable(p, d.detectable_tv)
    level = args.alpha / args.items
    for name, draw in (("faithful", p), ("at detectable_tv", far), ("temperature 0.7", cold)):
        seconds, methods, rejected = [], Counter[str](), 0
        for _ in range(args.checks):
            elapsed, ps, m, _ = check(rng, expected, draw, args.items, args.alpha, args.samples)
            seconds.append(elapsed)
            methods.update(m)
            rejected += sum(x <= level for x in ps)
        per = 1000 * np.mean(seconds) / args.items
        print(
            f"{name:18s} {args.items} items at alpha {args.alpha:g}: "
            f"{np.mean(seconds):.3f} s a check ({per:.2f} ms/item, worst check "
            f"{max(seconds):.3f} s); rejected {rejected}/{args.items * args.checks} at "
            f"alpha/m; p by {dict(methods)}"
        )
    hits = 0
    for _ in range(args.power_reps):
        fit = goodness_of_fit(
            _draw(rng, far, args.samples), expected, alpha=level, up_to=args.alpha
        )
        hits += fit.p_value <= level
    print(
        f"power at detectable_tv {d.detectable_tv:.4f} (alpha/m {level:g}, {args.samples} "
        f"draws): {hits}/{args.power_reps} = {hits / args.power_reps:.3f} (claimed 0.8)"
    )
    new = old = 0
    for _ in range(args.size_reps):
        fit = goodness_of_fit(_draw(rng, p, args.samples), expected, alpha=0.05)
        new += fit.p_value <= 0.05
        old += chi2_sf(fit.statistic, fit.dof) <= 0.05
    print(
        f"size at 0.05 over {args.size_reps} faithful draws: valid p {new / args.size_reps:.4f}, "
        f"chi-square {old / args.size_reps:.4f}"
    )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
