"""The ``pytest-infercheck`` console script.

``pytest-infercheck report RESULTS... [-o report.html]``: validate one or more JSON results
files, merge the shards of each run (see :mod:`.report.merge`: every aggregate recomputed
from the union of the shards' items, its suite gates judged there) and write one standalone
HTML report with the runs side by side; ``--json OUT`` also writes the merged run as a
results file (the same schema and shape as an unsharded run's, so a merge can be compared
field by field with the run it came from). Exit status 0 when every gate of merged shards
passes and no item of merged shards failed; 1 when a gate or an item fails or errors (each
printed on stderr, aggregates first; the report is written all the same), so the merge of a
sharded run is its gate; 2 when a file cannot be read, is not a
results file of a supported version, or the shards cannot be merged (nothing written).
Unsharded files are shown as they are: pytest judged their gates and exited accordingly.

``pytest-infercheck init [--vllm URL | --llama-server URL | --openai URL | --mlx PATH]``:
probe the engine and write a commented ``infercheck.yaml`` and a ``pytest.ini`` that run at
once (see :mod:`.scaffold.command`).

``pytest-infercheck schema [-o FILE]``: print (or write to FILE) the JSON Schema of the YAML
matrix, for editors: ``# yaml-language-server: $schema=./infercheck.schema.json`` as the
matrix's first line. Exit status 2 when FILE cannot be written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from .report.html import render_report
from .report.merge import MergeError, failed_gates, merge_results
from .report.results import ResultsError, load_results, write_atomic, write_results
from .scaffold.command import add_parser as add_init_parser
from .scaffold.command import run as run_init
from .schema import matrix_schema

PROG = "pytest-infercheck"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    report = commands.add_parser(
        "report",
        help="turn JSON results files into one HTML report",
        description=(
            "Merge the shards of each run, judge their suite gates on the union and render "
            "the runs side by side. Exit status: 0 all merged gates pass, 1 a merged gate "
            "fails, 2 bad input."
        ),
    )
    report.add_argument("results", nargs="+", type=Path, metavar="RESULTS", help="results files")
    report.add_argument(
        "-o", "--output", type=Path, default=Path("report.html"), help="default: report.html"
    )
    report.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="OUT",
        help="also write the merged run as a results file (the files must be one run)",
    )
    schema = commands.add_parser(
        "schema",
        help="print the JSON Schema of the YAML matrix (for editors)",
        description="The JSON Schema of infercheck.yaml: every check kind, backend and setting.",
    )
    schema.add_argument(
        "-o", "--output", type=Path, default=None, help="write it here (default: stdout)"
    )
    add_init_parser(commands)
    return parser


def schema_text() -> str:
    """The matrix's JSON Schema as indented JSON."""
    return json.dumps(matrix_schema(), indent=2) + "\n"


def report(
    paths: Sequence[Path], output: Path, json_output: Path | None = None
) -> tuple[list[str], list[str]]:
    """Write the HTML report of ``paths`` to ``output`` (and, with ``json_output``, the
    merged run as a results file); returns the merge warnings and the gates of merged shards
    that failed (:func:`.report.merge.failed_gates`).

    Raises :class:`.report.results.ResultsError` or :class:`.report.merge.MergeError` (also
    when ``json_output`` is asked of files that are not one run).
    """
    named = [(str(path), load_results(path)) for path in paths]
    runs, warnings = merge_results(named)
    if json_output is not None and len(runs) != 1:
        raise MergeError(
            f"--json writes one run, and these files hold {len(runs)} (give the shards of "
            "one run, or one results file)"
        )
    write_atomic(output, render_report(runs))
    if json_output is not None:
        write_results(json_output, runs[0])
    return warnings, failed_gates(runs)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "schema":
        return _schema(args.output)
    if args.command == "init":
        return run_init(args, PROG)

    try:
        warnings, failed = report(args.results, args.output, args.json)
    except (ResultsError, MergeError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    for warning in warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    print(f"wrote {args.output}")
    if args.json is not None:
        print(f"wrote {args.json}")
    for line in failed:
        print(f"{PROG}: failed: {line}", file=sys.stderr)
    if failed:
        print(f"{PROG}: {len(failed)} failure(s) in the merged run", file=sys.stderr)
        return 1
    return 0


def _schema(output: Path | None) -> int:
    text = schema_text()
    if output is None:
        sys.stdout.write(text)
        return 0
    try:
        write_atomic(output, text)
    except OSError as exc:
        print(f"{PROG}: error: cannot write {output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
