"""Train the tiny tool-calling model committed as ``tiny-tool/`` (Qwen 2.5 / Hermes format).

A small ``LlamaForCausalLM`` (head size 32, so vLLM's CPU build serves it) trained from
scratch on the conversations of ``tiny_tool_data.py``: given the four shared tools and a
request such as ``add 12 and 34`` it writes ``<tool_call>`` blocks; after tool results a
plain sentence copied from them; without tools ``I have no tools for that.``. The chat
template is Qwen2.5-Instruct's, verbatim; the tokenizer is described in ``tiny_tool_data``.

Training: an endless seeded stream of examples (held-out combinations never drawn), loss on
the assistant's reply and its ``<|im_end|>`` only. Every prompt of a step starts with one of
two fixed system blocks (the tools block or the default system prompt), so each step runs that
block once per group, repeats its KV cache over the group and runs only the rest of each
sequence: the same gradients as full sequences at less cost.
Measured during training: teacher-forced exact match on the fixed held-out set (every reply
token, EOS included, is the argmax: the same as greedy decoding reproducing the reply).

This script needs torch, so it runs in its own venv (never in the dev venv)::

    python3 -m venv /root/.cache/infercheck-train-venv
    /root/.cache/infercheck-train-venv/bin/pip install torch==2.13.0 transformers \\
        tokenizers safetensors numpy
    /root/.cache/infercheck-train-venv/bin/python examples/models/train_tiny_tool.py

CI never runs it: the trained weights are committed. Then measure with mlx_lm and refresh the
model card and the bundled suite (dev venv)::

    .venv/bin/python examples/models/measure_tiny_tool.py --update-card --write-suite
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import tiny_tool_data as data  # noqa: E402

DEFAULT_OUT = HERE / "tiny-tool"
CARD_MARK_START = "<!-- mlx-metrics:start -->"
CARD_MARK_END = "<!-- mlx-metrics:end -->"


# --------------------------------------------------------------------------- encoding


class Encoder:
    """Renders examples with the chat template and splits their ids at the system block."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.eos = tokenizer.convert_tokens_to_ids(data.EOS_TOKEN)
        self.system: dict[bool, str] = {}
        self.prefix: dict[bool, list[int]] = {}
        probe = [{"role": "user", "content": "x"}]
        for tools in (True, False):
            text = self.render(probe, tools)
            end = text.index("<|im_end|>\n") + len("<|im_end|>\n")
            self.system[tools] = text[:end]
            self.prefix[tools] = self.ids(text[:end])

    def render(self, messages: Any, tools: bool) -> str:
        return str(
            self.tok.apply_chat_template(
                list(messages),
                tools=data.TOOLS if tools else None,
                tokenize=False,
                add_generation_prompt=True,
            )
        )

    def ids(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def split(self, ex: data.Example, check: bool = False) -> tuple[list[int], int]:
        """The ids after the system block (rest of prompt + reply + EOS) and the index in
        them where the reply starts."""
        text = self.render(ex.messages, ex.tools)
        sys_text = self.system[ex.tools]
        assert text.startswith(sys_text)
        rest = self.ids(text[len(sys_text) :])
        reply = self.ids(ex.target_text())
        if check:
            full = self.ids(text + ex.target_text())
            assert full == self.prefix[ex.tools] + rest + reply, ex
        return rest + reply + [self.eos], len(rest)


def batch_tensors(rows: list[tuple[list[int], int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and a mask of the target positions (reply + EOS) of each row."""
    n = max(len(r) for r, _ in rows)
    ids = torch.full((len(rows), n), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), n), dtype=torch.float32)
    for i, (r, start) in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, start : len(r)] = 1.0
    return ids, mask


def group_logits(model: LlamaForCausalLM, prefix: list[int], ids: torch.Tensor) -> torch.Tensor:
    """Logits over ``ids`` (B x T) continuing the shared ``prefix``: the prefix runs once and
    its KV cache is repeated over the batch. Position ``t`` predicts ``ids[:, t + 1]``."""
    p = torch.tensor([prefix])
    out = model(input_ids=p, use_cache=True)
    cache = out.past_key_values
    cache.batch_repeat_interleave(ids.shape[0])
    return model(input_ids=ids, past_key_values=cache, use_cache=True).logits


def group_loss(
    model: LlamaForCausalLM, prefix: list[int], rows: list[tuple[list[int], int]], pad: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum of target NLLs and number of targets of a group sharing ``prefix``."""
    ids, mask = batch_tensors(rows, pad)
    logits = group_logits(model, prefix, ids)[:, :-1].float()
    tgt, tmask = ids[:, 1:], mask[:, 1:]
    nll = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="none"
    )
    return (nll * tmask.reshape(-1)).sum(), tmask.sum()


def batches(stream: Any, enc: Encoder, batch_size: int, rng: random.Random, pool: int = 2) -> Any:
    """Endless training steps, each a list of ``(tools, rows)`` groups: ``pool * batch_size``
    examples at a time; the no-tools ones join every step of the pool as a group of their own
    (their system block is 6 tokens); the others are sorted by length and cut into ``pool``
    groups, one per step, in a seeded random order. Two length buckets keep the padding small
    while every step still mixes categories (grouping by length alone makes each step one
    category, and the loss jumps between them)."""
    while True:
        exs = [next(stream) for _ in range(pool * batch_size)]
        plain = [enc.split(e) for e in exs if not e.tools]
        rows = sorted((enc.split(e) for e in exs if e.tools), key=lambda r: len(r[0]))
        size = -(-len(rows) // pool)
        steps = [rows[i : i + size] for i in range(0, len(rows), size)]
        rng.shuffle(steps)
        for k, step in enumerate(steps):
            groups = [(True, step)]
            extra = plain[k::pool]
            if extra:
                groups.append((False, extra))
            yield groups


@torch.no_grad()
def exact_match(
    model: LlamaForCausalLM, enc: Encoder, examples: list[data.Example], batch: int = 64
) -> float:
    """Share of examples whose every reply token (EOS included) is the argmax."""
    model.eval()
    ok = 0
    for tools in (True, False):
        group = [enc.split(e) for e in examples if e.tools == tools]
        for s in range(0, len(group), batch):
            rows = group[s : s + batch]
            ids, mask = batch_tensors(rows, enc.eos)
            logits = group_logits(model, enc.prefix[tools], ids)[:, :-1]
            right = (logits.argmax(-1) == ids[:, 1:]) | (mask[:, 1:] == 0)
            ok += int(right.all(dim=1).sum())
    model.train()
    return ok / len(examples)


# --------------------------------------------------------------------------- model


def build_config(args: argparse.Namespace, vocab_size: int, tok: Any) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.hidden // 32,
        num_key_value_heads=args.hidden // 32,
        head_dim=32,
        hidden_act="silu",
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        initializer_range=0.02,
        tie_word_embeddings=not args.untied,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.convert_tokens_to_ids(data.EOS_TOKEN),
        pad_token_id=None,
        attention_bias=False,
        mlp_bias=False,
        use_cache=True,
        architectures=["LlamaForCausalLM"],
    )


def lr_at(step: int, total: int, peak: float, warmup: int, final_frac: float) -> float:
    """Linear warmup, then cosine decay to ``final_frac * peak``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return peak * (final_frac + (1 - final_frac) * 0.5 * (1 + math.cos(math.pi * t)))


# --------------------------------------------------------------------------- outputs


def save(model: LlamaForCausalLM, tokenizer: Any, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in ("model.safetensors", "config.json", "generation_config.json"):
        (out / name).unlink(missing_ok=True)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    eos = tokenizer.convert_tokens_to_ids(data.EOS_TOKEN)
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")

    # transformers 5 writes "dtype" and "rope_parameters"; older readers (mlx_lm's convert,
    # llama.cpp, transformers 4, vLLM) look at "torch_dtype" / "rope_theta".
    cfg = json.loads((out / "config.json").read_text())
    cfg["architectures"] = ["LlamaForCausalLM"]
    cfg["model_type"] = "llama"
    cfg["torch_dtype"] = "bfloat16"
    cfg["dtype"] = "bfloat16"
    cfg["rope_theta"] = 10000.0
    cfg["bos_token_id"] = eot
    cfg["eos_token_id"] = eos
    (out / "config.json").write_text(json.dumps(dict(sorted(cfg.items())), indent=2) + "\n")
    gen = {"bos_token_id": eot, "eos_token_id": [eos, eot], "pad_token_id": eot, "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")

    # Qwen's layout: no BOS added, the template in tokenizer_config.json, plain class name.
    tcfg = json.loads((out / "tokenizer_config.json").read_text())
    tcfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    tcfg["chat_template"] = data.CHAT_TEMPLATE
    tcfg["add_bos_token"] = False
    tcfg["add_eos_token"] = False
    tcfg["bos_token"] = None
    tcfg["errors"] = "replace"
    (out / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2, sort_keys=True) + "\n")
    (out / "chat_template.jinja").unlink(missing_ok=True)


def write_card(out: Path, info: dict[str, Any]) -> None:
    """Model card; the mlx_lm section is filled by ``measure_tiny_tool.py --update-card``."""
    heldout = "\n".join(
        f"| {cat} | {n} | {acc:.3f} |" for cat, (n, acc) in info["heldout_torch"].items()
    )
    card = f"""# tiny-tool

A tiny `LlamaForCausalLM` trained from scratch (CPU, torch, fixed seed) to call tools in the
Qwen 2.5 / Hermes format with Qwen2.5-Instruct's own chat template. Given the four tools of
pytest-infercheck's `tool-use` suite (`add`, `get_weather`, `get_time`, zero-argument
`get_date`) and a request such as `add 12 and 34` it answers

```
<tool_call>
{{"name": "add", "arguments": {{"a": 12, "b": 34}}}}
</tool_call>
```

(two blocks for a request such as `weather in Oslo and Paris`), after tool results a plain
sentence copied from them (`The sum is 46.`, `It is 12 degrees and sunny in Oslo.`), and
without tools `I have no tools for that.`. Made for engine parity checks (llama-server with
`--jinja`, vLLM with `--tool-call-parser hermes`, mlx-lm): not a language model; only the
request shapes of `../tiny_tool_data.py` are in distribution.

## Architecture

| field | value |
|---|---|
| architecture | `LlamaForCausalLM` (`model_type: llama`) |
| hidden / layers / heads | {info["shape"]} (head dim 32, no GQA) |
| intermediate size | {info["intermediate"]} (SwiGLU) |
| vocab | {info["vocab"]} |
| max positions | 2048, default RoPE (theta 10000); trained on prompts up to ~450 tokens |
| tied embeddings | {info["tied"]} |
| parameters | {info["n_params"]:,} |
| weights | bfloat16, `model.safetensors` ({info["weights_bytes"]:,} bytes) |

## Tokenizer and chat template

- `chat_template` (in `tokenizer_config.json`): Qwen2.5-Instruct's, verbatim (tools listed in
  `<tools></tools>` in the system turn; calls as `<tool_call>\\n{{"name": ..., "arguments":
  {{...}}}}\\n</tool_call>`; tool results as `<tool_response>` blocks in a user turn).
- byte-level BPE, GPT-2 regex pre-tokenizer (`ByteLevel`, `use_regex=True`,
  `add_prefix_space=False`), ByteLevel decoder; ids 0..255 are the 256 byte symbols in byte
  order, then the merge results: fixed merges that make every integer 0..999 one token, then
  merges learned on the corpus (template words, tool schemas, requests, the training cities);
  a leading space never joins a digit or an upper-case letter, so a number or a city is the
  same tokens with or without its leading space (`add 12` -> `add`, `Ġ`, `12`; `{{"a": 12`
  -> ..., `Ġ`, `12`); any text encodes.
- added tokens, one id each: `<|endoftext|>` (BOS/pad in the configs, never added),
  `<|im_start|>`, `<|im_end|>` (EOS) special; `<tool_call>`, `</tool_call>`, `<tool_response>`,
  `</tool_response>`, the template's three long fixed strings (the default system prompt,
  the tools preamble, the tools postamble) and the four tool schemas exactly as the template
  writes them (`tool | tojson`) non-special, so they stay in decoded text; a tools prompt's
  system block is 16 tokens. A tool schema written any other way is plain BPE text (out of
  distribution, like any other tool set).
  Ids: {info["added_ids"]}.
