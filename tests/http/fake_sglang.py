"""A fake SGLang server: SGLang's documented native shapes over a small deterministic model.

SGLang cannot run here (CUDA builds only), so ``kind: sglang`` is tested against this. The
routes and shapes follow ``pytest_infercheck/backends/sglang.py``'s sources: ``GET /health``
(200, empty body), ``GET /get_model_info``, ``GET /get_server_info``, ``POST /flush_cache``
(plain text; 400 while told to be busy), ``POST /tokenize`` and ``/detokenize``, and
``POST /generate`` with ``input_ids`` or ``text``, ``sampling_params``, ``return_logprob``,
``logprob_start_len``, ``top_logprobs_num``, ``return_text_in_logprobs`` and ``stream``
(cumulative SSE events, or deltas with ``incremental``).

The model (:class:`Model`): one token per character of :data:`ALPHABET` (id 0 ``</s>``, the
EOS; id 1 ``<s>``, added in front by ``add_special_tokens`` when ``bos``), and at each prefix
logits drawn from a generator seeded by a hash of the prefix ids, normalised
(``logprobs(prefix)[v] = logit_v - logsumexp(logits)``, float64). Tests compute what a
faithful engine answers from :meth:`Model.logprobs` themselves.

Faults, set on :class:`FakeSglang`: ``perturb`` (added to every logit of every input and
output position, scaled by the logit: another model), ``status`` (every ``/generate``
answers it), ``malformed`` (``/generate`` answers broken JSON), ``legacy_offset`` (input
logprobs start one position later, as older SGLang servers did), ``misaligned`` (input
entries one position early, the last one missing: a faulty server), ``busy``
(``/flush_cache`` answers 400).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ALPHABET = ["</s>", "<s>", "\n", *(chr(c) for c in range(32, 127))]
"""The vocabulary: EOS, BOS, newline, then printable ASCII (V = 98)."""
EOS, BOS = 0, 1
SPECIAL = {"</s>": EOS, "<s>": BOS}


@dataclass(frozen=True)
class Model:
    """The fake engine's model; ``perturb`` makes another one."""

    perturb: float = 0.0

    def logprobs(self, prefix: list[int]) -> list[float]:
        """The next-token distribution after ``prefix`` (log-probabilities, float64)."""
        seed = hashlib.sha256(",".join(map(str, prefix)).encode()).digest()
        rng = random.Random(int.from_bytes(seed[:8], "big"))
        logits = [rng.uniform(-4.0, 4.0) for _ in ALPHABET]
        logits[EOS] += 0.6 * len(prefix) - 6.0  # ends after a few tokens, more likely later
        logits = [x * (1.0 + self.perturb) for x in logits]
        top = max(logits)
        norm = top + math.log(sum(math.exp(x - top) for x in logits))
        return [x - norm for x in logits]


def tokenize(text: str, add_special: bool, bos: bool) -> list[int]:
    """``text`` as ids: ``<s>`` and ``</s>`` spelled out are their tokens, every other
    character its own; BOS in front when ``add_special`` and the vocabulary adds one."""
    ids = [BOS] if add_special and bos else []
    i = 0
    while i < len(text):
        for spelling, token in SPECIAL.items():
            if text.startswith(spelling, i):
                ids.append(token)
                i += len(spelling)
                break
        else:
            ids.append(ALPHABET.index(text[i]) if text[i] in ALPHABET else ALPHABET.index("?"))
            i += 1
    return ids


def detokenize(ids: list[int], skip_special: bool) -> str:
    return "".join(ALPHABET[i] for i in ids if not (skip_special and i in (EOS, BOS)))


def entry(lp: float | None, token: int, with_text: bool) -> list[Any]:
    return [lp, token, ALPHABET[token] if with_text else None]


def top_list(lps: list[float], k: int, with_text: bool) -> list[list[Any]]:
    order = sorted(range(len(lps)), key=lambda v: (-lps[v], v))[:k]
    return [entry(lps[v], v, with_text) for v in order]


