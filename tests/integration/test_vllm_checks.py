"""Every engine check against the real vLLM (its CPU build, ``scripts/install_vllm.sh``)
serving the realistic Qwen2 (qwen2 vocabulary, Qwen2.5 chat template, head size 32), each
passing on the faithful server with its numbers asserted and failing on the faults it can
see. One pytest run per check kind.

- The shared float32 server (``vllm_qwen2``, started once per session) serves every test it
  can, attached as ``kind: vllm``: ``determinism`` (5 runs, bit-identical: drift 0.0),
  ``stress`` (8 concurrent equal one at a time), ``batch-invariance`` (float32: exact,
  tolerance 0), ``stream-parity`` (ids and logprobs), ``endpoint-parity`` (completions, chat
  and ``/v1/messages``), ``cache-pollution`` (vLLM answers the context overflow, malformed
  UTF-8 bytes and ``max_tokens: 0`` with HTTP 400 and stays unchanged), ``tokenization``
  (ids from vLLM's ``/tokenize`` equal mlx-lm's on the ``tokenizer-edge`` suite, raw and
  templated; against mlx-lm with a copy of the tokenizer lacking the merge of " the", the
  prompts it changes fail at their first differing id). Qwen's NFC normalizer cannot be
  removed for such a fault: transformers' ``Qwen2Tokenizer`` adds it back.
- Each kind's run also holds the fault matrix (:mod:`tests.fault_matrix`): the same server
  wrapped by ``pytest_infercheck_wrap_backend`` (NaN / +inf logprobs, empty, truncated, a
  swapped token, mismatched logprobs) and behind a :class:`~tests.faulty_proxy.FaultyProxy`
  that answers generations with HTTP 200 and an empty body; each must fail naming its fault
  (:data:`tests.faults.EXPECTED`, an engine with top-k logprobs).
- One more server, started by the plugin (``serve:`` + ``env:``): vLLM with
  ``VLLM_BATCH_INVARIANT=1``, which starts, answers its first request with HTTP 500 and exits
  (``batch_invariant.py``: ``'function' object is not subscriptable``): its items must fail
  as a dead server with its last log lines, while the items on the shared server pass.
- Not here: a bfloat16 server. Measured on this build and model (and on a hidden-128 copy),
  bfloat16 is batch-invariant too: 0.0 logprob difference between each prompt alone and in
  bursts of 8 to 64 concurrent requests, staggered or not, short and 400-token prompts; the
  ~0.1 that bfloat16 moves logprobs by is against float32, not under batching. A start
  (about 45 s, 3.8 GB) that would show nothing the float32 server does not.

Grouped for ``pytest -n N --dist loadgroup`` (``xdist_group``): one worker starts the
shared server. The suite itself runs in one process (``scripts/test.sh``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from conftest import REPO
from tests.fault_matrix import (
    CONFTEST,
    Verdict,
    assert_expected,
    check_entry,
    verdicts,
)
from tests.faults import (
    LOGPROB,
    NON_FINITE_INF,
    NON_FINITE_NAN,
    Fault,
    Mode,
    backend_name,
    message_names,
)
from tests.faulty_proxy import Fault as ProxyFault
from tests.faulty_proxy import FaultyProxy
from tests.integration.served import VLLM_ENV, VLLM_FLAGS, vllm_cpu_command
from tests.plugin.conftest import INI

pytestmark = pytest.mark.xdist_group("vllm")

KIND = "vllm"
"""The backend kind the tests attach to vLLM with."""
MODEL = "qwen2"
PROMPTS = [
    ("p1", "The capital of France is"),
    ("p2", "def fibonacci(n):"),
    ("p3", "Once upon a time, in a land far away, there lived a"),
    ("p4", "1, 2, 3, 4,"),
    ("p5", "北京是中国的首都\uff0c"),  # a full-width comma
    ("p6", "Translate to German: The weather is nice today."),
    ("p7", "Q: What is the boiling point of water at sea level?\nA:"),
    ("p8", "Roses are red,"),
]
MAX_TOKENS = 8
FAULT_PROMPTS = 3
"""The fault checks run on the first prompts only (the control runs on all)."""

CONTROLS = {
    "determinism": f"""\
  - determinism: {{target: {MODEL}@vllm, runs: 5}}
    name: none
    min_determinism: 1.0
    max_logprob_drift: 0.0
""",
    "stress": f"""\
  - stress: {{target: {MODEL}@vllm, levels: [1, 8], repeats: 2}}
    name: none
    min_consistency: 1.0
    max_error_rate: 0.0
