"""The files ``pytest-infercheck init`` writes, from what the probe found (pure: no I/O).

The matrix has one model (``mine``) on one backend, a ``determinism`` check that runs at once
(greedy decoding ``runs`` times, every run the same tokens: ``min_determinism: 1.0``), and a
commented ``diff`` against a second engine whose gates suit what the probe found:

- ``scoring`` ``full`` (mlx-lm, llama-server up to 32,768 ids, vLLM whose
  ``--max-logprobs`` covers the vocabulary): ``max_kl`` per prompt (teacher-forced mean KL,
  exact) and ``max_mean_kl`` over the suite;
- ``top-k`` (vLLM's top ``--max-logprobs``, llama-server's top 8 at large vocabularies): the
  same gates, said to be on a lower bound of the KL;
- an OpenAI-compatible server (no teacher forcing): no KL gate (its KL is each side's own
  top-k up to the first divergent token, a lower bound), text similarity and answer flips;
  without logprobs, text and answers only. The comment says what is given up.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from .probe import Probed

MODEL_KEY = "mine"
BACKEND_KEYS = {"vllm": "vllm", "llama-server": "llama", "openai": "server", "mlx-lm": "local"}

OTHERS = {
    "mlx-lm": "{kind: mlx-lm, dtype: float32}   # the same engine in float32",
    "llama-server": (
        '{kind: llama-server, serve: "llama-server -m {model} --port {port} -fa off -ctk f32 '
        '-ctv f32"}   # a second llama-server, started by the plugin'
    ),
    "vllm": '{kind: vllm, url: "http://127.0.0.1:8001"}   # a second vLLM (version, flags)',
    "openai": '{kind: openai, url: "http://127.0.0.1:8001"}   # a second server',
}
"""The commented second engine of the diff, by the probed backend's kind."""

PYTEST_INI = """\
[pytest]
# Written by `pytest-infercheck init`: this folder is a pytest project of its own, and
# `pytest` here collects infercheck.yaml. The loop scope is pytest-asyncio's setting, written
# so that it prints no deprecation warning where it is installed.
asyncio_default_fixture_loop_scope = function
"""


DEFAULT_SUITE = "determinism"
"""The bundled suite init writes unless ``--suite`` names another."""


@dataclass(frozen=True)
class Choices:
    """What the user chose (flags or answers): the suite, how many prompts, tokens, runs."""

    suite: str = DEFAULT_SUITE
    num_prompts: int = 10
    max_tokens: int = 64
    runs: int = 3


def _q(value: str) -> str:
    """A YAML scalar in double quotes (JSON's quoting is YAML's)."""
    return json.dumps(value)


def backend_line(probed: Probed) -> str:
    """The ``backends:`` entry of the probed engine, as flow YAML."""
    fields = [f"kind: {probed.kind}"]
    if probed.url is not None:
        fields.append(f"url: {_q(probed.url)}")
    if probed.model_name is not None:
        fields.append(f"model_name: {_q(probed.model_name)}")
    return "{" + ", ".join(fields) + "}"


def model_line(probed: Probed) -> str:
    field, value = probed.model
    return f"{{{field}: {_q(value)}}}"


def diff_gates(probed: Probed) -> tuple[list[str], list[str]]:
    """``(comment lines saying why, gate lines)`` of the commented diff (see the module
    docstring)."""
    if probed.scoring == "full":
        why = [
            "Both sides scored on the baseline's tokens over the full vocabulary: the exact",
            "teacher-forced KL (when the other engine scores too: mlx-lm, llama-server, vLLM).",
        ]
        return why, [
            "max_kl: 0.01                # per prompt: teacher-forced mean KL",
            "max_mean_kl: 0.005          # suite gate: pooled mean KL",
            "flips: {fail_item_on: correct_to_wrong}   # needs a suite with answers",
        ]
    if probed.scoring == "top-k":
        why = [
            f"Teacher-forced over this server's top {probed.top_k} and a tail bucket: the KL",
            "is a lower bound of the true KL (what the probe found says how to get full rows).",
        ]
        return why, [
            "max_kl: 0.01                # per prompt: teacher-forced mean KL (bound)",
            "max_mean_kl: 0.005          # suite gate: pooled mean KL (bound)",
            "flips: {fail_item_on: correct_to_wrong}   # needs a suite with answers",
        ]
    if probed.logprobs:
        why = [
            "What an OpenAI-compatible server gives up: no teacher forcing, so no exact KL.",
            "A comparison sees each side's own top-k logprobs only up to the first divergent",
            "token (a lower bound, too weak to gate on): this diff gates on text and answers.",
            "For the exact KL attach the server by its own kind (--vllm, --llama-server).",
        ]
    else:
        why = [
            "What this server gives up: no logprobs came back, so no KL and no margins at all;",
            "this diff gates on text and answers only.",
        ]
    return why, [
        "min_similarity: 0.9         # per prompt: text similarity",
        "flips: {fail_item_on: correct_to_wrong}   # needs a suite with answers",
    ]


def matrix_text(probed: Probed, command: str, choices: Choices = Choices()) -> str:
    """The commented ``infercheck.yaml`` for ``probed``, written by ``command``."""
    backend = BACKEND_KEYS[probed.kind]
    target = f"{MODEL_KEY}@{backend}"
    why, gates = diff_gates(probed)
    other = OTHERS[probed.kind]
    lines = [
        f"# infercheck.yaml, written by `{command}`.",
        "# What the probe found:",
        *(f"#   - {fact}" for fact in probed.facts),
        "# Run `pytest` in this folder (`pytest --html=report.html --self-contained-html` for",
        "# the HTML report). Check kinds and their thresholds: docs/reference/checks/.",
        "models:",
        f"  {MODEL_KEY}: {model_line(probed)}",
        "backends:",
        f"  {backend}: {backend_line(probed)}"
        + ("   # attached: the plugin starts nothing" if probed.url else "   # in this process"),
        f"  # other: {other}",
        f"suites: [{choices.suite}]   # a bundled suite, or your own .jsonl",
        f"settings: {{num_prompts: {choices.num_prompts}, max_tokens: {choices.max_tokens}}}",
        "checks:",
        f"  # Greedy decoding {choices.runs} times: every run must give the same tokens.",
        f"  - determinism: {{target: {target}, runs: {choices.runs}}}",
        "    min_determinism: 1.0",
        "  # The same model on a second engine (uncomment `other` above and this check; the",
        "  # first backend is the baseline; `expect: budget` lets them differ within the gates).",
        *(f"  # {line}" for line in why),
        f"  # - diff: {{model: {MODEL_KEY}, backends: [{backend}, other]}}",
        "  #   expect: budget",
        *(f"  #   {gate}" for gate in gates),
    ]
    return "\n".join(lines) + "\n"


def uncommented(text: str) -> str:
    """``text`` with its commented ``other`` backend and ``diff`` check made live (for tests
    and for the reader: what the file becomes once a second engine is there)."""
    out: list[str] = []
    live = False
    for line in text.splitlines():
        if line.startswith("  # other:"):
            out.append("  other:" + line[len("  # other:") :])
        elif line.startswith("  # - diff:"):
            live = True
            out.append("  - diff:" + line[len("  # - diff:") :])
        elif live and line.startswith("  #   "):
            out.append("    " + line[len("  #   ") :])
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def refusals(existing: Sequence[str]) -> str | None:
    """The refusal to overwrite ``existing`` files (None when there are none)."""
    if not existing:
        return None
    names = " and ".join(existing)
    verb = "exists" if len(existing) == 1 else "exist"
    return f"{names} {verb}: not overwritten (--force overwrites)"
