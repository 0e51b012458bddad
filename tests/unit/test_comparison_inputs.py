"""Which prompt the test side receives (shared ids when the vocabularies agree on them) and
the divergence origin on the comparison record, through compare_prompt on fake backends."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_infercheck.backends import PromptInput
from pytest_infercheck.checks.comparison.verdicts import describe
from tests.unit.comparison_fakes import PROMPT_IDS, FakeBackend, compare, generation

NFC_IDS = (1, 2, 3, 4)
"""What the test side's own tokenizer makes of the rendered text (one token more)."""


class OtherTokenizer(FakeBackend):
    """A backend with another vocabulary fingerprint whose own tokenizer gives
    :data:`NFC_IDS`; its detokenization of any ids is ``decoded`` (the baseline's is
    ``"abc"``)."""

    def __init__(self, name: str, text: str, ids: list[int], decoded: str) -> None:
        super().__init__(name, generation(text, ids))
        self.decoded = decoded
        self.received: list[PromptInput] = []

    def tokenizer_fingerprint(self) -> str | None:
        return "other"

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        return PromptInput(user_text, NFC_IDS, templated=False, tokenizer_fingerprint="other")

    async def accepts_token_ids(self, prompt: PromptInput) -> bool:
        return False

    async def tokenize(self, text: str) -> list[int]:
        return list(NFC_IDS)

    async def detokenize(self, ids: Sequence[int]) -> str:
        return self.decoded

    async def generate(self, prompt, params):  # type: ignore[no-untyped-def]
        self.received.append(prompt)
        return self.generation


class Baseline(FakeBackend):
    async def detokenize(self, ids: Sequence[int]) -> str:
        return "abc"


def test_vocabularies_agreeing_on_the_ids_share_them_and_say_why() -> None:
    base = Baseline("base", generation("46", [0, 1, 3]))
    test = OtherTokenizer("test", "46", [0, 1, 3], decoded="abc")
    result = compare(base, test)
    assert test.received[0].token_ids == PROMPT_IDS  # generated from the baseline's ids
    inputs = result.prompt_inputs
    assert inputs is not None and inputs.sharing == "shared ids"
    assert inputs.base_ids == inputs.test_ids == list(PROMPT_IDS)
    assert "the vocabularies agree on these ids" in inputs.reason
    # own tokenization [1, 2, 3, 4] vs the ids [1, 2, 3]: differs at 3 (prefix)
    assert "differs at position 3 (4 vs 3 tokens" in inputs.reason
    assert result.divergence_origin is None


def test_vocabularies_disagreeing_render_apart_and_name_the_prompt_ids() -> None:
    base = Baseline("base", generation("46", [0, 1, 3]))
    test = OtherTokenizer("test", "47", [0, 2, 3], decoded="abd")
    result = compare(base, test)
    assert test.received[0].token_ids == NFC_IDS
    inputs = result.prompt_inputs
    assert inputs is not None and inputs.sharing == "own render"
    assert inputs.test_ids == list(NFC_IDS)
    # same rendered text, ids [1, 2, 3] vs [1, 2, 3, 4]: the test has [4] added at the end
    assert result.divergence_origin == "special-tokens"
    assert "added at the end" in result.origin_detail
    assert (
        "divergence starts at: special-tokens - special tokens differ: test has the ids of "
        "baseline with [4] added at the end; ids differ from position 3" in describe(result)
    )
    assert "prompt: own render (its tokenizer gives other ids" in describe(result)


def test_same_tokenizer_diverging_tokens_and_detokenization() -> None:
    base = FakeBackend("base", generation("46", [0, 1, 3]))
    tokens = compare(base, FakeBackend("test", generation("47", [0, 2, 3])))
    assert tokens.divergence_origin == "generated-tokens"
    assert tokens.origin_detail.startswith("generated tokens differ from step 1")
    assert tokens.prompt_inputs is not None
    assert tokens.prompt_inputs.reason == "the same tokenizer (equal vocabulary fingerprints)"
    detok = compare(base, FakeBackend("test", generation(" 46", [0, 1, 3])))
    assert detok.divergence_origin == "detokenization"
    assert "the generated token ids agree; texts differ from character 0" in detok.origin_detail


class OwnRender(FakeBackend):
    """A backend with its own vocabulary that renders ``rendered`` to ``ids``, names ``<s>``
    (1) as its special token and tokenizes any text to ``tokenized``."""

    def __init__(
        self, name: str, out: str, rendered: str, ids: tuple[int, ...], tokenized: list[int]
    ) -> None:
        super().__init__(name, generation(out, [7, 2]))
        self.rendered, self.ids, self.tokenized = rendered, ids, tokenized

    def tokenizer_fingerprint(self) -> str | None:
        return self.name

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        return PromptInput(self.rendered, self.ids, templated=True, tokenizer_fingerprint=self.name)

    async def accepts_token_ids(self, prompt: PromptInput) -> bool:
        return False

    async def detokenize(self, ids: Sequence[int]) -> str:
        return self.name  # the two vocabularies disagree: each side renders its own prompt

    async def tokenize(self, text: str) -> list[int]:
        return list(self.tokenized)

    async def special_tokens(self, ids: Sequence[int]) -> set[int]:
        return {i for i in ids if i == 1}

    async def token_pieces(self, ids: Sequence[int]) -> list[str]:
        return [{1: "<s>", 5: "a", 6: "b"}.get(i, "?") for i in ids]


