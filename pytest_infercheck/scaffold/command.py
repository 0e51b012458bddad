"""``pytest-infercheck init``: the engine from a flag (``--vllm URL``, ``--llama-server URL``,
``--openai URL``, ``--mlx PATH``) or, with none and a terminal on stdin, from questions; the
engine probed (:mod:`.probe`); ``infercheck.yaml`` and ``pytest.ini`` written into ``--out``
(:mod:`.matrix_text`), never over existing files without ``--force``.

Exit status 0 when both files were written, 2 when nothing was: no engine given and no
terminal to ask on, a probe that failed (the message names the URL or folder and a hint), or
files that exist.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from ..report.results import write_atomic
from .fit import (
    MARGINS,
    MIN_TOKENS,
    SHORT_PROMPTS,
    SHORT_SUITE,
    count_tokens,
    fitted_max_tokens,
    short_suite_text,
    suite_texts,
)
from .matrix_text import DEFAULT_SUITE, PYTEST_INI, Choices, matrix_text, refusals
from .probe import ENGINES, Probed, ProbeError, probe

FILES = ("infercheck.yaml", "pytest.ini")
DEFAULT_URLS = {
    "vllm": "http://127.0.0.1:8000",
    "llama-server": "http://127.0.0.1:8080",
    "openai": "http://127.0.0.1:8000",
}


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The ``init`` subcommand on the console script's parser."""
    init = commands.add_parser(
        "init",
        help="probe an engine and write infercheck.yaml and pytest.ini for it",
        description=(
            "Probe a running server (or an mlx model folder) for its model, logprobs and "
            "tokenizer endpoint, and write a commented infercheck.yaml and a pytest.ini that "
            "run at once with `pytest`. Without an engine flag it asks (on a terminal). "
            "Exit status: 0 written, 2 nothing written."
        ),
    )
    engine = init.add_mutually_exclusive_group()
    engine.add_argument("--vllm", metavar="URL", help="a running vLLM server")
    engine.add_argument("--llama-server", metavar="URL", help="a running llama-server")
    engine.add_argument("--openai", metavar="URL", help="any OpenAI-compatible server")
    engine.add_argument("--mlx", metavar="PATH", help="a model folder for mlx-lm in-process")
    init.add_argument("--model", metavar="NAME", help="the served model (when several are)")
    init.add_argument("--out", metavar="DIR", type=Path, default=Path("."), help="default: .")
    init.add_argument("--force", action="store_true", help="overwrite existing files")
    init.add_argument("--suite", default=DEFAULT_SUITE, help=f"default: {DEFAULT_SUITE}")
    init.add_argument("--num-prompts", type=int, default=10, help="default: 10")
    init.add_argument("--max-tokens", type=int, default=64, help="default: 64")


def _given(args: argparse.Namespace) -> tuple[str, str] | None:
    """``(engine, URL or folder)`` from the flags, None when no engine flag was given."""
    for engine in ENGINES:
        value = getattr(args, engine.replace("-", "_"))
        if value is not None:
            return engine, value
    return None


def ask(read: Callable[[str], str] = input) -> tuple[str, str, str | None]:
    """``(engine, URL or folder, model or None)`` from questions, defaults in brackets."""
    engine = ""
    while engine not in ENGINES:
        engine = read(f"engine ({', '.join(ENGINES)}) [vllm]: ").strip() or "vllm"
    if engine == "mlx":
        where = ""
        while not where:
            where = read("model folder: ").strip()
    else:
        where = read(f"URL [{DEFAULT_URLS[engine]}]: ").strip() or DEFAULT_URLS[engine]
    model = read("served model name [the one it serves]: ").strip() or None
    return engine, where, model


def command_line(engine: str, where: str, args: argparse.Namespace) -> str:
    """The command that wrote the files, as the matrix's first comment says it."""
    words = ["pytest-infercheck", "init", f"--{engine}", where]
    if args.model:
        words += ["--model", args.model]
    if args.suite != DEFAULT_SUITE:
        words += ["--suite", args.suite]
    return " ".join(shlex.quote(w) for w in words)


def fit(probed: Probed, asked: Choices, out: Path) -> tuple[Choices, list[str]]:
    """``asked``, its ``max_tokens`` lowered to fit the server's context (or the short
    prompts written to ``out`` and used), and the facts that say so (see :mod:`.fit`)."""
    if probed.context is None:
        return asked, []
    margin = MARGINS.get(probed.kind, 0)
    lengths = count_tokens(probed, suite_texts(asked.suite, out, asked.num_prompts))
    if not lengths:
        return asked, []
    fitted = fitted_max_tokens(lengths, probed.context, asked.max_tokens, margin)
    where = f"{asked.suite}'s first {len(lengths)} prompts (up to {max(lengths)} tokens)"
    if fitted is not None:
        if fitted == asked.max_tokens:
            return asked, []
        note = f"max_tokens {fitted}: {where} and the generation fit the context {probed.context}"
        return dataclasses.replace(asked, max_tokens=fitted), [note]
    (out / SHORT_SUITE).write_text(short_suite_text())
    short = count_tokens(probed, suite_texts(SHORT_SUITE, out, len(SHORT_PROMPTS))) or [0]
    fitted = fitted_max_tokens(short, probed.context, asked.max_tokens, margin) or MIN_TOKENS
    note = (
        f"{where} leave no room in the context of {probed.context} tokens: init wrote "
        f"{SHORT_SUITE} ({len(SHORT_PROMPTS)} short prompts) and max_tokens {fitted}"
    )
    return dataclasses.replace(asked, suite=SHORT_SUITE, max_tokens=fitted), [note]


def run(args: argparse.Namespace, prog: str) -> int:
    """``init`` (see the module docstring)."""
    out: Path = args.out
    existing = [str(out / name) for name in FILES if (out / name).exists()]
    if existing and not args.force:
        print(f"{prog} init: error: {refusals(existing)}", file=sys.stderr)
        return 2
    given = _given(args)
    model = args.model
    if given is None:
        if not sys.stdin.isatty():
            print(
                f"{prog} init: error: give the engine: --vllm URL, --llama-server URL, "
                "--openai URL or --mlx PATH (stdin is not a terminal, so init cannot ask)",
                file=sys.stderr,
            )
            return 2
        engine, where, asked = ask()
        model = model or asked
    else:
        engine, where = given
    try:
        probed: Probed = probe(engine, where, model)
    except ProbeError as exc:
        print(f"{prog} init: error: {exc}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    choices, fitted = fit(probed, Choices(args.suite, args.num_prompts, args.max_tokens), out)
    probed = dataclasses.replace(probed, facts=(*probed.facts, *fitted))
    write_atomic(
        out / "infercheck.yaml", matrix_text(probed, command_line(engine, where, args), choices)
    )
    write_atomic(out / "pytest.ini", PYTEST_INI)
    for fact in probed.facts:
        print(f"  {fact}")
    for name in FILES:
        print(f"wrote {out / name}")
    print(f"run it: cd {shlex.quote(str(out))} && pytest")
    return 0
