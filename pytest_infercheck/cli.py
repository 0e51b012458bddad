"""The ``pytest-infercheck`` console script.

``pytest-infercheck report RESULTS... [-o report.html]``: validate one or more JSON results
files, merge the shards of each run (see :mod:`.report.merge`) and write one standalone HTML
report with the runs side by side. Exit status 0 on success, 2 when a file cannot be read,
is not a results file of a supported version, or the shards cannot be merged.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .report.html import render_report
from .report.merge import MergeError, merge_results
from .report.results import ResultsError, load_results, write_atomic

PROG = "pytest-infercheck"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    report = commands.add_parser(
        "report",
        help="turn JSON results files into one HTML report",
        description="Merge the shards of each run and render the runs side by side.",
    )
    report.add_argument("results", nargs="+", type=Path, metavar="RESULTS", help="results files")
    report.add_argument(
        "-o", "--output", type=Path, default=Path("report.html"), help="default: report.html"
    )
    return parser


def report(paths: Sequence[Path], output: Path) -> list[str]:
    """Write the HTML report of ``paths`` to ``output``; returns the merge warnings.

    Raises :class:`.report.results.ResultsError` or :class:`.report.merge.MergeError`.
    """
    named = [(str(path), load_results(path)) for path in paths]
    runs, warnings = merge_results(named)
    write_atomic(output, render_report(runs))
    return warnings


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    try:
        warnings = report(args.results, args.output)
    except (ResultsError, MergeError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    for warning in warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
