"""llama-server, built from the pinned llama.cpp sources, agrees with mlx-lm on tiny-adder.

The binary comes from ``scripts/build_llama_server.sh`` (a cached build, or a fresh one of
about 3 minutes on 2 cores when the cache is cold); the model is ``tiny-adder`` converted to
an f32 GGUF by ``examples/models/make_gguf.py``. Both are real: nothing is mocked, and a
failed build fails the test with the script's output.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import mlx.core as mx
import mlx_lm
import numpy as np
import pytest
from mlx_lm.generate import generate_step

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build_llama_server.sh"
MAKE_GGUF = REPO / "examples" / "models" / "make_gguf.py"
SOURCE = REPO / "examples" / "models" / "tiny-adder"

BOS, EOS, BYTE_OFFSET = 1, 2, 3
VOCAB = 259
N_PREDICT = 5
PAIRS = [(37, 48), (0, 0), (0, 1), (5, 1), (9, 9), (19, 11), (55, 5), (99, 99)]
"""Fixed pairs: two-digit sums, carries, and single-digit pairs the bf16 model gets wrong."""

NEAR_TIE_PAIRS = [(1, 0)]
"""Pairs whose first answer token is a near tie: for ``1+0=`` the float32 logprobs of "2" and
"1" are -0.8829 and -0.8903, and bf16 arithmetic flips the argmax to "1". The f32 GGUF must
follow mlx-lm's float32 greedy tokens there, not its bf16 ones."""

SERVER_FLAGS = ("-fa", "off", "-ctk", "f32", "-ctv", "f32", "-np", "1", "-c", "64", "-t", "2")
"""Exact float32 attention and KV cache, one slot (bit-identical repeats)."""

LOGPROB_ATOL = 2e-4
"""Largest |logprob(llama-server, f32 GGUF) - logprob(mlx float32)| accepted, over the whole
vocabulary at every generated position. Measured over 31 prompts: at most 3.4e-5 (median of
the per-prompt maxima 1.3e-5; the largest at logprobs near -30). For scale, mlx bf16 vs mlx
float32 differ by up to 0.41 on the same positions."""

BUILD_TIMEOUT_S = 3600
HEALTH_TIMEOUT_S = 60.0


# --------------------------------------------------------------------------- helpers


def _load_make_gguf() -> ModuleType:
    spec = importlib.util.spec_from_file_location("infercheck_make_gguf", MAKE_GGUF)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_llama_server() -> Path:
    """Build (or find in the cache) llama-server; fail with the script's output otherwise."""
    env = {"PYTHON": sys.executable, **os.environ}  # pip of this venv downloads the sdist
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        pytest.fail(
            f"{BUILD_SCRIPT.name} failed (exit {proc.returncode})\n"
            f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}",
            pytrace=False,
        )
    binary = Path(lines[-1])
    assert binary.is_absolute() and binary.is_file(), proc.stdout
    return binary


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_json(url: str, payload: dict[str, Any] | None = None, timeout: float = 60.0) -> Any:
    """GET (no payload) or POST a JSON body; the decoded JSON answer."""
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


@contextlib.contextmanager
def llama_server(
    binary: Path, model: Path, log_path: Path, flags: Sequence[str] = SERVER_FLAGS
) -> Iterator[str]:
    """Run llama-server on a free local port in its own process group; yield its base URL.

    The whole group is killed on exit, whatever happened.
    """
    port = free_port()
    cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), *flags]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + HEALTH_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"llama-server exited with {proc.returncode}: {' '.join(cmd)}\n"
                    + log_path.read_text(errors="replace")[-4000:],
                    pytrace=False,
                )
            try:
                if http_json(base + "/health", timeout=2.0).get("status") == "ok":
                    break
            except (OSError, ValueError):  # refused, 503 while loading, ...
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"llama-server not healthy after {HEALTH_TIMEOUT_S:.0f} s: {' '.join(cmd)}\n"
                    + log_path.read_text(errors="replace")[-4000:],
                    pytrace=False,
                )
            time.sleep(0.1)
        yield base
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def server_completion(base: str, prompt_ids: Sequence[int]) -> tuple[list[int], np.ndarray]:
    """Greedy tokens and their full-vocabulary logprobs ``(T, VOCAB)`` from /completion."""
    resp = http_json(
        base + "/completion",
        {
            "prompt": list(prompt_ids),
            "n_predict": N_PREDICT,
            "temperature": 0,
            "n_probs": VOCAB,
            "return_tokens": True,
            "cache_prompt": False,
        },
    )
    tokens = [int(t) for t in resp["tokens"]]
    probs = resp["completion_probabilities"]
    ids = [int(p["id"]) for p in probs]
    # llama-server leaves out the entries of tokens that end inside a UTF-8 character (and,
    # seen here, every later entry of that request): the adder's ASCII answers never do.
    assert ids == tokens, f"completion_probabilities ids {ids} != tokens {tokens}"
    out = np.full((len(probs), VOCAB), np.nan, dtype=np.float64)
    for i, entry in enumerate(probs):
        top = entry["top_logprobs"]
        assert len(top) == VOCAB, f"n_probs={VOCAB} gave {len(top)} entries"
        for item in top:
            out[i, int(item["id"])] = float(item["logprob"])
    return tokens, out