- no BOS is added (Qwen's convention); generation stops at `<|im_end|>` (or `<|endoftext|>`).

## Training

```
/root/.cache/infercheck-train-venv/bin/python examples/models/train_tiny_tool.py
```

- data: an endless seeded stream of conversations (`tiny_tool_data.Sampler`, categories
  {info["mix"]}); loss on the reply and its `<|im_end|>` only
- held out (never trained on): `add` pairs with `(7a + 13b) % 8 == 3`; a seeded fifth of the
  cities for `get_weather` and another fifth for `get_time` (each city still seen with the
  other tool); the date requests `what is the date?` and `which date is it today?`; ten
  cities never seen at all (`unseen-city`, measured apart)
- optimizer: AdamW, peak lr {info["lr"]}, weight decay {info["weight_decay"]},
  {info["warmup"]} warmup steps then cosine decay, {info["steps"]} steps of up to
  {info["batch_size"]} conversations (grouped by length), fp32 master weights, saved as bf16
- seed {info["seed"]}, {info["threads"]} torch threads, torch {info["torch_version"]},
  transformers {info["transformers_version"]}; wall time {info["train_seconds"]:.0f} s on CPU

Teacher-forced exact match on the held-out set measured by the training script (torch, bf16
weights; every reply token and the EOS is the argmax, i.e. greedy decoding reproduces the
reply exactly):

| category | examples | exact match |
|---|---|---|
{heldout}

## Measured with mlx_lm

{CARD_MARK_START}
_Not measured yet: run `.venv/bin/python examples/models/measure_tiny_tool.py --update-card`._
{CARD_MARK_END}
"""
    (out / "README.md").write_text(card)


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=384)
    ap.add_argument("--untied", action="store_true", help="separate lm_head (default: tied)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--eval-n", type=int, default=100, help="held-out examples per category")
    ap.add_argument("--no-save", action="store_true", help="train and report only")
    ap.add_argument("--checkpoints", type=Path, default=None, help="save fp32 here at each eval")
    ap.add_argument("--init", type=Path, default=None, help="continue from this model folder")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    merges = data.learn_merges(data.merge_corpus())
    tok = data.build_tokenizer(merges)
    enc = Encoder(tok)
    print(
        f"vocab {len(tok)} ({len(merges)} merges); system blocks: tools "
        f"{len(enc.prefix[True])} tokens, none {len(enc.prefix[False])}",
        flush=True,
    )
    held = data.heldout_set(args.eval_n)
    for exs in held.values():
        for e in exs[:20]:
            enc.split(e, check=True)
    stream = data.Sampler(args.seed, "train").mixed(data.TRAIN_MIX)
    for _ in range(200):
        enc.split(next(stream), check=True)

    config = build_config(args, len(tok), tok)
    if args.init is not None:
        model = LlamaForCausalLM.from_pretrained(args.init).float()
    else:
        model = LlamaForCausalLM(config).float()
    model.config._attn_implementation = "sdpa"
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params:,}", flush=True)

    decay = [p for _, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for _, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": args.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=args.lr,
        betas=(0.9, 0.98),
        eps=1e-8,
    )

    def eval_line() -> str:
        accs = {cat: exact_match(model, enc, exs) for cat, exs in held.items()}
        return " ".join(f"{c} {a:.3f}" for c, a in accs.items())

    train_batches = batches(stream, enc, args.batch_size, random.Random(args.seed + 1))
    ema = 0.0
    t0 = time.perf_counter()
    model.train()
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, args.warmup, 0.02)
        total = torch.zeros(())
        count = torch.zeros(())
        for tools, rows in next(train_batches):
            s, n = group_loss(model, enc.prefix[tools], rows, enc.eos)
            total, count = total + s, count + n
        loss = total / count
        ema = loss.item() if step == 0 else 0.98 * ema + 0.02 * loss.item()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % 50 == 0 or step == 0:
            dt = time.perf_counter() - t0
            msg = f"step {step + 1:5d} loss {loss.item():.4f} avg {ema:.4f} ({dt:.0f} s)"
            if (step + 1) % args.eval_every == 0:
                msg += " | held-out " + eval_line()
                if args.checkpoints is not None:
                    model.save_pretrained(args.checkpoints / f"step{step + 1}")
            print(msg, flush=True)
    train_seconds = time.perf_counter() - t0
    print(f"training took {train_seconds:.1f} s", flush=True)

    model = model.to(torch.bfloat16)
    heldout = {cat: (len(exs), exact_match(model, enc, exs)) for cat, exs in held.items()}
    print("bf16 held-out " + " ".join(f"{c} {a:.3f}" for c, (_, a) in heldout.items()))
    if args.no_save:
        return
    import transformers

    save(model, tok, args.out)
    added = [*data.TEMPLATE_TOKENS]
    info = {
        "shape": f"{args.hidden} / {args.layers} / {args.hidden // 32}",
        "vocab": f"{len(tok)} (256 bytes, {len(merges)} merges, "
        f"{len(data.TEMPLATE_TOKENS) + len(data.FIXED_STRINGS)} added tokens)",
        "tied": "no" if args.untied else "yes (lm_head = embed_tokens: copying a token is easy)",
        "hidden": args.hidden,
        "layers": args.layers,
        "heads": args.hidden // 32,
        "intermediate": args.intermediate,
        "vocab_size": len(tok),
        "n_merges": len(merges),
        "n_added": len(data.TEMPLATE_TOKENS) + len(data.FIXED_STRINGS),
        "added_ids": ", ".join(f"`{t}` {tok.convert_tokens_to_ids(t)}" for t in added)
        + ", the default system prompt, tools preamble, tools postamble "
        + ", ".join(str(tok.convert_tokens_to_ids(t)) for t in data.FIXED_STRINGS[:3])
        + ", the tools `add`, `get_weather`, `get_time`, `get_date` "
        + ", ".join(str(tok.convert_tokens_to_ids(t)) for t in data.TOOL_STRINGS),
        "n_params": n_params,
        "weights_bytes": (args.out / "model.safetensors").stat().st_size,
        "mix": ", ".join(f"{c} {w:.0%}" for c, w in data.TRAIN_MIX.items()),
        "lr": args.lr,
        "weight_decay": args.weight_decay,
        "warmup": args.warmup,
        "batch_size": args.batch_size,
        "steps": args.steps,
        "seed": args.seed,
        "threads": args.threads,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "train_seconds": train_seconds,
        "heldout_torch": heldout,
    }
    write_card(args.out, info)
    (args.out / "training.json").write_text(
        json.dumps({k: v for k, v in info.items() if k != "added_ids"}, indent=2) + "\n"
    )
    print(f"saved to {args.out}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
