"""The golden file: its format, writing it (deterministic, atomic) and loading it for replay.

The file is plain JSON, deterministic (same outputs -> same bytes) and diff-friendly: one
line per header field, one line per prompt::

    {
     "engine": {...},            # the recording backend's identity(): kind, versions, build
     "format": "pytest-infercheck-golden",
     "model": {"name": "adder", "path": "models/tiny-bf16"},   # the YAML's model entry
     "name": "adder-v1",
     "plugin_version": "0.1.0",
     "target": "adder@local",
     "tokenizer": "3f2a...",     # the recording backend's tokenizer fingerprint (or null)
     "top_k": 20,
     "version": 1,
     "prompts": [
      {"input": {...}, "output": {...}, "params": {...}, "prompt": {...}, "prompt_id": "s01",
       "suite": "addition"},
      ...
     ]}

Per prompt: ``prompt`` (user text, system, thinking: how the suite asked), ``input`` (the
rendered prompt as sent: text, token ids, templated, system, thinking), ``params``
(max_tokens, temperature, seed) and ``output``: token ids (the EOS included when the
generation stopped on it), text, finish_reason, the chosen tokens' logprobs and per position
the top-k logprobs as ``[token, logprob]`` pairs, most likely first (at most ``top_k``; keyed
by token id, or by token text when ``top_keys`` is ``"text"``). Logprobs are rounded to
:data:`DECIMALS` decimals, so a lower-bound KL read from the file is exact to about 1e-6.
``output.tool_calls`` (``[{"name", "arguments"}]``) only when a chat server returned calls
apart from the text (:attr:`~..backends.base.Generation.tool_calls`).

A conversation (a suite line with ``messages``, see :mod:`..conversation`) adds, and only it,
so single-turn entries are as they always were:

- ``prompt.messages``: the suite's turns as ``[role, content]`` pairs, ``content`` null for
  a ``generate`` turn (a turn with tool calls or a tool turn: ``[role, content, {"tool_calls":
  [{"name", "arguments"}, ...], "name": ...}]``);
- ``input.messages``: the concrete turns of the rendered input, where the backend's
  rendering carries them (:attr:`~..backends.base.PromptInput.messages`), written alike;
- ``turns``: each ``generate`` turn as the recording target filled it in, in order:
  ``{"index", "input", "output"}`` (the turn's index in ``messages``, the rendered turns
  before it, its generation, whose text was fed back), ``output`` as above with the
  generation's own top-k logprobs, if any.

A prompt with tools (``tools`` in the suite) adds ``prompt.tools`` (and ``prompt.tool_choice``
when set) as the OpenAI entries, and ``input.tools`` / ``input.tool_choice`` where the rendered
input carries them; a prompt without tools is written as it always was.

Replay looks prompts up by what was asked (of a conversation: every turn; the tools offered),
outputs by the rendered input + params, and the rendered input of a list of concrete turns by
that list and the tools (a conversation's every turn, each ``generate`` turn's history,
rebuilt from the turns and the recorded outputs; a single-turn prompt with tools as its
turns): a baseline filled in from the golden gets the recorded turns back. A golden is
refused, with its file and the difference named, when the test side's
model has another name in the YAML, its tokenizer has another fingerprint, or a prompt (or
a conversation's turns, or its generation parameters) is not in the file.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..backends.base import BackendError, Generation, GenerationParams, PromptInput
from ..conversation import Message, Turn, concrete, history
from ..tools import Tool, ToolCall, canonical_json

if TYPE_CHECKING:
    import numpy as np

    from ..conversation import Conversation

AskedKey = tuple[str, str | None, bool, tuple[tuple[Any, ...], ...] | None, str | None]
"""How a replay finds a prompt: (user text, system, thinking, the conversation's turns as
``(role, content)`` with None for a ``generate`` turn, and their calls and function name when
they have them; None for a single-turn prompt; the tools offered and tool choice as canonical
JSON, None without tools)."""
RenderedKey = tuple[tuple[tuple[Any, ...], ...], bool, str | None]
"""How a replay finds the rendering of concrete turns: (each turn's
:meth:`~..backends.base.Message.key`, thinking, the tools offered as :func:`offer_key`)."""

FORMAT = "pytest-infercheck-golden"
VERSION = 1
DECIMALS = 6
VERSION_KEYS = ("build_info", "mlx", "mlx-lm", "quantization", "version")
"""Identity keys shown when a report names an engine in one line."""


class GoldenError(BackendError):
    """A golden file that cannot be read or used for this comparison; the message names the
    file and what differs."""


def shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it, else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# -- recording -------------------------------------------------------------------------------
def rounded(value: float) -> float | None:
    """A logprob as stored: rounded to :data:`DECIMALS`; None for a non-finite value."""
    return round(float(value), DECIMALS) if math.isfinite(value) else None


def top_k_rows(logprobs: np.ndarray, k: int) -> list[list[list[Any]]]:
    """The ``k`` most likely tokens of each row of a ``(T, V)`` logprob array as
    ``[[id, logprob], ...]``, most likely first, ties by lower id; -inf entries dropped."""
    import numpy as np  # heavy: kept out of the plugin's start-up; only recording needs it

    rows: list[list[list[Any]]] = []
    for row in np.asarray(logprobs, dtype=np.float32):
        order = np.argsort(-row, kind="stable")[:k]
        rows.append([[int(i), rounded(row[i])] for i in order if math.isfinite(row[i])])
    return rows


def top_k_maps(top: Sequence[Mapping[Any, float]], k: int) -> list[list[list[Any]]]:
    """A generation's per-step top logprobs (token -> logprob) as stored: ``k`` at most."""
    rows: list[list[list[Any]]] = []
    for step in top:
        pairs = sorted(step.items(), key=lambda kv: (-kv[1], str(kv[0])))[:k]
        rows.append([[key, rounded(lp)] for key, lp in pairs if math.isfinite(lp)])
    return rows