@dataclass
class FakeSglang:
    """The fake server's state and faults; ``requests`` records (path, JSON body)."""

    folder: Path
    bos: bool = False
    perturb: float = 0.0
    status: int | None = None
    malformed: bool = False
    legacy_offset: bool = False
    misaligned: bool = False
    busy: bool = False
    incremental: bool = False
    requests: list[tuple[str, Any]] = field(default_factory=list)
    flushes: int = 0
    cache: set[tuple[int, ...]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def model(self) -> Model:
        return Model(self.perturb)

    def generate(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The answers of a ``/generate`` request: one, or the events of a stream."""
        ids = body.get("input_ids")
        if ids is None:
            ids = tokenize(body["text"], True, self.bos)
        sampling = body.get("sampling_params") or {}
        max_new = int(sampling.get("max_new_tokens", 128))
        out: list[int] = []
        rows: list[list[float]] = []
        finish: dict[str, Any] = {"type": "length", "length": max_new}
        for _ in range(max_new):
            lps = self.model.logprobs([*ids, *out])
            token = max(range(len(lps)), key=lambda v: (lps[v], -v))
            out.append(token)
            rows.append(lps)
            if token == EOS:
                finish = {"type": "stop", "matched": EOS}
                break
        with self.lock:
            cached = max((len(p) for p in self.cache if tuple(ids[: len(p)]) == p), default=0)
            self.cache.update(tuple(ids[:n]) for n in range(1, len(ids) + 1))
        meta: dict[str, Any] = {
            "id": "fake",
            "finish_reason": finish,
            "prompt_tokens": len(ids),
            "completion_tokens": len(out),
            "cached_tokens": cached,
            "e2e_latency": 0.001,
        }
        if body.get("return_logprob"):
            self._logprobs(meta, body, ids, out, rows)
        text = detokenize(out, skip_special=sampling.get("skip_special_tokens", True))
        answer = {"text": text, "output_ids": out, "meta_info": meta}
        if not body.get("stream"):
            return [answer]
        return self._events(answer, len(out))

    def _logprobs(
        self,
        meta: dict[str, Any],
        body: dict[str, Any],
        ids: list[int],
        out: list[int],
        rows: list[list[float]],
    ) -> None:
        k = int(body.get("top_logprobs_num") or 0)
        with_text = bool(body.get("return_text_in_logprobs"))
        start = int(body.get("logprob_start_len", -1))
        start = len(ids) if start == -1 else start + (1 if self.legacy_offset else 0)
        inputs, tops = [], []
        shift = 1 if self.misaligned else 0
        for pos in range(max(start - shift, 0), len(ids) - shift):
            lps = self.model.logprobs(ids[:pos]) if pos > 0 else None
            inputs.append(entry(lps[ids[pos]] if lps else None, ids[pos], with_text))
            tops.append(top_list(lps, k, with_text) if lps and k else None)
        meta["input_token_logprobs"] = inputs
        meta["output_token_logprobs"] = [
            entry(r[t], t, with_text) for r, t in zip(rows, out, strict=True)
        ]
        if k:
            meta["input_top_logprobs"] = tops
            meta["output_top_logprobs"] = [top_list(r, k, with_text) for r in rows]

    def _events(self, answer: dict[str, Any], n: int) -> list[dict[str, Any]]:
        """Stream events: after each token, the answer so far (or its delta)."""
        meta, events = answer["meta_info"], []
        for i in range(1, n + 1):
            lo = i - 1 if self.incremental else 0
            part = {**meta, "completion_tokens": i, "finish_reason": None}
            for key in ("output_token_logprobs", "output_top_logprobs"):
                if key in meta:
                    part[key] = meta[key][lo:i]
            if i == n:
                part["finish_reason"] = meta["finish_reason"]
            ids = answer["output_ids"][lo:i]
            events.append({"text": detokenize(ids, True), "output_ids": ids, "meta_info": part})
        return events


@contextmanager
def fake_sglang(fake: FakeSglang) -> Iterator[str]:
    """Serve ``fake`` on a free loopback port; yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, data: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _json(self, body: Any, status: int = 200) -> None:
            self._reply(status, json.dumps(body).encode())

        def do_GET(self) -> None:
            fake.requests.append((self.path, None))
            if self.path == "/health":
                self._reply(200, b"")
            elif self.path == "/get_model_info":
                folder = str(fake.folder)
                self._json({"model_path": folder, "tokenizer_path": folder, "is_generation": True})
            elif self.path == "/get_server_info":
                self._json({"version": "0.5.23-fake", "tp_size": 1})
            else:
                self._json({"detail": "Not Found"}, 404)

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"null")
            fake.requests.append((self.path, body))
            if self.path == "/flush_cache":
                if fake.busy:
                    self._reply(400, b"Cache not flushed: requests are running.\n", "text/plain")
                    return
                with fake.lock:
                    fake.flushes += 1
                    fake.cache.clear()
                self._reply(200, b"Cache flushed.\n", "text/plain")
            elif self.path == "/tokenize":
                tokens = tokenize(body["prompt"], body.get("add_special_tokens", True), fake.bos)
                self._json({"tokens": tokens, "count": len(tokens), "max_model_len": 512})
            elif self.path == "/detokenize":
                skip = body.get("skip_special_tokens", True)
                self._json({"text": detokenize(body["tokens"], skip)})
            elif self.path == "/generate":
                self._generate(body)
            else:
                self._json({"detail": "Not Found"}, 404)

        def _generate(self, body: dict[str, Any]) -> None:
            if fake.status is not None:
                error = {"object": "error", "message": "boom", "code": fake.status}
                self._json(error, fake.status)
                return
            if fake.malformed:
                self._reply(200, b'{"text": "4", "meta_info": ')
                return
            answers = fake.generate(body)
            if not body.get("stream"):
                self._json(answers[0])
                return
            lines = [b"data: " + json.dumps(a).encode() + b"\n\n" for a in answers]
            self._reply(200, b"".join([*lines, b"data: [DONE]\n\n"]), "text/event-stream")

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def model_folder(path: Path) -> Path:
    """A model folder for the fake: its ``config.json`` gives the vocabulary size."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"vocab_size": len(ALPHABET)}))
    return path
