"""The tokenization check in-process, on the tiny adder's byte-level tokenizer (mlx-lm).

Faithful: the same engine under two backend names gives identical ids. Faults, each on one
side: a BOS the other side does not add (a real option, ``add_bos: false``), a rendered
text perturbed (:class:`TokenFault` ``template``: one space appended by the render), one
token id changed (``changed``), an empty tokenization (``empty``). A tokenizer property: a
copy of the model whose tokenizer normalizes NFC (as Qwen's does) against the original,
on a decomposed accent: ``normalization``, failing unless allowed, and said either way.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.backends import Backend, Generation, GenerationParams, PromptInput
from pytest_infercheck.backends.http import HttpError
from pytest_infercheck.checks.framework.items import RecordedItem, summarize_items
from pytest_infercheck.checks.framework.target import TargetContext
from pytest_infercheck.checks.tokenization import (
    TOKENIZATION,
    SideCounts,
    TokenizationIncomplete,
    TokenizationPrompt,
    TokenSideRecord,
)
from pytest_infercheck.config import BackendSpec
from pytest_infercheck.records import load_record, plain_data
from pytest_infercheck.report.results import load_results
from pytest_infercheck.specs import KindThresholds
from pytest_infercheck.verdict.conduct import Abilities
from tests.htmldom import parse
from tests.plugin.helpers import junit_properties
from tests.plugin.test_html_report import report_parts
from tests.resummarize import aggregates, assert_same_aggregate, resummarized

CONFTEST = "from tests.plugin.test_tokenization import pytest_infercheck_wrap_backend  # noqa\n"
FAULTS = ("template", "changed", "empty")


class TokenFault(Backend):
    """``inner`` whose :meth:`render` is faulty (``fault``: ``template`` appends a space to
    the rendered text and its token; ``changed`` adds 1 to the middle id; ``empty`` gives
    no ids); the tokenizer methods are the inner engine's."""

    def __init__(self, inner: Backend, fault: str, name: str) -> None:
        super().__init__(name)
        self.inner, self.fault, self.kind = inner, fault, inner.kind

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        if self.fault == "refused":
            body = '{"error": {"message": "tokenizer crashed"}}'
            raise HttpError(f"backend {self.name!r}: POST /tokenize -> HTTP 500", 500, body)
        rendered = await self.inner.render(user_text, system, thinking)
        text, ids = rendered.text, list(rendered.token_ids or ())
        if self.fault == "template":
            text, ids = text + " ", ids + list(await self.inner.tokenize(" ") or [])
        elif self.fault == "changed":
            ids[len(ids) // 2] += 1
        else:
            ids = []
        return PromptInput(text, tuple(ids), rendered.templated, None, system, thinking)

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        raise AssertionError("the tokenization check generates nothing")

    async def tokenize(self, text: str) -> list[int] | None:
        return await self.inner.tokenize(text)

    async def token_pieces(self, ids: Any) -> list[str] | None:
        return await self.inner.token_pieces(ids)

    async def special_tokens(self, ids: Any) -> set[int] | None:
        return await self.inner.special_tokens(ids)


def pytest_infercheck_wrap_backend(
    backend: Backend, name: str, spec: BackendSpec
) -> Backend | None:
    """Wrap backends named ``tok-<fault>``."""
    fault = name.removeprefix("tok-")
    return TokenFault(backend, fault, name) if fault in (*FAULTS, "refused") else None


SUITE = [("p01", "12+34="), ("p02", "<b>7</b>+8=")]


def write(pytester: pytest.Pytester, models: str, backends: str, checks: str) -> None:
    pytester.makeconftest(CONFTEST)
    lines = [json.dumps({"id": i, "prompt": p, "max_tokens": 2}) for i, p in SUITE]
    pytester.makefile(".jsonl", prompts="\n".join(lines))
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n{models}backends:\n{backends}suites: [prompts.jsonl]\n"
        f"checks:\n{checks}",
    )


def results(pytester: pytest.Pytester) -> dict[str, dict[str, Any]]:
    doc = json.loads((pytester.path / "r.json").read_text())
    return {item["name"]: item for item in doc["items"]}


