"""Measure the tiny tool-calling model (``tiny-tool/``) with mlx_lm, in process.

Runs in the dev venv (mlx / mlx_lm, no torch)::

    .venv/bin/python examples/models/measure_tiny_tool.py                  # held-out + suite
    .venv/bin/python examples/models/measure_tiny_tool.py --n 50           # 50 per category
    .venv/bin/python examples/models/measure_tiny_tool.py --write-suite    # suites/tool-use.jsonl
    .venv/bin/python examples/models/measure_tiny_tool.py --update-card

Each conversation is rendered by the model's own chat template through mlx_lm's tokenizer
(``apply_chat_template(messages, tools=..., add_generation_prompt=True)``), decoded greedily
(``mlx_lm.generate.generate_step``, argmax) until ``<|im_end|>`` or ``<|endoftext|>`` (at most
``--max-tokens``), and the reply scored by exact match (``tiny_tool_data.reply_correct``): the
``<tool_call>`` blocks parse as JSON and give the expected calls (name and arguments as JSON
values, in order) with nothing else, or the plain reply equals the expected sentence.

Sets: the held-out set of ``tiny_tool_data.heldout_set`` (combinations never trained on, per
category; ``unseen-city`` uses cities never seen at all) and the bundled ``tool-use`` suite
(``suites/tool-use.jsonl``, parsed here directly). ``--write-suite`` first (re)writes the
suite from ``tiny_tool_data.suite_lines``. ``--update-card`` rewrites the mlx_lm section of
``tiny-tool/README.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx_lm
from mlx_lm.generate import generate_step

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import tiny_tool_data as data  # noqa: E402

MODEL_DIR = HERE / "tiny-tool"
SUITE_PATH = HERE.parent.parent / "suites" / "tool-use.jsonl"
CARD_MARK_START = "<!-- mlx-metrics:start -->"
CARD_MARK_END = "<!-- mlx-metrics:end -->"


def prompt_ids(tokenizer: Any, ex: data.Example) -> list[int]:
    """The prompt ids of ``ex`` from the model's chat template (mlx_lm's tokenizer)."""
    text = tokenizer.apply_chat_template(
        list(ex.messages),
        tools=data.TOOLS if ex.tools else None,
        add_generation_prompt=True,
        tokenize=False,
    )
    return list(tokenizer.encode(text, add_special_tokens=False))


def greedy_reply(model: Any, tokenizer: Any, ids: Sequence[int], max_tokens: int) -> str:
    """Greedy decoding until an EOS id; the reply text (special tokens skipped)."""
    eos = set(tokenizer.eos_token_ids)
    out: list[int] = []
    for tok, _ in generate_step(
        mx.array(list(ids)), model, max_tokens=max_tokens, sampler=lambda lp: mx.argmax(lp, -1)
    ):
        t = int(tok)
        if t in eos:
            break
        out.append(t)
    return str(tokenizer.decode(out, skip_special_tokens=True))


def score(
    model: Any, tokenizer: Any, examples: list[data.Example], max_tokens: int
) -> dict[str, Any]:
    """Exact-match accuracy of greedy replies, with the wrong replies."""
    wrong: list[dict[str, str]] = []
    for ex in examples:
        reply = greedy_reply(model, tokenizer, prompt_ids(tokenizer, ex), max_tokens)
        if not data.reply_correct(ex, reply):
            wrong.append(
                {
                    "request": _request(ex),
                    "expected": ex.target_text(),
                    "got": reply,
                }
            )
    n = len(examples)
    return {"n": n, "correct": n - len(wrong), "accuracy": (n - len(wrong)) / n, "wrong": wrong}


def _request(ex: data.Example) -> str:
    parts = []
    for m in ex.messages:
        if m["role"] == "assistant":
            calls = [
                f"{c['function']['name']}({json.dumps(c['function']['arguments'])})"
                for c in m.get("tool_calls", [])
            ]
            parts.append("calls " + ", ".join(calls))
        else:
            parts.append(f"{m['role']}: {m['content']}")
    return (" | ".join(parts)) + ("" if ex.tools else " (no tools)")


def load_suite(path: Path = SUITE_PATH) -> list[tuple[str, data.Example]]:
    """The suite's lines as (id, example)."""
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return [(ln["id"], data.example_from_suite_line(ln)) for ln in lines]


def write_suite(path: Path = SUITE_PATH) -> int:
    """(Re)write the bundled ``tool-use`` suite; returns the number of lines."""
    lines = data.suite_lines()
    path.write_text("".join(json.dumps(ln, ensure_ascii=False) + "\n" for ln in lines))
    return len(lines)


