"""structured-parity: tool calls, finish reasons, the reasoning/content split, usage and
several choices must agree across the paths of one server and across servers.

``structured-parity: {targets: [tiny@llama, tiny@vllm], paths: [chat, chat-stream]}``: each
prompt (a suite line, with its ``tools``, ``tool_choice``, ``response_format`` and
conversation turns, tool calls and results included) becomes one
:class:`~pytest_infercheck.structured.records.StructuredRequest`
(:mod:`~pytest_infercheck.structured.request`), sent at temperature 0 through each path
(default: every one the target's backend can send of ``chat``, ``chat-stream``,
``chat-n2``, ``messages``, ``messages-stream``). The backend must answer structured requests
(:class:`~pytest_infercheck.structured.records.StructuredChat`).

One item per prompt and target (``tu001[vllm]``, labelled by backend when the targets share
the model; a single target: one per prompt, ``tu001``), plus the aggregate.

The facets: :mod:`.spec` (options, ``allow``, the plan), :mod:`.gather` (every request, the
targets' abilities probed first), :mod:`.judge` (pure: the answers read, compared and
checked for validity), :mod:`.summarize` (the aggregate) and :mod:`.present`. The verdict
rules are the framework's (:mod:`~pytest_infercheck.verdict`): a path is ``unsupported``
only where the target's probe found it lacking (the item says so and compares nothing on
it); a request on any other path that is refused (4xx) or fails (5xx) fails the item with
the server's message, on the reference side too; a path that cannot express the request
(``response_format`` on messages) is not exercised, decided before it is sent. ``allow`` (a
threshold) lists fields whose differences pass (each is still shown and counted); validity
faults and failed requests always fail.
"""

from __future__ import annotations

from ..framework.kind import CheckKind, SpecFacet
from .gather import StructuredGatherer
from .harness import HARNESS
from .judge import judge
from .present import PRESENT
from .records import StructuredParityAggregate, StructuredParityContext, StructuredParityPrompt
from .spec import (
    GATES,
    StructuredParitySpec,
    StructuredParityThresholds,
    check_label,
    plan,
)
from .summarize import summarize

STRUCTURED_PARITY = CheckKind(
    name="structured-parity",
    spec=SpecFacet(
        options=StructuredParitySpec,
        thresholds=StructuredParityThresholds,
        gates=GATES,
        label=check_label,
        context=StructuredParityContext,
        records={"prompt": StructuredParityPrompt, "aggregate": StructuredParityAggregate},
        plan=plan,
        harness=HARNESS,
    ),
    gather=StructuredGatherer,
    judge=judge,
    summarize=summarize,
    present=PRESENT,
)