def test_faithful_passes_and_each_fault_fails_naming_position_and_cause(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    sides = ["local2", "nobos", *(f"tok-{f}" for f in FAULTS)]
    backends = "  local: {kind: mlx-lm}\n  local2: {kind: mlx-lm}\n"
    backends += "  nobos: {kind: mlx-lm, add_bos: false}\n"
    backends += "".join(f"  tok-{f}: {{kind: mlx-lm}}\n" for f in FAULTS)
    targets = ", ".join(f"adder@{s}" for s in ["local", *sides])
    write(
        pytester,
        f"  adder: {{path: '{tiny_models['bf16']}'}}\n",
        backends,
        f"  - tokenization: {{targets: [{targets}]}}\n",
    )
    run = pytester.runpytest(
        "-q", "-p", "no:cacheprovider", "--infercheck-results=r.json", "--junitxml=j.xml",
        "--html=r.html", "--self-contained-html",
    )  # fmt: skip
    # 2 prompts x 5 other targets: local2 passes, the 4 faults fail; the aggregate fails.
    assert run.parseoutcomes() == {"passed": 2, "failed": 8 + 1}, run.stdout.str()
    items = results(pytester)
    assert items["p01[local2]"]["data"]["status"] == "identical"
    # "12+34=" is 6 byte tokens after the BOS (id 1): 7 ids.
    assert items["p01[local2]"]["data"]["reference"]["ids"] == [1, 52, 53, 46, 54, 55, 64]
    expected = {
        # (cause, first differing token position)
        "nobos": ("bos", 0),
        "tok-template": ("template", 7),  # the appended space after the 7 ids
        "tok-changed": ("ids", 3),  # 7 // 2
        "tok-empty": ("empty", 0),
    }
    for side, (cause, position) in expected.items():
        data = items[f"p01[{side}]"]["data"]
        assert (data["status"], data["cause"], data["first_difference"]) == (
            "differs",
            cause,
            position,
        ), side
    nobos = items["p01[nobos]"]
    assert nobos["violations"] == [
        "adder@nobos vs adder@local: BOS / leading special tokens differ: adder@local starts "
        "with 1 special token (1 '<s>'), adder@nobos with no special token (the rest "
        "identical); ids differ from position 0: adder@local id 1 '<s>', adder@nobos id 52 '1'"
    ]
    template = items["p01[tok-template]"]["data"]
    assert template["text_difference"] == len("<s>12+34=")
    assert template["explanation"].startswith(
        "the two engines render the template differently (rendered texts differ from character "
        "9): adder@local '<s>12+34=' vs adder@tok-template '<s>12+34= '"
    )
    changed = items["p01[tok-changed]"]["violations"][0]
    assert changed.endswith("ids differ from position 3: adder@local id 46 '+', "
                            "adder@tok-changed id 47 ','")  # fmt: skip
    assert items["p01[tok-changed]"]["data"]["window"][0] == {
        "position": 3,
        "reference_id": 46,
        "reference_piece": "+",
        "other_id": 47,
        "other_piece": ",",
    }
    aggregate = items["aggregate"]["data"]
    assert (aggregate["items"], aggregate["identical"], aggregate["differing"]) == (10, 2, 8)
    assert aggregate["by_cause"] == {"bos": 2, "empty": 2, "ids": 2, "template": 2}
    assert aggregate["sides"]["nobos"] == {
        "items": 2,
        "identical": 0,
        "count_only": 0,
        "differing": 2,
        "errors": 0,
    }
    assert "8 of 10 items failed" in items["aggregate"]["violations"][0]
    props = junit_properties(pytester.path / "j.xml")
    assert props["p02[tok-changed]"]["infercheck_cause"] == "ids"
    summary = run.stdout.str().split("infercheck summary", 1)[1]
    assert "2/10" in summary and "bos 2, empty 2, ids 2, template 2" in summary
    # The aggregate is TOKENIZATION.summarize of the items' records, in any order (a merge
    # of shards sees them by node id): verdict, violations and every count.
    doc = load_results(pytester.path / "r.json")
    ((nodeid, live),) = aggregates(doc).items()
    for reverse in (False, True):
        assert_same_aggregate(resummarized(doc, nodeid, reverse=reverse), live)

    # The HTML view escapes every token text and the rendered text (p02 spells <b>).
    _, tests = report_parts(pytester.path / "r.html")
    (item,) = tests["infercheck.yaml::tokenization(adder)::prompts::p02[tok-empty]"]
    html = "".join(e["content"] for e in item["extras"])
    assert "<b>" not in html and "&lt;b&gt;7&lt;/b&gt;" in html
    cells = [c.text() for c in parse(html).all("td")]
    assert cells[-40:-35] == ["0", "1", "<s>", "-", "None"]  # position 0 of the window
    assert "&lt;s&gt;" in html and "<s>" not in html


def test_a_failed_request_fails_the_item_with_the_servers_words(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    backends = "  local: {kind: mlx-lm}\n  tok-refused: {kind: mlx-lm}\n"
    write(
        pytester,
        f"  adder: {{path: '{tiny_models['bf16']}'}}\n",
        backends,
        "  - tokenization: {targets: [adder@local, adder@tok-refused]}\n",
    )
    run = pytester.runpytest("-q", "-p", "no:cacheprovider", "--infercheck-results=r.json")
    assert run.parseoutcomes() == {"failed": 2 + 1}, run.stdout.str()
    items = results(pytester)
    for prompt_id, _ in SUITE:
        item = items[f"{prompt_id}[tok-refused]"]
        said = (
            f"adder@tok-refused: rendering prompt {prompt_id} failed: HTTP 500: tokenizer crashed"
        )
        assert item["violations"] == [said] and item["role"] == "incomplete"
        assert item["data"] == {
            "prompt_id": prompt_id,
            "reference": "adder@local",
            "other": "adder@tok-refused",
            "failures": [said],
        }
    aggregate = items["aggregate"]["data"]
    assert (aggregate["items"], aggregate["incomplete"], aggregate["identical"]) == (2, 2, 0)
    assert items["aggregate"]["violations"][0].startswith("2 of 2 items failed: p01[tok-refused]")


def nfc_copy(source: Path, dest: Path) -> Path:
    """A copy of the model folder ``source`` whose tokenizer normalizes NFC (as Qwen's)."""
    shutil.copytree(source, dest)
    path = dest / "tokenizer.json"
    tokenizer = json.loads(path.read_text())
    tokenizer["normalizer"] = {"type": "NFC"}
    path.write_text(json.dumps(tokenizer))
    return dest


@pytest.mark.parametrize("allow", [False, True])
def test_nfc_normalization_is_named_and_fails_unless_allowed(
    pytester: pytest.Pytester, tiny_models: dict[str, Path], allow: bool
) -> None:
    nfc = nfc_copy(tiny_models["bf16"], pytester.path / "adder-nfc")
    models = f"  plain: {{path: '{tiny_models['bf16']}'}}\n  nfc: {{path: '{nfc}'}}\n"
    options = ", allow: [normalization]" if allow else ""
    write(
        pytester,
        models,
        "  local: {kind: mlx-lm}\n",
        f"  - tokenization: {{targets: [plain, nfc]{options}}}\n",
    )
    pytester.makefile(".jsonl", prompts=json.dumps({"id": "e1", "prompt": "cafe\u0301"}))
    run = pytester.runpytest("-q", "-p", "no:cacheprovider", "--infercheck-results=r.json")
    data = results(pytester)["e1[nfc]"]["data"]
    assert (data["cause"], data["first_difference"], data["allowed"]) == (
        "normalization",
        4,  # <s> c a f, then e (and the accent's 2 bytes) against é's 2 bytes
        allow,
    )
    assert "nfc@local normalizes it to NFC, plain@local does not" in data["explanation"]
    if allow:
        assert run.parseoutcomes() == {"passed": 2}, run.stdout.str()
        assert results(pytester)["aggregate"]["data"]["allowed"] == 1
    else:
        assert run.parseoutcomes() == {"failed": 2}, run.stdout.str()


def test_targets_and_allow_are_validated(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    models = f"  adder: {{path: '{tiny_models['bf16']}'}}\n"
    write(pytester, models, "  local: {kind: mlx-lm}\n", "  - tokenization: {targets: [adder]}\n")
    run = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider")
    assert (
        "infercheck.yaml:7: checks[0].tokenization.targets: needs at least 2 entries"
        in run.stdout.str()
    )
    write(
        pytester,
        models,
        "  local: {kind: mlx-lm}\n",
        "  - tokenization: {targets: [adder, adder], allow: [bos]}\n",
    )
    run = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider")
    assert "checks[0].tokenization.allow" in run.stdout.str()


# -- the sources of ids of an OpenAI-compatible server (a scripted server: a vLLM-style
# /tokenize answer, and a 404 no real server here gives for it) -------------------------------


@pytest.mark.asyncio
async def test_a_servers_tokenize_endpoint_is_probed_once_and_recorded() -> None:
    from pytest_infercheck.backends.http import HttpError, HttpSettings
    from pytest_infercheck.backends.openai_compat import OpenAICompatBackend
    from tests.http.fake_server import Reply, Script, fake_server

    prompt = PromptInput("12+34=", None, templated=True)
    answer = {"count": 3, "tokens": [1, 52, 53], "max_model_len": 64}
    ids = Script([Reply(200, answer), Reply(200, answer)])
    with fake_server(ids) as url:
        server = OpenAICompatBackend("v", HttpSettings(base_url=url, retries=0), model="m")
        probed = await server.probe_tokenize()
        assert probed.offers("tokenize-endpoint") and not probed.lacking
        assert await server.prompt_ids(prompt) == [1, 52, 53]
        await server.aclose()
    assert server.observed["tokenize"] is True
    assert ids.requests[1]["path"] == "/tokenize"
    assert ids.requests[1]["json"]["messages"] == [{"role": "user", "content": "12+34="}]
    assert ids.requests[1]["json"]["add_generation_prompt"] is True

    # no /tokenize: lacking (the server answered other probes), its ids never asked again
    missing = Script([Reply(404, {"detail": "Not Found"})])
    with fake_server(missing) as url:
        server = OpenAICompatBackend("v", HttpSettings(base_url=url, retries=0), model="m")
        probed = await server.probe_tokenize(answered=True)
        assert probed.lacking == {
            "tokenize-endpoint": 'POST /tokenize: HTTP 404: {"detail": "Not Found"}'
        }
        assert await server.prompt_ids(prompt) is None  # not asked
        await server.aclose()
    assert server.observed["tokenize"] is False and len(missing.requests) == 1

    # a server that answered no probe is not read as lacking /tokenize (nothing probed)
    refused = Script([Reply(404, {"detail": "Not Found"})])
    with fake_server(refused) as url:
        server = OpenAICompatBackend("v", HttpSettings(base_url=url, retries=0), model="m")
        assert await server.probe_tokenize(answered=False) == Abilities()
        await server.aclose()
    assert "tokenize" not in server.observed

    # offered at the probe, then refused: the failure is raised (it used to become None, a
    # count-only comparison that passed on equal counts)
    broken = Script([Reply(200, answer), Reply(404, {"detail": "Not Found"})])
    with fake_server(broken) as url:
        server = OpenAICompatBackend("v", HttpSettings(base_url=url, retries=0), model="m")
        assert (await server.probe_tokenize()).offers("tokenize-endpoint")
        with pytest.raises(HttpError, match="HTTP 404"):
            await server.prompt_ids(prompt)
        await server.aclose()


@pytest.mark.asyncio
async def test_the_prompt_token_count_is_the_usage_of_a_one_token_request() -> None:
    from pytest_infercheck.backends.http import HttpSettings
    from pytest_infercheck.backends.openai_compat import OpenAICompatBackend
    from tests.http.fake_server import Reply, Script, fake_server

    answer = {
        "choices": [{"message": {"content": "4"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 1},
    }
    script = Script([Reply(200, answer), Reply(200, {**answer, "usage": {}})])
    with fake_server(script) as url:
        server = OpenAICompatBackend("v", HttpSettings(base_url=url, retries=0), model="m")
        prompt = PromptInput("12+34=", None, templated=True)
        assert await server.prompt_token_count(prompt) == 7
        assert await server.prompt_token_count(prompt) is None  # no usage: no count
        await server.aclose()
    body = script.requests[0]["json"]
    assert script.requests[0]["path"] == "/v1/chat/completions"
    assert body["max_tokens"] == 1 and "logprobs" not in body


# -- the aggregate: a summary of the items' records ------------------------------------------


def token_record(prompt_id: str, other: str, status: str, **verdict: Any) -> TokenizationPrompt:
    """A record of ``prompt_id`` against ``adder@<other>``: ``status`` with ``verdict``'s
    cause, allowed and explanation."""
    ids = [1, 52, 53]
    return TokenizationPrompt(
        prompt_id=prompt_id,
        reference=TokenSideRecord("adder@local", "render", "<s>12", ids, 3),
        other=TokenSideRecord(f"adder@{other}", "render", "<s>12", ids, 3),
        status=status,
        cause=verdict.get("cause"),
        allowed=verdict.get("allowed", False),
        first_difference=verdict.get("first_difference"),
        text_difference=None,
        explanation=verdict.get("explanation", "identical ids"),
    )


def recorded(
    name: str, record: TokenizationPrompt, violations: tuple[str, ...] | list[str] = ()
) -> RecordedItem:
    """An item as the aggregate reads it: its record through plain data and back, and its
    violations."""
    back = load_record(TokenizationPrompt, plain_data(record))
    return RecordedItem("prompt", name, back, violations=tuple(violations))


def test_the_aggregate_counts_the_items_and_fails_for_their_violations() -> None:
    differs = {"cause": "ids", "first_difference": 2, "explanation": "ids differ from 2"}
    nfc = {"cause": "normalization", "allowed": True, "first_difference": 1}
    failed = "adder@llama vs adder@local: ids differ from 2"
    items = [
        recorded("p02[llama]", token_record("p02", "llama", "differs", **differs), [failed]),
        recorded("p01[llama]", token_record("p01", "llama", "identical")),
        recorded("p01[nfc]", token_record("p01", "nfc", "differs", **nfc)),
        RecordedItem("prompt", "p02[nfc]", None, "HTTP 500 from /tokenize"),
    ]
    context = TargetContext("adder@local", {"adder@local": {"kind": "mlx-lm"}})
    summary = summarize_items(TOKENIZATION, items, KindThresholds(), context)
    assert summary.violations == [
        "1 of 4 items errored: p02[nfc] (HTTP 500 from /tokenize)",
        f"1 of 4 items failed: p02[llama] ({failed})",
    ]
    record = summary.record
    assert (record.items, record.identical, record.differing, record.allowed) == (4, 1, 2, 1)
    assert record.by_cause == {"ids": 1, "normalization": 1}
    assert record.errors == {"p02[nfc]": "HTTP 500 from /tokenize"} and record.n_errors == 1
    assert record.failed == ["p02[llama]", "p02[nfc]"]
    assert list(record.sides) == ["llama", "nfc"]
    assert record.sides["nfc"] == SideCounts(
        items=2, identical=0, count_only=0, differing=1, errors=1
    )
    assert summarize_items(TOKENIZATION, items[::-1], KindThresholds(), context) == summary
    # a subset: only its items are counted
    part = summarize_items(TOKENIZATION, items[1:3], KindThresholds(), context)
    assert part.violations == [] and part.record.items == 2
    # an item whose request failed compared nothing: counted apart, and failing
    incomplete = TokenizationIncomplete("p03", "adder@local", "adder@llama", ["HTTP 500"])
    back = load_record(TokenizationIncomplete, plain_data(incomplete))
    with_failed = [*items, RecordedItem("incomplete", "p03[llama]", back, violations=("x",))]
    counted = summarize_items(TOKENIZATION, with_failed, KindThresholds(), context).record
    assert counted.incomplete == 1 and counted.sides["llama"].incomplete == 1
    assert counted.failed == ["p02[llama]", "p02[nfc]", "p03[llama]"]