def make_entry(
    *,
    suite: str,
    prompt_id: str,
    asked: tuple[str, str | None, bool],
    rendered: PromptInput,
    params: GenerationParams,
    generation: Generation,
    top: list[list[list[Any]]] | None,
    top_keys: str,
    conversation: Conversation | None = None,
    turn_top_k: int = 0,
) -> dict[str, Any]:
    """One prompt's record (plain types; see the module docstring). ``asked`` is the suite's
    (user text, system, thinking), by which a replay finds the prompt again; a conversation
    (``conversation.turns`` not empty) also records its turns and each ``generate`` turn as
    filled in (its generation's own top-k logprobs, at most ``turn_top_k``)."""
    text, system, thinking = asked
    entry: dict[str, Any] = {
        "suite": suite,
        "prompt_id": prompt_id,
        "prompt": {"text": text, "system": system, "thinking": thinking},
        "input": _input_data(rendered),
        "params": _params_dict(params),
        "output": _output_data(generation, top, top_keys),
    }
    entry["prompt"].update(_offer_data(rendered.tools, rendered.tool_choice))
    if conversation is not None and conversation.turns:
        entry["prompt"]["messages"] = [_turn_data(t) for t in conversation.turns]
        if conversation.generated:
            entry["turns"] = [
                {
                    "index": turn.index,
                    "input": _input_data(turn.prompt),
                    "output": _output_data(
                        turn.generation,
                        top_k_maps(turn.generation.top_logprobs, turn_top_k)
                        if turn.generation.top_logprobs
                        else None,
                        turn.generation.top_keys,
                    ),
                }
                for turn in conversation.generated
            ]
    return entry


def _input_data(rendered: PromptInput) -> dict[str, Any]:
    """A rendered prompt as stored (``messages`` only where the rendering carries them)."""
    data: dict[str, Any] = {
        "text": rendered.text,
        "token_ids": None if rendered.token_ids is None else list(rendered.token_ids),
        "templated": rendered.templated,
        "system": rendered.system,
        "thinking": rendered.thinking,
    }
    if rendered.messages is not None:
        data["messages"] = [_turn_data(m) for m in rendered.messages]
    data.update(_offer_data(rendered.tools, rendered.tool_choice))
    return data