def mlx_greedy(model: Any, prompt_ids: Sequence[int]) -> list[int]:
    """mlx-lm greedy tokens (``generate_step``, argmax), stopping after EOS."""
    out: list[int] = []
    for tok, _ in generate_step(
        mx.array(list(prompt_ids)),
        model,
        max_tokens=N_PREDICT,
        sampler=lambda lp: mx.argmax(lp, -1),
    ):
        out.append(int(tok))
        if int(tok) == EOS:
            break
    return out


def mlx_logprobs(
    model32: Any, prompt_ids: Sequence[int], continuation: Sequence[int]
) -> np.ndarray:
    """Float32 teacher-forced logprobs ``(len(continuation), VOCAB)`` of each continuation step."""
    ids = [*prompt_ids, *continuation]
    logits = model32(mx.array([ids]))[0].astype(mx.float32)
    logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    start = len(prompt_ids) - 1
    return np.array(logp[start : start + len(continuation)], dtype=np.float64)


def adder_prompt(a: int, b: int) -> tuple[str, list[int]]:
    text = f"{a}+{b}="
    return text, [BOS, *(c + BYTE_OFFSET for c in text.encode())]


# --------------------------------------------------------------------------- test


def test_llama_server_matches_mlx_lm(tmp_path: Path) -> None:
    binary = build_llama_server()
    gguf_path = _load_make_gguf().make_gguf(SOURCE, tmp_path / "tiny-adder-f32.gguf", "f32")
    model, tokenizer = mlx_lm.load(str(SOURCE))[:2]
    model32 = mlx_lm.load(str(SOURCE))[0]
    model32.set_dtype(mx.float32)

    worst = 0.0
    with llama_server(binary, gguf_path, tmp_path / "llama-server.log") as base:
        props = http_json(base + "/props")
        assert Path(props["model_path"]).name == gguf_path.name
        assert (props["bos_token"], props["eos_token"]) == ("<s>", "</s>")
        for a, b in [*PAIRS, *NEAR_TIE_PAIRS]:
            text, prompt_ids = adder_prompt(a, b)
            mlx_ids = list(tokenizer.encode(text, add_special_tokens=False))
            assert mlx_ids == prompt_ids[1:]
            served = http_json(base + "/tokenize", {"content": text, "add_special": False})
            assert served["tokens"] == mlx_ids, (text, served)
            with_bos = http_json(base + "/tokenize", {"content": text, "add_special": True})
            assert with_bos["tokens"] == prompt_ids, (text, with_bos)

            tokens, server_lp = server_completion(base, prompt_ids)
            expected32 = mlx_greedy(model32, prompt_ids)
            assert tokens == expected32, f"{text} llama-server {tokens} != mlx f32 {expected32}"
            if (a, b) in PAIRS:
                expected = mlx_greedy(model, prompt_ids)
                assert tokens == expected, f"{text} llama-server {tokens} != mlx-lm {expected}"
            reference = mlx_logprobs(model32, prompt_ids, tokens)
            assert not np.isnan(server_lp).any()
            diff = float(np.max(np.abs(server_lp - reference)))
            worst = max(worst, diff)
            assert diff <= LOGPROB_ATOL, f"{text}: max |logprob diff| {diff:.3g} > {LOGPROB_ATOL}"
    print(f"max |logprob(llama-server) - logprob(mlx f32)|: {worst:.3g}")
