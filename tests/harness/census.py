"""Every fault of the space, systematically, for the kinds named (all by default): what each
kind makes of each fault kind on each request path of its faithful run (one request, then
every request of the path; at the first and the middle position), counted by verdict
(:mod:`.verdicts`), with ``+SKIPWORDS`` where an item passed saying unsupported / not
exercised / unknown and ``+CRASH`` where one crashed instead of giving a verdict.

A tool for whoever works on a kind (the tests draw from the same space with Hypothesis)::

    PYTHONPATH=$PWD python -m tests.harness.census cache-parity     # -v: every row
"""

from __future__ import annotations

import sys
import time
from collections import Counter, defaultdict

from pytest_infercheck.checks.registry import KIND_NAMES

from .faults import FAULT_KINDS, STATUS, Fault, targets
from .verdicts import faithful, judge_fault, profile

BAD = ("missed", "unnamed", "SKIPWORDS", "CRASH")


def census(name: str, shape: str, verbose: bool = False) -> list[str]:
    """The rows of one kind on one shape (only those with a bad verdict unless ``verbose``)."""
    base = faithful(name, shape, 0)
    rows: dict[tuple[str, str, str, bool], Counter[str]] = defaultdict(Counter)
    for kind in FAULT_KINDS:
        seen: set[tuple[str, str]] = set()
        for request in targets(kind, base.log):
            for every in (False, True):
                if every and (request.backend, request.path) in seen:
                    continue
                if every:
                    seen.add((request.backend, request.path))
                size = request.content or request.positions
                for position in sorted({1 if kind == "truncated" else 0, size // 2}):
                    variant = None
                    if kind == "warm-reference":
                        variant = "corrupted-cache" if every else "reported"
                    status = STATUS[kind][-1] if kind in STATUS else None
                    fault = Fault(kind, request, every, position, status, variant)
                    judged = judge_fault(name, shape, 0, fault)
                    verdict = judged.verdict + ("+SKIPWORDS" if judged.skips else "")
                    verdict += "+CRASH" if judged.result.crashes() else ""
                    rows[(kind, request.backend, request.path, every)][verdict] += 1
    out = []
    for (kind, backend, path, every), counts in sorted(rows.items()):
        if verbose or any(b in v for v in counts for b in BAD):
            where = f"{path}{' (every)' if every else ''}"
            out.append(f"  {kind:15} {backend:4} {where:34} {dict(counts)}")
    return out


def main(argv: list[str]) -> None:
    verbose = "-v" in argv
    names = [a for a in argv if a != "-v"] or list(KIND_NAMES)
    for name in names:
        for shape in profile(name).shapes:
            started = time.perf_counter()
            lines = census(name, shape, verbose)
            print(f"{name} ({shape}, {time.perf_counter() - started:.1f}s)")
            print("\n".join(lines) or "  every fault caught, unread or declared blind")


if __name__ == "__main__":
    main(sys.argv[1:])
