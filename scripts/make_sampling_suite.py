"""Write ``suites/sampling.jsonl`` and print each prompt's next-token entropies on the tiny
adder (the table of ``suites/README.md``).

    python scripts/make_sampling_suite.py MODEL_DIR   # the tiny adder (tests' tiny_models["bf16"])

Each prompt's entropy ``H_j = -sum_i p_i ln p_i`` (nats) of the raw (temperature-1)
next-token distribution at positions ``j = 0, 1, 2`` of its greedy continuation, in float32
mlx-lm (the rows the ``sampling`` check's expectation is made of). ``spread`` prompts were
chosen among every ``a+`` and ``a+b`` prompt (a, b < 100) for the largest smallest ``H_j``;
``repeat`` prompts repeat a token for the penalties (presence, frequency, repetition).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

SPREAD = ["31+", "28+", "99+9", "29+", "18+", "22+4", "34+", "32+", "19+", "1+4"]
REPEAT = ["7777+", "1+1+1+1+", "99+99+99+", "5555", "88+88+"]
POSITIONS = 3
MAX_TOKENS = 8


def entropies(model_dir: Path, text: str) -> list[float]:
    from pytest_infercheck.backends import GenerationParams
    from pytest_infercheck.backends.mlx_lm import MlxLmBackend, MlxModelSpec

    backend = MlxLmBackend("adder", MlxModelSpec(str(model_dir), dtype="float32"))
    rendered = backend.render_sync(text, None, thinking=False)
    g = backend.generate_sync(rendered, GenerationParams(POSITIONS), full_logprobs=True)
    assert g.full_logprobs is not None
    out = []
    for row in g.full_logprobs.astype(np.float64):
        p = np.exp(row)
        p = p[p > 0]
        out.append(float(-(p * np.log(p)).sum()))
    return out


def records() -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for n, text in enumerate([*SPREAD, *REPEAT], start=1):
        category = "spread" if text in SPREAD else "repeat"
        out.append(
            {"id": f"sp{n:03d}", "category": category, "prompt": text, "max_tokens": MAX_TOKENS}
        )
    return out


def main() -> None:
    model = Path(sys.argv[1])
    path = Path(__file__).resolve().parents[1] / "suites" / "sampling.jsonl"
    rows = records()
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print("| id | category | prompt | H_0 | H_1 | H_2 |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        h = entropies(model, str(r["prompt"]))
        h += [float("nan")] * (POSITIONS - len(h))
        prompt = json.dumps(r["prompt"])[1:-1]
        cells = " | ".join(f"{x:.2f}" for x in h)
        print(f"| {r['id']} | {r['category']} | `{prompt}` | {cells} |")


if __name__ == "__main__":
    main()
