"""Measure tiny-adder and its mlx_lm quantizations with mlx_lm (greedy accuracy, flips, KL).

Runs in the dev venv (mlx / mlx_lm, no torch)::

    .venv/bin/python examples/models/measure_tiny_adder.py            # all 10,000 pairs
    .venv/bin/python examples/models/measure_tiny_adder.py --n 500    # fixed sample of 500
    .venv/bin/python examples/models/measure_tiny_adder.py --update-card

Greedy decoding uses ``mlx_lm.generate.generate_step`` on the prompt ids ``<s>a+b=``
(BOS + one id per byte), stopping at EOS, at most 4 new tokens. An answer "flips" when the
quantized model's answer string differs from the bf16 one. The KL is teacher-forced on
``<s>a+b=c</s>`` with the correct ``c``: ``KL(p_bf16 || p_q)`` from float32 ``log_softmax``
of the full logits, averaged over token positions.

``--update-card`` rewrites the mlx_lm section of ``tiny-adder/README.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import mlx_lm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_models as mm

CARD_MARK_START = "<!-- mlx-metrics:start -->"
CARD_MARK_END = "<!-- mlx-metrics:end -->"


def teacher_forced_kl(base: Any, other: Any, pairs: list[tuple[int, int]]) -> tuple[float, float]:
    """Mean KL(base || other) per position: over all positions, and over answer positions."""
    all_kl: list[float] = []
    ans_kl: list[float] = []
    for a, b in pairs:
        prompt = mm.prompt_ids(a, b)
        seq = prompt + [c + mm.BYTE_OFFSET for c in str(a + b).encode()] + [mm.EOS_ID]
        x = mx.array(seq)[None]
        lp = nn.log_softmax(base(x)[0].astype(mx.float32), axis=-1)
        lq = nn.log_softmax(other(x)[0].astype(mx.float32), axis=-1)
        kl = (mx.exp(lp) * (lp - lq)).sum(axis=-1).tolist()
        all_kl.extend(kl)
        # logits at position t predict token t + 1; the answer starts at len(prompt)
        ans_kl.extend(kl[len(prompt) - 1 : len(seq) - 1])
    return sum(all_kl) / len(all_kl), sum(ans_kl) / len(ans_kl)


def measure(
    n: int, seed: int, bits: list[int], group_size: int, work_dir: Path, kl_prompts: int
) -> dict[str, Any]:
    """Run all measurements; returns a JSON-able dict."""
    paths = mm.make_variants(work_dir, bits, group_size)
    pairs = [(a, b) for a in range(100) for b in range(100)] if n <= 0 else mm.sample_pairs(n, seed)
    held = {tuple(p) for p in json.loads((mm.SOURCE_DIR / "heldout_pairs.json").read_text())}
    held_idx = [i for i, p in enumerate(pairs) if p in held]

    models: dict[str, Any] = {}
    answers: dict[str, list[str | None]] = {}
    res: dict[str, Any] = {
        "n_pairs": len(pairs),
        "n_heldout_in_sample": len(held_idx),
        "sample": "all" if n <= 0 else f"sample_pairs({n}, seed={seed})",
        "group_size": group_size,
        "mlx_version": str(getattr(mx, "__version__", "unknown")),
        "mlx_lm_version": mlx_lm.__version__,
        "variants": {},
    }
    for key, path in paths.items():
        model = mlx_lm.load(str(path))[0]
        models[key] = model
        t0 = time.perf_counter()
        answers[key] = mm.adder_answers(model, pairs)
        dt = time.perf_counter() - t0
        right = [ans == str(a + b) for ans, (a, b) in zip(answers[key], pairs, strict=True)]
        v: dict[str, Any] = {
            "accuracy": sum(right) / len(pairs),
            "accuracy_heldout": (
                sum(right[i] for i in held_idx) / len(held_idx) if held_idx else None
            ),
            "n_wrong": len(pairs) - sum(right),
            "wrong": [
                f"{a}+{b}={ans if ans is not None else '(no EOS)'}"
                for ans, (a, b), ok in zip(answers[key], pairs, right, strict=True)
                if not ok
            ][:20],
            "seconds": round(dt, 1),
        }
        if key != "bf16":
            base_right = [
                ans == str(a + b) for ans, (a, b) in zip(answers["bf16"], pairs, strict=True)
            ]
            flips = [i for i in range(len(pairs)) if answers[key][i] != answers["bf16"][i]]
            v["flips_vs_bf16"] = len(flips)
            v["flips_right_to_wrong"] = sum(base_right[i] and not right[i] for i in flips)
            v["flips_wrong_to_right"] = sum(right[i] and not base_right[i] for i in flips)
            v["flip_examples"] = [
                f"{pairs[i][0]}+{pairs[i][1]}= bf16 {answers['bf16'][i]!r} -> {answers[key][i]!r}"
                for i in flips[:5]
            ]
            kl_pairs = mm.sample_pairs(kl_prompts, seed=1)
            kl_all, kl_ans = teacher_forced_kl(models["bf16"], model, kl_pairs)
            v["kl_vs_bf16_mean_all_positions"] = kl_all
            v["kl_vs_bf16_mean_answer_positions"] = kl_ans
            v["kl_prompts"] = kl_prompts
        res["variants"][key] = v
        print(f"{key}: {json.dumps(v)}", flush=True)
    return res


def card_section(res: dict[str, Any]) -> str:
    """Markdown for the model card."""
    v = res["variants"]
    lines = [
        f"mlx {res['mlx_version']}, mlx_lm {res['mlx_lm_version']}, CPU; greedy "
        "(`mlx_lm.generate.generate_step`, argmax sampler) on the prompt ids `<s>a+b=`, "
        f"stop at EOS, max 4 new tokens; {res['n_pairs']:,} pairs ({res['sample']}), "
        f"{res['n_heldout_in_sample']:,} of them held out from training. Quantized variants "
        f"are made by `make_models.py` (`mlx_lm.convert`, affine, group size "
        f"{res['group_size']}; embeddings and lm_head quantized too).",
        "",
        "| model | accuracy (all) | accuracy (held-out) | wrong | answers flipped vs bf16 "
        "(right->wrong / wrong->right) | mean KL vs bf16 (all / answer positions) |",
        "|---|---|---|---|---|---|",
    ]
    for key, m in v.items():
        held = f"{m['accuracy_heldout']:.4f}" if m["accuracy_heldout"] is not None else "-"
        if key == "bf16":
            flips, kl = "-", "-"
        else:
            flips = (
                f"{m['flips_vs_bf16']} ({m['flips_right_to_wrong']} / {m['flips_wrong_to_right']})"
            )
            kl = (
                f"{m['kl_vs_bf16_mean_all_positions']:.2e} / "
                f"{m['kl_vs_bf16_mean_answer_positions']:.2e}"
            )
        lines.append(f"| {key} | {m['accuracy']:.4f} | {held} | {m['n_wrong']} | {flips} | {kl} |")
    kl_n = next((m["kl_prompts"] for m in v.values() if "kl_prompts" in m), 0)
    lines += [""]
    for key, m in v.items():
        more = " ..." if m["n_wrong"] > len(m["wrong"]) else ""
        lines.append(f"- {key} wrong answers: " + ", ".join(f"`{w}`" for w in m["wrong"]) + more)
        if m.get("flip_examples"):
            lines.append(
                f"- {key} flips vs bf16: " + ", ".join(f"`{f}`" for f in m["flip_examples"])
            )
    lines += [
        "",
        f"KL: teacher-forced on `<s>a+b=c</s>` (correct `c`) for {kl_n} fixed pairs, "
        "`KL(p_bf16 || p_q)` from float32 `log_softmax` of the full logits.",
        "",
        "Reproduce: `.venv/bin/python examples/models/measure_tiny_adder.py"
        + ("" if res["sample"] == "all" else f" --n {res['n_pairs']}")
        + " --update-card`",
    ]
    return "\n".join(lines)


def update_card(section: str, card: Path = mm.SOURCE_DIR / "README.md") -> None:
    text = card.read_text()
    start, end = text.index(CARD_MARK_START), text.index(CARD_MARK_END)
    text = text[: start + len(CARD_MARK_START)] + "\n" + section + "\n" + text[end:]
    card.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=0, help="sample size (0: all 10,000 pairs)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bits", type=int, nargs="+", default=[8, 4])
    ap.add_argument("--group-size", type=int, default=32)
    ap.add_argument("--kl-prompts", type=int, default=64)
    ap.add_argument("--work-dir", type=Path, default=None, help="default: a temp dir")
    ap.add_argument("--json", type=Path, default=None, help="also write results here")
    ap.add_argument("--update-card", action="store_true")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        work = args.work_dir or Path(tmp)
        res = measure(args.n, args.seed, args.bits, args.group_size, work, args.kl_prompts)
    section = card_section(res)
    print(section)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    if args.update_card:
        update_card(section)
        print(f"updated {mm.SOURCE_DIR / 'README.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