""",
    "batch-invariance": f"""\
  - batch-invariance: {{target: {MODEL}@vllm, trials: 2, batch_size: 8, seed: 0}}
    name: none
    logprob_tolerance: 0.0
""",
    "stream-parity": f"""\
  - stream-parity: {MODEL}@vllm
    name: none
""",
    "endpoint-parity": f"""\
  - endpoint-parity: {{target: {MODEL}@vllm, endpoints: [completions, chat, messages]}}
    name: none
    min_similarity: 1.0
""",
    "cache-pollution": f"""\
  - cache-pollution: {MODEL}@vllm
    name: none
""",
}
"""Each kind's control on the faithful server, all prompts: the vLLM-specific settings."""
KINDS = tuple(CONTROLS)
FAULTS = tuple(Fault)

SEEN_ON_VLLM: dict[tuple[str, Fault], tuple[str, ...]] = {
    ("endpoint-parity", Fault.NAN_LOGPROBS): NON_FINITE_NAN,
    ("endpoint-parity", Fault.INF_LOGPROBS): NON_FINITE_INF,
    ("endpoint-parity", Fault.MISMATCHED_LOGPROBS): LOGPROB,
}
"""Faults :data:`tests.faults.EXPECTED` lets pass that vLLM's answers make visible: its chat
endpoint returns the logprobs the backend asks for, and endpoint-parity checks them."""

Found = tuple[dict[str, Verdict], dict[str, dict[str, Any]]]
RUNS: dict[str, Found] = {}
"""Each kind's run (its verdicts by check name, its items), made by its first test."""


def attached(name: str, url: str, chat: bool = False) -> str:
    """A ``backends:`` entry attached to the server at ``url`` (raw completions unless
    ``chat``)."""
    return f"  {name}: {{kind: {KIND}, url: '{url}', chat: {json.dumps(chat)}}}\n"


def started(name: str, python: Path, flags: str, env: dict[str, str]) -> str:
    """A ``backends:`` entry for a vLLM server the plugin starts (``serve:`` with ``env``)."""
    serve = vllm_cpu_command(python, flags)
    env_yaml = ", ".join(f"{key}: '{value}'" for key, value in {**VLLM_ENV, **env}.items())
    return (
        f"  {name}:\n    kind: {KIND}\n    chat: false\n    startup_timeout: 240\n"
        f'    serve: "{serve}"\n    env: {{{env_yaml}}}\n'
    )


def write_project(
    pytester: pytest.Pytester, model: Path, backends: str, checks: str, conftest: str = ""
) -> None:
    pytester.makefile(".ini", pytest=INI)
    if conftest:
        pytester.makeconftest(conftest)
    lines = [json.dumps({"id": i, "prompt": p, "max_tokens": MAX_TOKENS}) for i, p in PROMPTS]
    pytester.makefile(".jsonl", prompts="\n".join(lines))
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  {MODEL}: {{path: '{model}'}}\nbackends:\n{backends}"
        f"suites: [prompts.jsonl]\nchecks:\n{checks}",
    )


def run(pytester: pytest.Pytester) -> tuple[pytest.RunResult, dict[str, dict[str, Any]]]:
    """A subprocess run (a proxy in this process uses httpx, which an in-process run would
    unload): its result and its items by node id without the file (``kind(name)::...``)."""
    result = pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "--infercheck-results=results.json"
    )
    doc = json.loads((pytester.path / "results.json").read_text())
    return result, {item["nodeid"].split("::", 1)[1]: item for item in doc["items"]}


@pytest.fixture(scope="module")
def empty_body_url(vllm_qwen2: str) -> Iterator[str]:
    """The shared server behind a proxy answering every generation with HTTP 200 and an
    empty body (``/health``, ``/tokenize`` ... pass)."""
    with FaultyProxy(vllm_qwen2, ProxyFault(perturb_every=1, empty_body=True)) as proxy:
        yield proxy.url


def matrix(
    pytester: pytest.Pytester, model: Path, url: str, empty_body_url: str, kind: str
) -> Found:
    """``kind``'s control and one check per fault (``flaky-<fault>``: the first generation
    of each prompt intact, the later ones faulty), each fault check on the first
    :data:`FAULT_PROMPTS` prompts."""
    backends = attached("vllm", url)
    checks = CONTROLS[kind]
    for fault in FAULTS:
        name = backend_name(fault, Mode.AFTER_FIRST)
        backends += attached(name, empty_body_url if fault is Fault.EMPTY_BODY else url)
        checks += check_entry(kind, fault.value, name, "vllm", model=MODEL)
        checks += f"    suites: [{{suite: prompts.jsonl, limit: {FAULT_PROMPTS}}}]\n"
    if kind not in RUNS:
        write_project(pytester, model, backends, checks, CONFTEST)
        _, items = run(pytester)
        RUNS[kind] = verdicts(pytester.path / "results.json"), items
    return RUNS[kind]


