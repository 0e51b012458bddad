"""tokenization: the same prompts, rendered and tokenized by each backend of a target list,
must give the same token ids.

``tokenization: {targets: [adder@local, adder@llama, adder@vllm], allow: [normalization]}``:
the first target is the reference; each other target is an item ``<prompt>[<label>]``
(labelled by its backend when the targets share the model, as in ``diff``), and the check is
named after the reference's model (``tokenization(adder)``).

Each side's ids are the ones its engine processes for the prompt, rendered by the backend's
own ``render`` (chat template applied or not, BOS included where that engine adds it), so a
template rendered differently shows:

- mlx-lm: its tokenizer's ids of the rendered prompt; llama-server: the rendered prompt's ids
  by its ``/tokenize``;
- an OpenAI-compatible server: its vLLM-style ``POST /tokenize`` where the target's probe
  found one (recorded in the engine's identity, ``observed.tokenize``); a server the probe
  found without one gives only the prompt token count (``usage.prompt_tokens`` of a
  ``max_tokens: 1`` request: vllm-mlx, mlx_lm.server), and its items say so. Then equal
  counts pass as ``count-only``; different counts fail.

The verdict and its cause, in order (rendered text / template, BOS and special tokens, ids;
:mod:`~pytest_infercheck.metrics.tokenization`): an item that differs names the first
differing position, both ids and their texts, and the cause. Differences that are properties
of the tokenizers (``normalization``: one side normalizes the text to NFC;
``control-tokens``: text spelling a token one engine treats as a control token) fail too,
unless the check lists them in ``allow``; an allowed difference passes and its item still
says it. An empty tokenization always fails. A request that fails (a render, ``/tokenize``,
a count) fails its item with the server's message, the reference's too. The aggregate
(:mod:`.summarize`) counts the prompts identical, count-only and differing (by cause) and
fails for its failed and errored items. The check has no thresholds.

Facets: :mod:`.spec`, :mod:`.gather`, :mod:`.evidence`, :mod:`.judge`, :mod:`.summarize`,
:mod:`.present`; records in :mod:`.records`.
"""

from __future__ import annotations

from ...specs import KindThresholds
from ..framework.kind import CheckKind, PresentFacet, SpecFacet
from ..framework.target import TargetContext
from .evidence import Measured, TokenEvidence
from .gather import TokenizationGather, measure
from .judge import item_violations, judge, window
from .present import MEASURES, VIEWS, properties, summary_lines, tested_columns
from .records import (
    SideCounts,
    TokenizationAggregate,
    TokenizationIncomplete,
    TokenizationPrompt,
    TokenSideRecord,
    WindowRow,
)
from .spec import HARNESS, TokenizationSpec, plan, reference_model
from .summarize import TokenItem, count_items, summarize

TOKENIZATION = CheckKind(
    name="tokenization",
    spec=SpecFacet(
        options=TokenizationSpec,
        thresholds=KindThresholds,
        gates=(),
        label=reference_model,
        context=TargetContext,
        records={
            "prompt": TokenizationPrompt,
            "incomplete": TokenizationIncomplete,
            "aggregate": TokenizationAggregate,
        },
        plan=plan,
        harness=HARNESS,
    ),
    gather=TokenizationGather,
    judge=judge,
    summarize=summarize,
    present=PresentFacet(
        family="tokenization",
        properties=properties,
        summary_lines=summary_lines,
        views=VIEWS,
        measures=MEASURES,
        other_measures=False,
        columns=tested_columns,
        headline="identical",
    ),
)

__all__ = [
    "TOKENIZATION",
    "Measured",
    "SideCounts",
    "TokenEvidence",
    "TokenItem",
    "TokenSideRecord",
    "TokenizationAggregate",
    "TokenizationGather",
    "TokenizationIncomplete",
    "TokenizationPrompt",
    "TokenizationSpec",
    "WindowRow",
    "count_items",
    "item_violations",
    "judge",
    "measure",
    "summarize",
    "window",
]