def measure(model_dir: Path, n: int, max_tokens: int) -> dict[str, Any]:
    model, tokenizer = mlx_lm.load(str(model_dir))
    res: dict[str, Any] = {
        "mlx_version": str(getattr(mx, "__version__", "unknown")),
        "mlx_lm_version": mlx_lm.__version__,
        "n_per_category": n,
        "max_tokens": max_tokens,
        "heldout": {},
    }
    t0 = time.perf_counter()
    for cat, exs in data.heldout_set(n).items():
        res["heldout"][cat] = score(model, tokenizer, exs, max_tokens)
        r = res["heldout"][cat]
        print(f"held-out {cat}: {r['correct']}/{r['n']} = {r['accuracy']:.3f}", flush=True)
    suite = load_suite()
    by_cat: dict[str, list[data.Example]] = {}
    for _, ex in suite:
        by_cat.setdefault(ex.category, []).append(ex)
    res["suite"] = {cat: score(model, tokenizer, exs, max_tokens) for cat, exs in by_cat.items()}
    total = sum(r["correct"] for r in res["suite"].values())
    res["suite_total"] = {"n": len(suite), "correct": total, "accuracy": total / len(suite)}
    print(f"suite tool-use: {total}/{len(suite)} = {total / len(suite):.3f}", flush=True)
    res["seconds"] = round(time.perf_counter() - t0, 1)
    return res


CATEGORY_TEXT = {
    "single": "one call with arguments (`add`, `get_weather`, `get_time`)",
    "zero-arg": "`get_date` (no arguments), held-out phrasings",
    "two-call": "two calls in one reply",
    "result": "plain answer after one tool result",
    "result-two": "plain answer after two tool results",
    "no-tools": "no tools offered: `I have no tools for that.`",
    "unseen-city": "one call naming a city never seen in training",
}


def card_section(res: dict[str, Any]) -> str:
    """Markdown for the model card."""
    in_dist = [c for c in res["heldout"] if c != "unseen-city"]
    n_in = sum(res["heldout"][c]["n"] for c in in_dist)
    ok_in = sum(res["heldout"][c]["correct"] for c in in_dist)
    lines = [
        f"mlx {res['mlx_version']}, mlx_lm {res['mlx_lm_version']}, CPU, bf16 weights; prompt "
        "from `tokenizer.apply_chat_template(messages, tools=..., add_generation_prompt=True)`, "
        f"greedy decoding until `<|im_end|>` (at most {res['max_tokens']} tokens); exact match "
        "(every `<tool_call>` block parses and gives the expected calls in order, name and "
        "arguments as JSON values, and nothing else; or exactly the expected sentence).",
        "",
        "| held-out category | what | exact match |",
        "|---|---|---|",
    ]
    for cat, r in res["heldout"].items():
        lines.append(
            f"| {cat} | {CATEGORY_TEXT[cat]} | {r['correct']}/{r['n']} = {r['accuracy']:.3f} |"
        )
    lines.append(
        f"| **all but unseen-city** | | **{ok_in}/{n_in} = {ok_in / n_in:.3f}** |",
    )
    st = res["suite_total"]
    lines += [
        "",
        f"Bundled `tool-use` suite (`suites/tool-use.jsonl`, {st['n']} held-out requests): "
        f"**{st['correct']}/{st['n']} = {st['accuracy']:.3f}** ("
        + ", ".join(f"{c} {r['correct']}/{r['n']}" for c, r in res["suite"].items())
        + ").",
        "",
    ]
    examples = [
        (cat, w) for cat, r in [*res["heldout"].items(), *res["suite"].items()] for w in r["wrong"]
    ]
    if examples:
        lines.append("Some wrong replies:")
        lines.append("")
        seen = set()
        for cat, w in examples:
            if cat in seen:
                continue
            seen.add(cat)
            got = w["got"].replace("\n", "\\n")
            want = w["expected"].replace("\n", "\\n")
            lines.append(f"- {cat}: `{w['request']}` -> `{got}` (expected `{want}`)")
        lines.append("")
    lines.append(
        "Reproduce: `.venv/bin/python examples/models/measure_tiny_tool.py"
        + ("" if res["n_per_category"] == 100 else f" --n {res['n_per_category']}")
        + " --update-card`"
    )
    return "\n".join(lines)


def update_card(section: str, card: Path = MODEL_DIR / "README.md") -> None:
    text = card.read_text()
    start, end = text.index(CARD_MARK_START), text.index(CARD_MARK_END)
    text = text[: start + len(CARD_MARK_START)] + "\n" + section + "\n" + text[end:]
    card.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=MODEL_DIR)
    ap.add_argument("--n", type=int, default=100, help="held-out examples per category")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--write-suite", action="store_true")
    ap.add_argument("--json", type=Path, default=None, help="also write results here")
    ap.add_argument("--update-card", action="store_true")
    args = ap.parse_args(argv)

    if args.write_suite:
        print(f"wrote {write_suite()} lines to {SUITE_PATH}")
    res = measure(args.model, args.n, args.max_tokens)
    section = card_section(res)
    print(section)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    if args.update_card:
        update_card(section, args.model / "README.md")
        print(f"updated {args.model / 'README.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