def test_origin_asks_each_engine_for_its_special_tokens() -> None:
    # The baseline's text spells its BOS, the test's does not and its ids hold two: without
    # the engines naming <s> special, "<s>ab" vs "ab" would be a template difference.
    base = OwnRender("base", "x", "<s>ab", (1, 5, 6), [5, 6])
    result = compare(base, OwnRender("test", "y", "ab", (1, 1, 5, 6), [5, 6]))
    assert result.prompt_inputs is not None and result.prompt_inputs.sharing == "own render"
    assert result.divergence_origin == "special-tokens", result.origin_detail
    assert result.origin_detail.startswith(
        "BOS / leading special tokens differ: baseline starts with 1 special token (1 '<s>'), "
        "test with 2 special tokens (1 '<s>', 1 '<s>') (the rest identical)"
    )


def test_origin_probes_texts_equal_only_after_nfc() -> None:
    # "cafe" + U+0301 on the test side; its tokenizer gives the baseline's ids [9, 233] for
    # the NFC text "café": the baseline normalizes, the test does not
    base = OwnRender("base", "x", "caf\u00e9", (9, 233), [9, 233])
    result = compare(base, OwnRender("test", "y", "cafe\u0301", (9, 104, 769), [9, 233]))
    assert result.divergence_origin == "prompt-ids", result.origin_detail
    assert result.origin_detail.startswith(
        "Unicode normalization (a tokenizer property): the text is not NFC; baseline "
        "normalizes it to NFC, test does not"
    )


# -- sides without a tokenizer fingerprint -----------------------------------------------------
# A golden recorded with "tokenizer": null renders the recorded prompt ids without a
# fingerprint; Ollama, and any engine that exposes no tokenizer, has none either. None is
# "unknown", never a vocabulary: two sides without one share nothing by their fingerprints.


class NoFingerprint(FakeBackend):
    """A backend that takes and returns token ids but has no tokenizer fingerprint and
    exposes no tokenizer (``tokenize``/``detokenize`` answer None, the default); it renders
    any prompt to ``ids`` and records the prompts it generates from."""

    def __init__(self, name: str, text: str, out: list[int], ids: tuple[int, ...]) -> None:
        super().__init__(name, generation(text, out))
        self.ids = ids
        self.received: list[PromptInput] = []

    def tokenizer_fingerprint(self) -> str | None:
        return None

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        return PromptInput(user_text, self.ids, templated=False, tokenizer_fingerprint=None)

    async def generate(self, prompt, params):  # type: ignore[no-untyped-def]
        self.received.append(prompt)
        return self.generation


def test_ids_without_a_fingerprint_are_not_shared_with_a_side_without_one() -> None:
    base = NoFingerprint("base", "46", [0, 1, 3], PROMPT_IDS)
    test = NoFingerprint("test", "46", [0, 1, 3], (7, 8))
    result = compare(base, test)
    assert test.received[0].token_ids == (7, 8)  # its own render, not the baseline's ids
    inputs = result.prompt_inputs
    assert inputs is not None and inputs.sharing == "own render"
    assert inputs.reason == (
        "its tokenizer gives other ids and the vocabularies disagree on the baseline's"
    )
    assert (inputs.base_ids, inputs.test_ids) == (list(PROMPT_IDS), [7, 8])


def test_ollama_is_not_sent_the_rendered_text_of_ids_without_a_fingerprint() -> None:
    """Ollama (raw mode) has no fingerprint: the base :meth:`Backend.accepts_token_ids` must
    not take a prompt without one as the rendered string of its ids."""
    from pytest_infercheck.backends.http import HttpSettings
    from pytest_infercheck.backends.ollama import OllamaBackend
    from pytest_infercheck.checks.comparison.inputs import decide_inputs
    from pytest_infercheck.generation_cache import GenerationCache, ResolvedTarget
    from pytest_infercheck.suites import Prompt

    ollama = OllamaBackend("ol", HttpSettings(base_url="http://127.0.0.1:9"), model="m", chat=False)
    cache = GenerationCache()
    try:
        prompt = Prompt("p1", "12+34=", None, 8, None, None, None, "<test>")
        inputs = decide_inputs(
            cache,
            ResolvedTarget("golden:g", ("g",), NoFingerprint("base", "46", [0], PROMPT_IDS)),
            ResolvedTarget("m@ol", ("m",), ollama),
            prompt,
            thinking=False,
        )
    finally:
        cache.close()
    assert inputs.record.sharing == "own render"
    assert inputs.test.token_ids is None and inputs.test.text == "12+34="


class AcceptsByItsOwnTokenizer(NoFingerprint):
    """Without a fingerprint, but its own tokenization of the rendered text gives the
    baseline's ids (what llama-server checks)."""

    async def accepts_token_ids(self, prompt: PromptInput) -> bool:
        return True


def test_ids_accepted_without_fingerprints_are_not_said_to_share_a_tokenizer() -> None:
    base = NoFingerprint("base", "46", [0, 1, 3], PROMPT_IDS)
    test = AcceptsByItsOwnTokenizer("test", "46", [0, 1, 3], (7, 8))
    inputs = compare(base, test).prompt_inputs
    assert inputs is not None and inputs.sharing == "shared ids"
    assert inputs.reason == "its own tokenizer gives the same ids for the rendered text"


def test_generated_ids_of_two_sides_without_fingerprints_are_not_compared() -> None:
    """Each side rendered its own prompt and neither has a fingerprint: their generated ids
    may be of two vocabularies, so the origin never says the generated tokens differ."""
    base = NoFingerprint("base", "46", [0, 1, 3], PROMPT_IDS)
    result = compare(base, NoFingerprint("test", "47", [0, 2, 3], PROMPT_IDS))
    assert result.prompt_inputs is not None and result.prompt_inputs.sharing == "own render"
    assert result.divergence_origin == "undetermined", result.origin_detail
    assert "generated tokens differ" not in result.origin_detail
    assert result.first_divergence is None  # by text: no token divergence to name