def _turn_data(turn: Turn | Message) -> list[Any]:
    """A turn as stored: ``[role, content]``, with ``{"tool_calls", "name"}`` third when it
    has calls or a function name."""
    if not turn.tool_calls and turn.name is None:
        return [turn.role, turn.content]
    calls = [{"name": c.name, "arguments": c.arguments} for c in turn.tool_calls]
    return [turn.role, turn.content, {"tool_calls": calls, "name": turn.name}]


def _turn_parts(data: Sequence[Any]) -> tuple[Any, Any, tuple[ToolCall, ...], str | None]:
    """A stored turn's (role, content, calls, function name)."""
    extra = data[2] if len(data) > 2 else {}
    calls = tuple(ToolCall(c["name"], c["arguments"]) for c in extra.get("tool_calls") or ())
    return data[0], data[1], calls, extra.get("name")


def _offer_data(tools: Sequence[Tool], tool_choice: Any) -> dict[str, Any]:
    """The tools offered as stored: ``tools`` (OpenAI entries) and ``tool_choice``, each
    only when set."""
    data: dict[str, Any] = {}
    if tools:
        data["tools"] = [tool.openai() for tool in tools]
    if tool_choice is not None:
        data["tool_choice"] = tool_choice
    return data


def _offer_parts(data: Mapping[str, Any]) -> tuple[tuple[Tool, ...], Any]:
    """The stored tools and tool choice of an entry's ``prompt`` or ``input``."""
    tools = tuple(
        Tool(
            t["function"]["name"],
            t["function"].get("parameters") or {},
            t["function"].get("description"),
        )
        for t in data.get("tools") or ()
    )
    return tools, data.get("tool_choice")


def offer_key(tools: Sequence[Tool], tool_choice: Any) -> str | None:
    """The tools offered and tool choice as one canonical text; None without either."""
    if not tools and tool_choice is None:
        return None
    return canonical_json({"tools": [t.openai() for t in tools], "choice": tool_choice})


def _output_data(
    generation: Generation, top: list[list[list[Any]]] | None, top_keys: str
) -> dict[str, Any]:
    """A generation as stored: logprobs rounded (:func:`rounded`), ``top`` as given."""
    chosen = generation.chosen_logprobs
    data: dict[str, Any] = {
        "text": generation.text,
        "token_ids": generation.token_ids,
        "finish_reason": generation.finish_reason,
        "chosen_logprobs": None if chosen is None else [rounded(x) for x in chosen],
        "top_logprobs": top,
        "top_keys": top_keys,
    }
    if generation.tool_calls:
        data["tool_calls"] = [
            {"name": c.name, "arguments": c.arguments}
            if c.arguments_valid
            else {"name": c.name, "arguments": c.arguments, "arguments_valid": False}
            for c in generation.tool_calls
        ]
    return data