def control(items: dict[str, dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    """The control check's items by name (``p1``, ``c8``, ``p1[chat]``, ``aggregate``)."""
    prefix = f"{kind}(none)::prompts::"
    return {k.removeprefix(prefix): v for k, v in items.items() if k.startswith(prefix)}


@pytest.mark.parametrize(("kind", "fault"), [(k, f) for k in KINDS for f in FAULTS])
def test_fault_fails_naming_it(
    pytester: pytest.Pytester,
    realistic_qwen2: Any,
    vllm_qwen2: str,
    empty_body_url: str,
    kind: str,
    fault: Fault,
) -> None:
    found, _ = matrix(pytester, realistic_qwen2.path, vllm_qwen2, empty_body_url, kind)
    assert found["none"].passed, found["none"].message
    verdict = found[fault.value]
    if (kind, fault) not in SEEN_ON_VLLM:
        assert_expected(kind, fault, verdict, top_k=True)  # vLLM returns top-k logprobs
        return
    assert not verdict.passed, f"{kind} passed the fault {fault.name} silently"
    assert message_names(verdict.message, SEEN_ON_VLLM[kind, fault]), verdict.message[:3000]


def test_determinism_is_bit_identical_and_fails_on_a_changed_token(
    pytester: pytest.Pytester, realistic_qwen2: Any, vllm_qwen2: str, empty_body_url: str
) -> None:
    """float32: 5 runs of each prompt identical, logprobs included (drift 0.0); the flaky
    swapped token (runs 2 and 3 of 3 alike) leaves a modal share of 2/3 on every prompt."""
    _, items = matrix(pytester, realistic_qwen2.path, vllm_qwen2, empty_body_url, "determinism")
    found = control(items, "determinism")
    aggregate = found.pop("aggregate")["data"]
    assert (aggregate["prompts"], aggregate["deterministic_prompts"]) == (8, 8)
    assert (aggregate["score"], aggregate["errors"], aggregate["max_logprob_drift"]) == (1, 0, 0)
    for name, item in found.items():
        data = item["data"]
        assert (data["runs"], data["distinct"], data["modal_share"]) == (5, 1, 1.0), name
        assert data["first_divergences"] == [None] * 5, name
        assert data["max_logprob_drift"] == 0.0, name
        assert len(data["outputs"][0]["token_ids"]) == MAX_TOKENS, name
    prefix = "determinism(swapped)::prompts::"
    for prompt_id, _ in PROMPTS[:FAULT_PROMPTS]:
        data = items[prefix + prompt_id]["data"]
        assert (data["distinct"], data["modal_share"]) == (2, pytest.approx(2 / 3)), data
        assert items[prefix + prompt_id]["outcome"] == "failed"


def test_stress_eight_concurrent_equal_one_at_a_time(
    pytester: pytest.Pytester, realistic_qwen2: Any, vllm_qwen2: str, empty_body_url: str
) -> None:
    """float32: every output at 8 in flight equals its prompt alone; the flaky swapped token
    makes every output at level 2 differ from its reference."""
    _, items = matrix(pytester, realistic_qwen2.path, vllm_qwen2, empty_body_url, "stress")
    found = control(items, "stress")
    for level, in_flight in (("c1", 1), ("c8", 8)):
        data = found[level]["data"]
        assert (data["requests"], data["consistent"], data["errors"]) == (16, 16, {}), data
        assert (data["max_in_flight"], data["flips"]) == (in_flight, 0), data
    data = items["stress(swapped)::prompts::c2"]["data"]
    assert (data["requests"], data["consistent"], data["consistency"]) == (3, 0, 0.0), data


def test_batch_invariance_is_exact_in_float32(
    pytester: pytest.Pytester, realistic_qwen2: Any, vllm_qwen2: str, empty_body_url: str
) -> None:
    """Each prompt alone and inside 2 bursts of 8 concurrent requests: the same output and
    the same logprobs to the bit."""
    _, items = matrix(
        pytester, realistic_qwen2.path, vllm_qwen2, empty_body_url, "batch-invariance"
    )
    found = control(items, "batch-invariance")
    aggregate = found.pop("aggregate")["data"]
    assert (aggregate["prompts"], aggregate["invariant_prompts"], aggregate["trials"]) == (8, 8, 16)
    assert aggregate["batched_by"] == "concurrent burst"
    for name, item in found.items():
        trials = item["data"]["trials"]
        assert [len(t["batch"]) for t in trials] == [8, 8], name
        assert all(t["match"] and t["max_logprob_diff"] == 0.0 for t in trials), (name, trials)


def test_stream_and_endpoint_parity(
    pytester: pytest.Pytester, realistic_qwen2: Any, vllm_qwen2: str, empty_body_url: str
) -> None:
    """Streamed and not, and the completions endpoint (the template rendered once) against
    the chat endpoint: identical text on every prompt."""
    _, items = matrix(pytester, realistic_qwen2.path, vllm_qwen2, empty_body_url, "stream-parity")
    found = control(items, "stream-parity")
    assert found.pop("aggregate")["data"]["n_match"] == len(PROMPTS)
    for name, item in found.items():
        data = item["data"]
        assert (data["match"], data["logprob_drift"]) == (True, 0.0), name
        ids = data["reference"]["token_ids"]
        assert data["other"]["token_ids"] == ids and len(ids) == MAX_TOKENS, name
    _, items = matrix(pytester, realistic_qwen2.path, vllm_qwen2, empty_body_url, "endpoint-parity")
    found = control(items, "endpoint-parity")
    aggregate = found.pop("aggregate")["data"]
    assert (aggregate["items"], aggregate["n_match"], aggregate["n_errors"]) == (16, 16, 0)
    for name, item in found.items():
        data = item["data"]
        assert (data["match"], data["similarity"]) == (True, 1.0), name
        assert data["reference"]["prompt_text"].startswith("<|im_start|>system\n"), name
        if name.endswith("[chat]"):  # ids and logprobs: the same as the completions endpoint
            assert data["other"]["token_ids"] == data["reference"]["token_ids"], name
            assert data["logprob_drift"] == 0.0, name
        else:  # /v1/messages: text only
            assert (data["other"]["token_ids"], data["logprob_drift"]) == (None, None), name


def test_cache_pollution_hostile_answers_and_an_unchanged_server(
    pytester: pytest.Pytester, realistic_qwen2: Any, vllm_qwen2: str, empty_body_url: str
) -> None:
    """vLLM refuses the context overflow, malformed UTF-8 bytes and ``max_tokens: 0`` with
    HTTP 400, answers the rest, stays alive, and its 8 reference outputs never change."""
    _, items = matrix(pytester, realistic_qwen2.path, vllm_qwen2, empty_body_url, "cache-pollution")
    found = control(items, "cache-pollution")
    aggregate = found.pop("aggregate")["data"]
    assert (aggregate["n_hostile"], aggregate["n_dead"], aggregate["n_polluted"]) == (5, 0, 0)
    responses = aggregate["responses"]
    assert "maximum context length is 1024 tokens" in responses["context-overflow"]
    assert responses["context-overflow"].startswith("HTTP 400")
    assert responses["invalid-utf8"].startswith("raw bytes: HTTP 400")
    assert "max_tokens must be at least 1" in responses["max-tokens-0"]
    assert responses["disconnect"] == "HTTP 200, closed after the first event"
    for name, item in found.items():
        assert (item["data"]["alive"], item["data"]["changed"]) == (True, []), name
        assert item["data"]["prompts"] == len(PROMPTS), name


def without_merge(source: Path, dest: Path, merged: str = "\u0120the") -> Path:
    """A copy of the model folder ``source`` (weights linked) whose tokenizer lacks the BPE
    merge that makes ``merged`` (" the"): a faulty tokenizer."""
    dest.mkdir()
    for path in source.iterdir():
        if path.is_file() and path.name != "tokenizer.json":
            (dest / path.name).symlink_to(path)
    tokenizer = json.loads((source / "tokenizer.json").read_text())
    merges = tokenizer["model"]["merges"]
    tokenizer["model"]["merges"] = [m for m in merges if "".join(m) != merged]
    assert len(tokenizer["model"]["merges"]) == len(merges) - 1
    (dest / "tokenizer.json").write_text(json.dumps(tokenizer))
    return dest


EDGE_PROMPTS = 66


def test_tokenization_through_tokenize_equals_mlx_lm(
    pytester: pytest.Pytester, realistic_qwen2: Any, vllm_qwen2: str
) -> None:
    """vLLM's ``/tokenize`` (raw text; chat messages with the generation prompt) gives
    mlx-lm's ids on all 66 ``tokenizer-edge`` prompts; against mlx-lm with a tokenizer that
    lacks the merge of " the", exactly the prompts whose ids that changes fail, at the first
    differing position (both computed here with ``tokenizers``)."""
    faulty = without_merge(realistic_qwen2.path, pytester.path / "qwen2-faulty")
    backends = "  raw: {kind: mlx-lm, chat: false}\n  chat: {kind: mlx-lm, chat: true}\n"
    backends += attached("vllm", vllm_qwen2) + attached("vllmchat", vllm_qwen2, chat=True)
    checks = f"""\
  - tokenization: {{targets: [{MODEL}@raw, {MODEL}@vllm]}}
    name: raw
  - tokenization: {{targets: [{MODEL}@chat, {MODEL}@vllmchat]}}
    name: chat
  - tokenization: {{targets: [faulty@raw, {MODEL}@vllm]}}
    name: faulty
"""
    write_project(pytester, realistic_qwen2.path, backends, checks)
    matrix_path = pytester.path / "infercheck.yaml"
    text = matrix_path.read_text().replace("[prompts.jsonl]", "[tokenizer-edge]")
    matrix_path.write_text(text.replace("models:\n", f"models:\n  faulty: {{path: '{faulty}'}}\n"))
    good, bad = (
        Tokenizer.from_file(str(p / "tokenizer.json")) for p in (realistic_qwen2.path, faulty)
    )
    first_difference = {}
    for line in (REPO / "suites" / "tokenizer-edge.jsonl").read_text().splitlines():
        prompt = json.loads(line)
        ids = [good.encode(prompt["prompt"]).ids, bad.encode(prompt["prompt"]).ids]
        if ids[0] != ids[1]:
            first_difference[prompt["id"]] = next(
                i for i, (a, b) in enumerate(zip(*ids, strict=False)) if a != b
            )
    assert 0 < len(first_difference) < EDGE_PROMPTS

    result, items = run(pytester)
    outcomes = result.parseoutcomes()
    changed = len(first_difference)
    assert outcomes == {"passed": 3 * EDGE_PROMPTS + 2 - changed, "failed": changed + 1}, outcomes
    for name in ("raw", "chat"):
        prefix = f"tokenization({name})::tokenizer-edge::"
        found = {k.removeprefix(prefix): v["data"] for k, v in items.items() if prefix in k}
        aggregate = found.pop("aggregate")
        assert len(found) == EDGE_PROMPTS, aggregate
        for key, data in found.items():
            assert data["status"] == "identical", (key, data)
            assert data["other"]["count"] == data["reference"]["count"] > 0, key
        engine = next(e for e in aggregate["engines"].values() if e["kind"] == "vllm")
        assert engine["version"] == "0.32.0", engine
    prefix = "tokenization(faulty)::tokenizer-edge::"
    failed = {
        k.removeprefix(prefix): v["data"] for k, v in items.items() if v["outcome"] == "failed"
    }
    assert failed.pop("aggregate")
    assert sorted(failed) == sorted(f"{p}[{MODEL}.vllm]" for p in first_difference), failed
    for prompt_id, position in first_difference.items():
        data = failed[f"{prompt_id}[{MODEL}.vllm]"]
        assert (data["cause"], data["first_difference"]) == ("ids", position), data


def test_a_server_that_dies_on_its_first_request_fails_its_items_only(
    pytester: pytest.Pytester, realistic_qwen2: Any, vllm_python: Path, vllm_qwen2: str
) -> None:
    """vLLM with ``VLLM_BATCH_INVARIANT=1`` (started by the plugin) is healthy, answers its
    first request with HTTP 500 and exits: every item on it fails naming the dead server with
    its last log lines (the engine's error), stress without retrying a dead port; the items
    on the shared server pass."""
    backends = attached("vllm", vllm_qwen2) + started(
        "invariant", vllm_python, VLLM_FLAGS, {"VLLM_BATCH_INVARIANT": "1"}
    )
    checks = f"""\
  - determinism: {{target: {MODEL}@invariant, runs: 2}}
    name: dies
  - stress: {{target: {MODEL}@invariant, levels: [1, 4], repeats: 1}}
    name: dies
  - determinism: {{target: {MODEL}@vllm, runs: 2}}
    name: lives
"""
    write_project(pytester, realistic_qwen2.path, backends, checks)
    result, items = run(pytester)
    outcomes = result.parseoutcomes()
    assert outcomes == {"passed": len(PROMPTS) + 1, "failed": len(PROMPTS) + 1 + 2 + 1}, outcomes
    for key, item in items.items():
        if "(lives)" in key:
            assert item["outcome"] == "passed", (key, item)
            continue
        assert item["outcome"] == "failed", (key, item)
        text = "\n".join([*item.get("violations", []), item.get("longrepr") or ""])
        assert "invariant" in text and ("died" in text or "exited" in text), (key, text)
        assert "object is not subscriptable" in text, (key, text[-3000:])
