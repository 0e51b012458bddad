"""What an engine offers, asked the way its backend asks it (the backends' HTTP client, no
retries): the model it serves, whether logprobs come back, whether it has a tokenizer
endpoint, its vocabulary and context, and so which comparisons it can take part in.

- llama-server: ``/health``, ``/props`` (``model_path``, ``n_ctx``), ``/v1/models``
  (``meta.n_vocab``), ``/tokenize``, and one ``/completion`` of one token with ``n_probs``.
  Full-vocabulary teacher-forced KL up to :data:`~..backends.llama_server.FULL_VOCAB_SCORING_LIMIT`
  ids, its top 8 above.
- vLLM: ``/health``, ``/v1/models`` (``id``, ``root``, ``max_model_len``), ``/tokenize``, one
  ``/v1/completions`` with ``logprobs``, and ``prompt_logprobs`` of the vocabulary (the
  folder's ``config.json``): full rows when the server answers it, else its top k
  (``--max-logprobs``, named by the server's 400) plus a tail bucket.
- An OpenAI-compatible server: ``/v1/models``, one ``/v1/chat/completions`` with
  ``logprobs: true, top_logprobs: 1``, and ``/tokenize`` (absent on most: HTTP 404).
- mlx-lm in this process: the folder's ``config.json`` and tokenizer files (nothing is loaded).

A server that cannot be reached, or answers as another kind of server would, is a
:class:`ProbeError` naming the URL, what was asked and a hint.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends.base import BackendError
from ..backends.http import HttpClient, HttpError, HttpSettings
from ..backends.llama_server import FULL_VOCAB_SCORING_LIMIT
from ..backends.vllm import MAX_ALLOWED

PROBE_TIMEOUT_S = 30.0
ENGINES = ("vllm", "llama-server", "openai", "mlx")
"""The engines ``init`` probes, by their flag (``--vllm``, ..., ``--mlx``)."""
NAMES = {"vllm": "a vLLM server", "llama-server": "llama-server", "openai": "the server"}
START_HINTS = {
    "vllm": "vllm serve /models/my-model --host 127.0.0.1 --port 8000",
    "llama-server": "llama-server -m model.gguf --host 127.0.0.1 --port 8080",
    "openai": "your server's serve command",
}


class ProbeError(Exception):
    """The engine could not be probed: the message names the URL (or folder) and a hint."""


@dataclass(frozen=True)
class Probed:
    """What :func:`probe` found.

    ``kind`` is the backend kind written (``vllm``, ``llama-server``, ``openai``, ``mlx-lm``);
    ``model`` the model entry's field and value (``("gguf", "/m.gguf")``); ``model_name`` the
    served name when the backend must send one that the model entry does not give;
    ``scoring`` is ``full`` (teacher-forced, full-vocabulary rows: exact KL), ``top-k``
    (teacher-forced top k plus a tail bucket: a lower bound of the KL), or ``none`` (the
    server's own top-k up to the first divergence at best); ``facts`` are the probe's
    findings in words, written into the matrix as comments.
    """

    kind: str
    url: str | None
    model: tuple[str, str]
    model_name: str | None = None
    served: str | None = None
    vocab: int | None = None
    context: int | None = None
    logprobs: bool = False
    tokenizer: bool = False
    scoring: str = "none"
    top_k: int | None = None
    facts: tuple[str, ...] = field(default_factory=tuple)


def probe(engine: str, where: str, model: str | None = None) -> Probed:
    """Probe ``engine`` (one of :data:`ENGINES`) at ``where`` (a URL, or mlx's folder);
    ``model``: the served model to pick when the server serves several."""
    if engine == "mlx":
        return probe_mlx(Path(where), model)
    url = where.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ProbeError(
            f"{where!r} is not a URL: give the server's address, e.g. "
            f"--{engine} http://127.0.0.1:{'8080' if engine == 'llama-server' else '8000'}"
        )
    runner = {"vllm": probe_vllm, "llama-server": probe_llama, "openai": probe_openai}[engine]
    return asyncio.run(_with_client(url, lambda http: runner(http, url, model)))


async def _with_client(url: str, run: Callable[[HttpClient], Awaitable[Probed]]) -> Probed:
    http = HttpClient("init", HttpSettings(url, timeout_s=PROBE_TIMEOUT_S, retries=0))
    try:
        return await run(http)
    finally:
        await http.aclose()


async def _get(
    http: HttpClient, engine: str, url: str, method: str, path: str, body: Any = None
) -> Any:
    """One request; a failure is a :class:`ProbeError` naming the URL and a hint."""
    try:
        return await http.request(method, path, body)
    except HttpError as exc:
        if exc.status is None:
            raise ProbeError(
                f"cannot reach {url} ({method} {path}: {_cause(exc)}); is {NAMES[engine]} "
                f"running there? Start it (e.g. `{START_HINTS[engine]}`) or give its URL"
            ) from exc
        other = (
            ""
            if engine == "openai"
            else (
                f"; is it a {engine} server? (--vllm, --llama-server and --openai probe the others)"
            )
        )
        raise ProbeError(
            f"{url} answered {method} {path} with HTTP {exc.status}: "
            f"{(exc.body or '').strip()[:200]}{other}"
        ) from exc
    except BackendError as exc:
        raise ProbeError(f"{url}: {method} {path}: {exc}") from exc


async def _health(http: HttpClient, engine: str, url: str) -> None:
    """``GET /health`` answers 200 (vLLM's has an empty body: its status is what counts)."""
    try:
        status, body = await http.send_once("GET", "/health", timeout_s=PROBE_TIMEOUT_S)
    except HttpError as exc:
        raise ProbeError(
            f"cannot reach {url} (GET /health: {_cause(exc)}); is {NAMES[engine]} running "
            f"there? Start it (e.g. `{START_HINTS[engine]}`) or give its URL"
        ) from exc
    if status != 200:
        raise ProbeError(
            f"{url} answered GET /health with HTTP {status}: {body.strip()[:200]}; is it "
            f"{NAMES[engine]}? (--vllm, --llama-server, --openai probe the others)"
        )


def _cause(exc: BaseException) -> str:
    """The transport error's words (``ConnectError: [Errno 111] Connection refused``)."""
    cause = exc.__cause__
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)


async def _offered(http: HttpClient, path: str, body: Any) -> bool:
    """Whether ``POST path`` answers (False on any HTTP error: not offered here)."""
    try:
        await http.request("POST", path, body)
    except HttpError:
        return False
    return True


async def probe_llama(http: HttpClient, url: str, model: str | None = None) -> Probed:
    """A llama-server (see the module docstring); ``model`` is not asked for (it serves the
    model it was started with)."""
    await _health(http, "llama-server", url)
    props = await _get(http, "llama-server", url, "GET", "/props")
    models = await _get(http, "llama-server", url, "GET", "/v1/models")
    try:
        vocab = int(models["data"][0]["meta"]["n_vocab"])
    except (KeyError, IndexError, TypeError, ValueError):
        raise ProbeError(
            f"{url}: GET /v1/models names no n_vocab: is it a llama-server? (--vllm, "
            "--openai probe the others)"
        ) from None
    path = str(props.get("model_path") or "")
    settings = props.get("default_generation_settings") or {}
    context = settings.get("n_ctx") if isinstance(settings, dict) else None
    tokenizer = await _offered(http, "/tokenize", {"content": "Hi"})
    answer = await _get(
        http,
        "llama-server",
        url,
        "POST",
        "/completion",
        {"prompt": "Hi", "n_predict": 1, "n_probs": 2, "temperature": 0, "cache_prompt": False},
    )
    logprobs = bool(answer.get("completion_probabilities")) if isinstance(answer, dict) else False
    full = vocab <= FULL_VOCAB_SCORING_LIMIT
    facts = [
        f"llama-server at {url} serving {path or 'an unnamed model'}",
        f"vocabulary {vocab} ids; context {context} tokens per slot"
        if isinstance(context, int)
        else f"vocabulary {vocab} ids",
        "logprobs: yes (n_probs)" if logprobs else "logprobs: none came back",
        f"tokenizer endpoint: {'yes' if tokenizer else 'no'} (/tokenize)",
        "teacher-forced full-vocabulary KL (one request per position)"
        if full
        else f"vocabulary above {FULL_VOCAB_SCORING_LIMIT}: teacher-forced top 8 (KL: a bound)",
    ]
    return Probed(
        kind="llama-server",
        url=url,
        model=("gguf", path or "model.gguf"),
        served=path or None,
        vocab=vocab,
        context=context if isinstance(context, int) else None,
        logprobs=logprobs,
        tokenizer=tokenizer,
        scoring="full" if full else "top-k",
        top_k=None if full else 8,
        facts=tuple(facts),
    )


def _pick(url: str, ids: list[str], model: str | None, hint: str) -> str:
    """The served model: ``model`` when the server serves it, else the only one served."""
    if not ids:
        raise ProbeError(f"{url}: GET /v1/models lists no model")
    if model is not None:
        if model not in ids:
            raise ProbeError(f"{url} serves {', '.join(ids)}, not {model!r} ({hint})")
        return model
    if len(ids) > 1:
        raise ProbeError(f"{url} serves {', '.join(ids)}: pick one with --model NAME")
    return ids[0]


async def probe_vllm(http: HttpClient, url: str, model: str | None = None) -> Probed:
    """A vLLM server (see the module docstring)."""
    await _health(http, "vllm", url)
    version = await _get(http, "vllm", url, "GET", "/version")  # vLLM's own route
    listed = await _get(http, "vllm", url, "GET", "/v1/models")
    served = [m for m in (listed.get("data") or []) if isinstance(m, dict)]
    name = _pick(url, [str(m.get("id")) for m in served], model, "--model names the served model")
    entry = next(m for m in served if str(m.get("id")) == name)
    root = str(entry.get("root") or name)
    length = entry.get("max_model_len")
    folder = Path(root).expanduser()
    vocab = _config(folder).get("vocab_size") if folder.is_dir() else None
    vocab = vocab if isinstance(vocab, int) and vocab > 0 else None
    tokenizer = await _offered(http, "/tokenize", {"model": name, "prompt": "Hi"})
    answer = await _get(
        http,
        "vllm",
        url,
        "POST",
        "/v1/completions",
        {"model": name, "prompt": "Hi", "max_tokens": 1, "temperature": 0, "logprobs": 1},
    )
    logprobs = _choice_logprobs(answer) is not None
    top_k = await _max_prompt_logprobs(http, name, vocab)
    full = vocab is not None and top_k is not None and top_k >= vocab
    facts = [
        f"vLLM {version.get('version', '?') if isinstance(version, dict) else '?'} at {url} "
        f"serving {name}" + (f" from {root}" if root != name else ""),
        f"vocabulary {vocab} ids (config.json)"
        if vocab
        else f"{root} is not a folder here: the vocabulary is unknown",
        f"context {length} tokens" if isinstance(length, int) else "context unknown",
        "logprobs: yes" if logprobs else "logprobs: none came back",
        f"tokenizer endpoint: {'yes' if tokenizer else 'no'} (/tokenize)",
        "teacher-forced full-vocabulary KL (prompt_logprobs covers the vocabulary)"
        if full
        else f"teacher-forced top {top_k} plus a tail bucket (--max-logprobs {top_k}): KL a lower "
        "bound; serve with --max-logprobs of the vocabulary size for exact KL",
    ]
    local = folder.is_dir()
    return Probed(
        kind="vllm",
        url=url,
        model=("path", root) if local else ("served_name", name),
        model_name=name if local and name != root else None,
        served=name,
        vocab=vocab,
        context=length if isinstance(length, int) else None,
        logprobs=logprobs,
        tokenizer=tokenizer,
        scoring="full" if full else "top-k",
        top_k=None if full else top_k,
        facts=tuple(facts),
    )


async def _max_prompt_logprobs(http: HttpClient, name: str, vocab: int | None) -> int | None:
    """The largest ``prompt_logprobs`` the server answers (as the vLLM backend learns it)."""
    asked = vocab or 1_000_000
    body = {
        "model": name,
        "prompt": "Hi",
        "max_tokens": 1,
        "temperature": 0,
        "prompt_logprobs": asked,
    }
    try:
        await http.request("POST", "/v1/completions", body)
    except HttpError as exc:
        found = MAX_ALLOWED.search(exc.body or str(exc))
        return min(int(found.group(1)), asked) if found else None
    return asked


def _choice_logprobs(answer: Any) -> Any:
    try:
        return answer["choices"][0].get("logprobs")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None


async def probe_openai(http: HttpClient, url: str, model: str | None = None) -> Probed:
    """An OpenAI-compatible server (see the module docstring)."""
    listed = await _get(http, "openai", url, "GET", "/v1/models")
    served = [m for m in (listed.get("data") or []) if isinstance(m, dict)]
    name = _pick(url, [str(m.get("id")) for m in served], model, "--model names it")
    body = {
        "model": name,
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 1,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 1,
    }
    answer = await _get(http, "openai", url, "POST", "/v1/chat/completions", body)
    found = _choice_logprobs(answer)
    logprobs = isinstance(found, dict) and bool(found.get("content"))
    tokenizer = await _offered(http, "/tokenize", {"model": name, "prompt": "Hi"})
    facts = [
        f"an OpenAI-compatible server at {url} serving {name}",
        "logprobs: yes (top_logprobs)" if logprobs else "logprobs: none came back",
        f"tokenizer endpoint: {'yes' if tokenizer else 'no'} (/tokenize)",
        "no teacher forcing: KL only up to the first divergent token, from each side's own "
        "top-k (a lower bound)"
        if logprobs
        else "no logprobs: text and answers only",
    ]
    return Probed(
        kind="openai",
        url=url,
        model=("served_name", name),
        served=name,
        logprobs=logprobs,
        tokenizer=tokenizer,
        scoring="none",
        facts=tuple(facts),
    )


def _config(folder: Path) -> dict[str, Any]:
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tiktoken.model")


def probe_mlx(folder: Path, model: str | None = None) -> Probed:
    """A model folder for mlx-lm in this process (nothing is loaded): its ``config.json``
    (vocabulary, context) and a tokenizer file."""
    path = folder.expanduser().resolve()
    if not path.is_dir():
        raise ProbeError(
            f"{folder} is not a folder: give --mlx the folder of an mlx or Hugging Face model "
            "(config.json, weights, tokenizer)"
        )
    config = _config(path)
    if not config:
        raise ProbeError(f"{path} has no readable config.json: is it a model folder?")
    tokenizer = next((n for n in TOKENIZER_FILES if (path / n).exists()), None)
    if tokenizer is None:
        raise ProbeError(
            f"{path} has no tokenizer ({', '.join(TOKENIZER_FILES)}): mlx-lm cannot load it"
        )
    vocab = config.get("vocab_size")
    context = config.get("max_position_embeddings")
    facts = [
        f"mlx-lm in this process on {path} ({config.get('model_type', 'unknown type')})",
        f"vocabulary {vocab} ids" if isinstance(vocab, int) else "vocabulary unknown",
        f"context {context} positions (max_position_embeddings)"
        if isinstance(context, int)
        else "context unknown",
        f"tokenizer: {tokenizer}",
        "teacher-forced full-vocabulary KL (in-process logits)",
    ]
    return Probed(
        kind="mlx-lm",
        url=None,
        model=("path", str(path)),
        served=model,
        vocab=vocab if isinstance(vocab, int) else None,
        context=context if isinstance(context, int) else None,
        logprobs=True,
        tokenizer=True,
        scoring="full",
        facts=tuple(facts),
    )