def make_header(
    *,
    name: str,
    target: str,
    model: Mapping[str, Any],
    engine: Mapping[str, Any],
    tokenizer: str | None,
    top_k: int,
) -> dict[str, Any]:
    """The file's header: what was recorded, from which engine and tokenizer."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": name,
        "target": target,
        "model": dict(model),
        "engine": dict(engine),
        "tokenizer": tokenizer,
        "top_k": top_k,
        "plugin_version": __version__,
    }


def _entry_order(entry: Mapping[str, Any]) -> tuple[str, str, str]:
    return (entry["suite"], entry["prompt_id"], json.dumps(entry["params"], sort_keys=True))


def dumps(header: Mapping[str, Any], entries: Iterable[Mapping[str, Any]]) -> str:
    """The file's text: header fields one per line, then one line per prompt, sorted by
    suite, prompt id and params (duplicates dropped), so the same outputs give the same
    bytes whatever the order or the process that produced them."""
    unique = {json.dumps(e, sort_keys=True, separators=(",", ":")): e for e in entries}
    lines = sorted(unique.items(), key=lambda kv: _entry_order(kv[1]))
    head = [f" {json.dumps(k)}: {json.dumps(header[k], sort_keys=True)}," for k in sorted(header)]
    body = ",\n".join(f"  {text}" for text, _ in lines)
    return "{\n" + "\n".join(head) + '\n "prompts": [\n' + body + "\n ]}\n"


def write_golden(
    path: Path, header: Mapping[str, Any], entries: Iterable[Mapping[str, Any]]
) -> None:
    """Write atomically (a temporary file in the same folder, then renamed); gzip (with a
    fixed mtime, so deterministic too) when the name ends in ``.gz``."""
    data = dumps(header, entries).encode()
    if path.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- replay ----------------------------------------------------------------------------------
def _params_key(params: Mapping[str, Any]) -> tuple[Any, ...]:
    return GenerationParams(**params).key()


class GoldenFile:
    """A loaded golden: its header and prompts, indexed for replay."""

    def __init__(self, path: Path, header: dict[str, Any], entries: list[dict[str, Any]]) -> None:
        self.path = path
        self.header = header
        self.entries = entries
        self._asked: dict[AskedKey, dict[str, Any]] = {}
        self._outputs: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._inputs: list[tuple[PromptInput, dict[str, Any]]] = []
        """Every recorded (rendered input, params), for the error of a missing output."""
        self._rendered: dict[RenderedKey, PromptInput] = {}
        """The rendered input of each recorded list of concrete turns, with thinking and the
        tools offered (a single-turn prompt with tools is rendered as its turns too)."""
        for entry in entries:
            asked = entry["prompt"]
            turns = _turns(asked.get("messages"))
            offer = offer_key(*_offer_parts(asked))
            key = asked_key(asked["text"], asked["system"], asked["thinking"], turns, offer)
            self._asked[key] = entry
            recorded = [(entry["input"], entry["output"])]
            recorded += [(t["input"], t["output"]) for t in entry.get("turns", ())]
            for sent, output in recorded:
                rendered = self.prompt_input(sent)
                self._outputs[(rendered.key(), _params_key(entry["params"]))] = output
                self._inputs.append((rendered, entry["params"]))
            if turns is None and offer is not None:
                system = [Turn("system", asked["system"])] if asked["system"] is not None else []
                turns = (*system, Turn("user", asked["text"]))
            if turns is not None:
                self._index_conversation(entry, turns, bool(asked["thinking"]), offer)

    def _index_conversation(
        self, entry: Mapping[str, Any], turns: tuple[Turn, ...], thinking: bool, offer: str | None
    ) -> None:
        """Index a conversation's renderings by their concrete turns: each ``generate``
        turn's history (the recorded outputs fed back) and every turn (the entry's input)."""
        generated = {int(t["index"]): t for t in entry.get("turns", ())}
        filled = {i: str(t["output"]["text"]) for i, t in generated.items()}
        for index, turn in generated.items():
            before = history(turns, index, filled)
            self._rendered[_rendered_key(before, thinking, offer)] = self.prompt_input(
                turn["input"]
            )
        key = _rendered_key(concrete(turns, filled), thinking, offer)
        self._rendered[key] = self.prompt_input(entry["input"])

    @property
    def name(self) -> str:
        return str(self.header["name"])

    @property
    def tokenizer(self) -> str | None:
        value = self.header.get("tokenizer")
        return None if value is None else str(value)

    @property
    def top_k(self) -> int:
        return int(self.header.get("top_k") or 0)

    def where(self) -> str:
        return f"golden {shown(self.path)}"

    def prompt_input(self, sent: Mapping[str, Any]) -> PromptInput:
        """A rendered prompt as recorded (an entry's or a turn's ``input``), as the test side
        will be sent it."""
        ids = sent["token_ids"]
        messages = sent.get("messages")
        tools, tool_choice = _offer_parts(sent)
        return PromptInput(
            text=sent["text"],
            token_ids=None if ids is None else tuple(ids),
            templated=bool(sent["templated"]),
            tokenizer_fingerprint=self.tokenizer,
            system=sent["system"],
            thinking=bool(sent["thinking"]),
            messages=None
            if messages is None
            else tuple(Message(*_turn_parts(m)) for m in messages),
            tools=tools,
            tool_choice=tool_choice,
        )

    def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        entry = self._asked.get(asked_key(user_text, system, thinking))
        if entry is None:
            raise GoldenError(f"{self.where()}: {missing_prompt_text(user_text, system, thinking)}")
        return self.prompt_input(entry["input"])

    def render_messages(
        self,
        messages: Sequence[Message],
        thinking: bool,
        tools: Sequence[Tool] = (),
        tool_choice: Any = None,
    ) -> PromptInput:
        """The recorded rendering of the concrete turns ``messages`` with ``tools`` offered
        (a conversation's every turn, or a ``generate`` turn's history, or a single-turn
        prompt with tools); :class:`GoldenError` when none was recorded (a turn, the system
        prompt, a generated turn's output or the tools differ)."""
        offer = offer_key(tools, tool_choice)
        rendered = self._rendered.get(_rendered_key(messages, thinking, offer))
        if rendered is None:
            text = missing_conversation_text(messages, thinking)
            if offer is not None:
                text = text.replace(" (a turn,", f" with tools {_names(tools)} (a turn,", 1)
            raise GoldenError(f"{self.where()}: {text}")
        return rendered

    def generation(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        out = self._outputs.get((prompt.key(), params.key()))
        if out is None:
            recorded = sorted(
                {
                    json.dumps(p, sort_keys=True)
                    for rendered, p in self._inputs
                    if rendered.key() == prompt.key()
                }
            )
            raise GoldenError(
                f"{self.where()}: prompt {prompt.text[:60]!r} was recorded with params "
                f"{', '.join(recorded) or 'none'}, not {json.dumps(_params_dict(params))}: "
                "record it again with --infercheck-record"
            )
        top = out["top_logprobs"]
        keys = out.get("top_keys", "id")
        return Generation(
            text=out["text"],
            token_ids=out["token_ids"],
            finish_reason=out["finish_reason"],
            chosen_logprobs=out["chosen_logprobs"],
            top_logprobs=None if top is None else [{k: lp for k, lp in row} for row in top],
            top_keys=keys,
            tool_calls=tuple(
                ToolCall(c["name"], c["arguments"], bool(c.get("arguments_valid", True)))
                for c in out.get("tool_calls") or ()
            ),
        )

    def asked(
        self,
        user_text: str,
        system: str | None,
        thinking: bool,
        turns: Sequence[Turn] | None = None,
        offer: str | None = None,
    ) -> bool:
        """Whether the prompt (of a conversation: its ``turns``; with tools, the tools
        offered as :func:`offer_key`) was recorded."""
        return asked_key(user_text, system, thinking, turns, offer) in self._asked


def asked_key(
    user_text: str,
    system: str | None,
    thinking: bool,
    turns: Sequence[Turn] | None = None,
    offer: str | None = None,
) -> AskedKey:
    """What a replay finds a prompt by (:data:`AskedKey`)."""
    shape = None if turns is None else tuple(_turn_key(t) for t in turns)
    return (user_text, system, thinking, shape, offer)


def _turn_key(turn: Turn) -> tuple[Any, ...]:
    """A suite turn as looked up: ``(role, content)``, with its calls (canonical) and
    function name when it has them."""
    if not turn.tool_calls and turn.name is None:
        return (turn.role, turn.content)
    return (turn.role, turn.content, tuple(c.canonical() for c in turn.tool_calls), turn.name)


def _rendered_key(messages: Sequence[Message], thinking: bool, offer: str | None) -> RenderedKey:
    return (tuple(m.key() for m in messages), thinking, offer)


def _names(tools: Sequence[Tool]) -> str:
    return ", ".join(t.name for t in tools)


def _turns(data: Sequence[Sequence[Any]] | None) -> tuple[Turn, ...] | None:
    """A conversation's ``prompt.messages`` as turns (None: a single-turn prompt)."""
    if data is None:
        return None
    return tuple(Turn(*_turn_parts(turn)) for turn in data)


def _params_dict(params: GenerationParams) -> dict[str, Any]:
    """The params as a golden records them: ``max_tokens``, ``temperature``, ``seed`` and any
    request parameter written (a greedy request's entry is as it always was)."""
    return {
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "seed": params.seed,
        **params.written(),
    }


def missing_prompt_text(user_text: str, system: str | None, thinking: bool) -> str:
    extra = (f", system {system[:40]!r}" if system else "") + (", thinking on" if thinking else "")
    return (
        f"no recording of prompt {user_text[:60]!r}{extra} (the suite or the settings changed "
        "since it was recorded): record it again with --infercheck-record"
    )


def missing_conversation_text(messages: Sequence[Message], thinking: bool) -> str:
    """Why a list of concrete turns has no recording, naming its size and last turn."""
    role, content = (messages[-1].role, messages[-1].content) if messages else ("", "")
    extra = ", thinking on" if thinking else ""
    return (
        f"no recording of a conversation of {len(messages)} turns ending with {role} "
        f"{content[:60]!r}{extra} (a turn, the system prompt, a generated turn or the "
        "settings changed since it was recorded): record it again with --infercheck-record"
    )


def load_golden(path: Path) -> GoldenFile:
    """Read and check a golden file; :class:`GoldenError` names the file and the problem."""
    if not path.is_file():
        raise GoldenError(
            f"no golden file {shown(path)}: record it first with pytest --infercheck-record"
        )
    try:
        raw = path.read_bytes()
        data = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    except (OSError, ValueError) as exc:
        raise GoldenError(f"golden {shown(path)} cannot be read: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise GoldenError(f"{shown(path)} is not a pytest-infercheck golden file")
    if data.get("version") != VERSION:
        raise GoldenError(
            f"golden {shown(path)} has format version {data.get('version')!r}; this plugin "
            f"reads version {VERSION}: record it again with --infercheck-record"
        )
    entries = data.pop("prompts", [])
    try:
        return GoldenFile(path, data, entries)
    except (KeyError, TypeError) as exc:
        raise GoldenError(f"golden {shown(path)} is malformed: missing {exc}") from None


def replay_problems(golden: GoldenFile, test_model: str, test_tokenizer: str | None) -> list[str]:
    """Why ``golden`` cannot be the baseline of a test side with model name ``test_model``
    (the YAML's) and tokenizer fingerprint ``test_tokenizer`` (None: unknown, not checked)."""
    problems: list[str] = []
    recorded_model = golden.header.get("model", {}).get("name")
    if recorded_model != test_model:
        problems.append(
            f"recorded from model {recorded_model!r}, compared with model {test_model!r} "
            "(a golden gates an upgrade of the same model: name it the same in the YAML)"
        )
    known = golden.tokenizer is not None and test_tokenizer is not None
    if known and golden.tokenizer != test_tokenizer:
        problems.append(
            f"recorded with tokenizer {golden.tokenizer}, the test side's tokenizer is "
            f"{test_tokenizer} (another model or tokenizer)"
        )
    return problems


def engine_summary(identity: Mapping[str, Any]) -> str:
    """One line naming an engine and its versions: ``mlx-lm (mlx 0.29.1, mlx-lm 0.28.0)``."""
    versions = [f"{k} {identity[k]}" for k in VERSION_KEYS if identity.get(k)]
    kind = str(identity.get("kind", "?"))
    return f"{kind} ({', '.join(versions)})" if versions else kind
