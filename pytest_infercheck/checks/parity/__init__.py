"""stream-parity and endpoint-parity: one server, the same request two ways, same answer.

**stream-parity**: each prompt generated with the backend's own request, once as usual and
once streamed (SSE; Ollama: NDJSON), assembled from its chunks. The two must be identical:
token ids where the server returns them (llama-server), else text; ``logprob_tolerance``
bounds ``max |logprob_a - logprob_b|`` over the tokens both outputs share (:mod:`.spec`:
written, a drift that cannot be measured fails the item). A dropped, duplicated or reordered
chunk fails the item.

**endpoint-parity**: each prompt's messages through each of ``endpoints``; the first is the
reference, every other one is an item ``<prompt>[<endpoint>]``. ``completions`` gets the text
of the chat template rendered once (llama-server: its ``/apply-template``; OpenAI-compatible
servers: the served model folder's own template, in-process), ``chat``
(``/v1/chat/completions``) and ``messages`` (Anthropic-style ``/v1/messages``) get the
messages and apply the same template on the server, so the three receive the same input.
Compared on text: similarity (difflib ratio) at least ``min_similarity`` (default 1.0: the
same text) and answers by the prompt's answer kind (``flips.fail_item_on``). Differences that
remain by design of the endpoints, and can show up as real divergences: the servers strip
special tokens from chat output but may keep them in completions text; BOS handling (a
completions prompt is tokenized with the server's add-BOS rule, while a template may spell
out the BOS; llama-server strips a leading BOS from its template output and adds it back);
a reasoning block returned apart by the chat endpoints; Anthropic ``max_tokens`` is
mandatory and ``stop_reason`` is mapped to ``stop``/``length``; no logprobs are compared.

Both, as every kind (the framework's rules): all requests are made first (:mod:`.gather`),
then each item is judged purely (:mod:`.judge`). A path the target's probe found lacking is
``unsupported`` (the item compares nothing and says so); a request that fails on a path the
target offers (or was not probed) fails the item with the server's message, on the
reference side too. Each side's own faults (a non-finite logprob, a logprob that does not
match its token, an empty generation against the other side, a non-finite similarity or
drift) fail the item, named after the side. A token-level divergence is labelled
``near-tie``, ``decisive`` or ``unknown`` at ``tie_margin``; ``fail_on: decisive`` waives a
near-tie only once what follows it was judged (:mod:`.judge`). The aggregate
(:mod:`.summarize`) counts the items and their labels, names the items with faults, and
fails for its failed and errored items. Both need a server backend; an in-process target
fails its items and the aggregate with that message.
"""

from __future__ import annotations

from ...render.views import target_aggregate
from ..framework.kind import CheckKind, PresentFacet, SpecFacet
from ..framework.target import TargetContext, target_label
from .compare import NON_FINITE_DRIFT, SideComparison, compare_generations
from .evidence import Forced, ParityEvidence
from .gather import EndpointGather, StreamGather
from .judge import endpoint_side, judge_endpoint, judge_stream, stream_side
from .present import VIEWS, endpoint_summary_lines, parity_prompt, properties, summary_lines
from .records import (
    EndpointCounts,
    EndpointParityAggregate,
    EndpointParityContext,
    EndpointSide,
    ParityAggregate,
    ParityIncomplete,
    ParityPrompt,
    StreamSide,
)
from .spec import (
    ENDPOINT_GATES,
    ENDPOINT_HARNESS,
    STREAM_GATES,
    STREAM_HARNESS,
    EndpointParitySpec,
    EndpointParityThresholds,
    StreamParitySpec,
    StreamParityThresholds,
    endpoint_plan,
    stream_unmeasurable,
)
from .summarize import (
    ParityItem,
    count_items,
    endpoint_counts,
    summarize_endpoints,
    summarize_stream,
)

STREAM_PARITY = CheckKind(
    name="stream-parity",
    spec=SpecFacet(
        options=StreamParitySpec,
        thresholds=StreamParityThresholds,
        gates=STREAM_GATES,
        label=target_label,
        context=TargetContext,
        records={
            "prompt": ParityPrompt,
            "incomplete": ParityIncomplete,
            "aggregate": ParityAggregate,
        },
        unmeasurable=stream_unmeasurable,
        harness=STREAM_HARNESS,
    ),
    gather=StreamGather,
    judge=judge_stream,
    summarize=summarize_stream,
    present=PresentFacet(
        family="stream-parity",
        properties=properties,
        summary_lines=summary_lines,
        views={"aggregate": target_aggregate, **VIEWS},
    ),
)
ENDPOINT_PARITY = CheckKind(
    name="endpoint-parity",
    spec=SpecFacet(
        options=EndpointParitySpec,
        thresholds=EndpointParityThresholds,
        gates=ENDPOINT_GATES,
        label=target_label,
        context=EndpointParityContext,
        records={
            "prompt": ParityPrompt,
            "incomplete": ParityIncomplete,
            "aggregate": EndpointParityAggregate,
        },
        plan=endpoint_plan,
        harness=ENDPOINT_HARNESS,
    ),
    gather=EndpointGather,
    judge=judge_endpoint,
    summarize=summarize_endpoints,
    present=PresentFacet(
        family="endpoint-parity",
        properties=properties,
        summary_lines=endpoint_summary_lines,
        views={"aggregate": target_aggregate, **VIEWS},
    ),
)

__all__ = [
    "ENDPOINT_PARITY",
    "NON_FINITE_DRIFT",
    "STREAM_PARITY",
    "EndpointCounts",
    "EndpointParityAggregate",
    "EndpointParityContext",
    "EndpointParitySpec",
    "EndpointParityThresholds",
    "EndpointSide",
    "Forced",
    "ParityAggregate",
    "ParityEvidence",
    "ParityIncomplete",
    "ParityItem",
    "ParityPrompt",
    "SideComparison",
    "StreamParitySpec",
    "StreamParityThresholds",
    "StreamSide",
    "compare_generations",
    "count_items",
    "endpoint_counts",
    "endpoint_side",
    "endpoint_summary_lines",
    "parity_prompt",
    "stream_side",
    "summarize_endpoints",
    "summarize_stream",
    "summary_lines",
]
