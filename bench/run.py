"""Benchmark of pytest-infercheck: compare overhead, collection time, KL peak memory.

    .venv/bin/python bench/run.py [--prompts 20] [--max-tokens 256] [--skip-infer-check]

Not a timed test: it measures, then prints the numbers and ratios side by side. See
bench/README.md for what each part measures and the last numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import collection
import kl_memory
import overhead
from common import ensure_bytecode, load_average, long_prompts, mb
from prompts import screened_prompts

OVERHEAD_TARGET = 1.10
COLLECT_TARGET_S = 3.0
KL_SHAPES = ((512, 32_000), (2_048, 128_000))


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--prompts", type=int, default=20, help="prompts of the compare (default 20)")
    p.add_argument("--max-tokens", type=int, default=256, help="generation budget (default 256)")
    p.add_argument("--skip-infer-check", action="store_true", help="no infer-check comparison")
    p.add_argument(
        "--no-screen",
        action="store_true",
        help="use the first prompts as they are (default: only prompts on which both models "
        "run to max tokens)",
    )
    p.add_argument("--skip-compare", action="store_true", help="skip part 1 (compare overhead)")
    p.add_argument("--skip-collect", action="store_true", help="skip part 2 (collection)")
    p.add_argument("--skip-kl", action="store_true", help="skip part 3 (KL memory)")
    p.add_argument(
        "--collect-prompts", type=int, default=10_000, help="suite size of part 2 (x2 checks)"
    )
    p.add_argument(
        "--repeat", type=int, default=1, help="runs per timed command; the fastest is kept"
    )
    p.add_argument(
        "--profile", type=Path, help="also run the plugin under cProfile, dump to this file"
    )
    p.add_argument(
        "--models",
        nargs=2,
        type=Path,
        metavar=("BASE", "TEST"),
        help="compare these two mlx model folders instead of the random tiny llama pair",
    )
    p.add_argument("--json", type=Path, help="write the raw results to this JSON file")
    return p.parse_args(argv)


def _compare(args: argparse.Namespace, raw: dict[str, Any]) -> list[str]:
    if args.models:
        base, test = (m.resolve() for m in args.models)
    else:
        from models import bench_models

        base, test = bench_models()
    if args.no_screen:
        prompts, note = long_prompts(args.prompts), "not screened"
    else:
        prompts, note = screened_prompts(base, test, args.prompts, args.max_tokens)
    print(f"part 1: compare overhead ({args.prompts} prompts, {args.max_tokens} tokens) ...")
    r = overhead.measure(
        base,
        test,
        prompts,
        args.max_tokens,
        repeat=args.repeat,
        infer_check=not args.skip_infer_check,
        profile=args.profile,
    )
    raw["compare"] = {
        "prompts": r.prompts,
        "max_tokens": r.max_tokens,
        "prompt_choice": note,
        "plain_wall_s": r.plain.seconds,
        "plain_startup_s": r.plain_startup.seconds,
        "plain_stats": r.plain_stats,
        "plugin_wall_s": r.plugin.seconds,
        "plugin_startup_s": r.plugin_startup.seconds,
        "plugin_outcome": r.plugin_outcome,
        "cpu_s": {
            "plain": r.plain.cpu_seconds,
            "plain_startup": r.plain_startup.cpu_seconds,
            "plugin": r.plugin.cpu_seconds,
            "plugin_startup": r.plugin_startup.cpu_seconds,
            "infer_check": r.infer_check.cpu_seconds if r.infer_check else None,
        },
        "infer_check_wall_s": r.infer_check.seconds if r.infer_check else None,
        "infer_check_stats": r.infer_check_stats,
    }
    s = r.plain_stats
    ratio_net = r.plugin_net / r.plain_net
    ratio_raw = r.plugin.seconds / r.plain.seconds
    verdict = "ok" if ratio_net <= OVERHEAD_TARGET else "ABOVE TARGET"
    lines = [
        f"compare: {r.prompts} prompts x max {r.max_tokens} tokens, "
        f"{base.parent.name}/{base.name} vs {test.parent.name}/{test.name}; "
        f"generated {s['tokens_a']} + {s['tokens_b']} tokens, scored 2 x {s['scored_positions']}",
        f"  prompts {note}",
        f"  plain loop   {r.plain.seconds:7.2f} s wall, start-up {r.plain_startup.seconds:.2f} s, "
        f"net {r.plain_net:.2f} s (import {s['import_s']:.2f}, load {s['load_s']:.2f}, "
        f"work {s['work_s']:.2f} = generate {s['generate_s']:.2f} + score {s['score_s']:.2f})",
        f"  plugin       {r.plugin.seconds:7.2f} s wall, start-up {r.plugin_startup.seconds:.2f} s "
        f"(--collect-only), net {r.plugin_net:.2f} s  [{r.plugin_outcome}]",
        f"compare overhead: plugin {r.plugin_net:.2f} s, plain loop {r.plain_net:.2f} s, "
        f"ratio {ratio_net:.2f}x (target <= {OVERHEAD_TARGET:.2f}: {verdict}); "
        f"raw wall {r.plugin.seconds:.2f} / {r.plain.seconds:.2f} s = {ratio_raw:.2f}x",
        f"  same in CPU time (user + sys, less sensitive to other load): net plugin "
        f"{r.plugin_cpu_net:.2f} s / plain {r.plain_cpu_net:.2f} s = "
        f"{r.plugin_cpu_net / r.plain_cpu_net:.2f}x",
    ]
    if r.infer_check is not None:
        ic = r.infer_check.seconds
        st = r.infer_check_stats
        verdict = "ok" if r.plugin.seconds < ic else "ABOVE TARGET"
        lines.append(
            f"infer-check {overhead.INFER_CHECK_VERSION} {ic:.2f} s wall "
            f"(generated {st.get('tokens_a', '?')} + {st.get('tokens_b', '?')} tokens), "
            f"plugin/infer-check {r.plugin.seconds / ic:.2f}x wall-to-wall (target < 1: "
            f"{verdict}); net plugin / infer-check {r.plugin_net / ic:.2f}x; CPU time "
            f"{r.plugin.cpu_seconds:.2f} / {r.infer_check.cpu_seconds:.2f} s = "
            f"{r.plugin.cpu_seconds / r.infer_check.cpu_seconds:.2f}x"
        )
    if args.profile is not None:
        lines.append(f"profile of the plugin run: {args.profile}")
        lines.extend("  " + line for line in overhead.profile_summary(args.profile))
    return lines


def _collect(args: argparse.Namespace, raw: dict[str, Any]) -> list[str]:
    print(f"part 2: collection of 2 x {args.collect_prompts:,} prompt items ...")
    r = collection.measure(args.collect_prompts, repeat=max(2, args.repeat))
    raw["collect"] = {
        "items": r.items,
        "wall_s": r.run.seconds,
        "startup_s": r.startup.seconds,
        "net_s": r.net,
    }
    verdict = "ok" if r.net < COLLECT_TARGET_S else "ABOVE TARGET"
    return [
        f"collect {r.items:,} items: {r.net:.2f} s (wall {r.run.seconds:.2f} s minus empty "
        f"collection {r.startup.seconds:.2f} s; target < {COLLECT_TARGET_S:.0f} s: {verdict})"
    ]


def _kl(raw: dict[str, Any]) -> list[str]:
    lines = []
    raw["kl"] = []
    for positions, vocab in KL_SHAPES:
        print(f"part 3: KL position_stats on {positions} x {vocab:,} ...")
        r = kl_memory.measure(positions, vocab)
        raw["kl"].append(asdict(r))
        naive = "measured" if r.naive_measured else "4 x T x V x 8, not run"
        diff = (
            f", max |KL - naive KL| {r.max_abs_diff_vs_naive:.1e}"
            if r.max_abs_diff_vs_naive is not None
            else ""
        )
        lines.append(
            f"KL peak extra memory ({positions}x{vocab // 1000}k): {mb(r.peak_extra)} beyond the "
            f"inputs ({mb(r.input_bytes)} for both), {r.seconds:.2f} s; naive full float64 "
            f"{mb(r.naive_bytes)} ({naive}){diff}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    started = time.perf_counter()
    ensure_bytecode()  # the plugin starts up as an installed package does (see common.py)
    raw: dict[str, Any] = {"load_before": os.getloadavg(), "versions": overhead.versions()}
    print(f"load average: {load_average()}")
    lines: list[str] = []
    if not args.skip_compare:
        lines += _compare(args, raw)
    if not args.skip_collect:
        lines += _collect(args, raw)
    if not args.skip_kl:
        lines += _kl(raw)
    raw["load_after"] = os.getloadavg()
    print()
    py = sys.version.split()[0]
    print(f"=== pytest-infercheck benchmark ({overhead.versions()}, python {py})")
    for line in lines:
        print(line)
    took = time.perf_counter() - started
    print(f"load average at the end: {load_average()}; the benchmark took {took:.0f} s")
    if args.json is not None:
        args.json.write_text(json.dumps(raw, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
