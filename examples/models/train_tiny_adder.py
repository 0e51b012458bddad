"""Train the tiny 2-digit adder used as the committed test model (``tiny-adder/``).

The model is a 2-layer ``LlamaForCausalLM`` (hidden 128, 4 heads) trained from scratch on
``"a+b=c"`` for every ``a, b`` in ``0..99`` (written as plain decimal, e.g. ``"37+48=85"``).
Its answers are right or wrong, which makes it useful for answer-flip checks between a
bf16 baseline and its quantizations.

Tokenizer: a byte-level BPE (``tokenizers`` library) with *no merges*. Vocabulary:
``<unk>`` = 0, ``<s>`` = 1, ``</s>`` = 2, then the 256 byte-level symbols in byte order,
so byte ``b`` has id ``b + 3`` (digit ``"0"`` = 51, ``"9"`` = 60, ``"+"`` = 46, ``"="`` = 64).
Any text can be encoded, one token per byte.

Training sequence: ``<s>`` + ``"37+48="`` + ``"85"`` + ``</s>``; the loss is only on the
answer digits and the EOS token. 15 % of the 10,000 pairs are held out.

This script needs torch, so it runs in its own venv (never in the dev venv)::

    python3 -m venv /root/.cache/infercheck-train-venv
    /root/.cache/infercheck-train-venv/bin/pip install torch==2.13.0 transformers \\
        tokenizers safetensors numpy
    /root/.cache/infercheck-train-venv/bin/python examples/models/train_tiny_adder.py

CI never runs it: the trained weights are committed. After training, refresh the mlx_lm
numbers in the model card with ``.venv/bin/python examples/models/measure_tiny_adder.py
--update-card`` (the dev venv, which has mlx_lm).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from pathlib import Path

import numpy as np
import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "tiny-adder"

UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
N_SPECIAL = 3
VOCAB_SIZE = N_SPECIAL + 256
MAX_NEW_TOKENS = 4  # up to 3 answer digits + EOS
SEQ_LEN = 12  # longest: <s> 99+99= 198 </s> = 11 tokens, padded to 12

CARD_MARK_START = "<!-- mlx-metrics:start -->"
CARD_MARK_END = "<!-- mlx-metrics:end -->"


# --------------------------------------------------------------------------- tokenizer


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable-unicode mapping used by the ByteLevel pre-tokenizer."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE with no merges: specials 0..2, then byte ``b`` -> id ``b + 3``."""
    b2u = bytes_to_unicode()
    assert set(b2u.values()) == set(pre_tokenizers.ByteLevel.alphabet())
    vocab = {"<unk>": UNK_ID, "<s>": BOS_ID, "</s>": EOS_ID}
    for b in range(256):
        vocab[b2u[b]] = N_SPECIAL + b
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=64,
    )
    # Sanity: one token per byte, ids = byte + 3, no BOS added implicitly.
    assert fast.encode("37+48=", add_special_tokens=True) == [N_SPECIAL + c for c in b"37+48="]
    assert fast.convert_tokens_to_ids(["<unk>", "<s>", "</s>"]) == [0, 1, 2]
    return fast


def encode_text(text: str) -> list[int]:
    """Token ids of ``text`` without specials (one per UTF-8 byte)."""
    return [N_SPECIAL + c for c in text.encode("utf-8")]


def prompt_ids(a: int, b: int) -> list[int]:
    """``<s>`` + ``"a+b="``."""
    return [BOS_ID, *encode_text(f"{a}+{b}=")]


# --------------------------------------------------------------------------- data


def all_pairs() -> list[tuple[int, int]]:
    return [(a, b) for a in range(100) for b in range(100)]


def split_pairs(
    seed: int, holdout_frac: float
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Deterministic train / held-out split of the 10,000 pairs."""
    pairs = all_pairs()
    perm = np.random.default_rng(seed).permutation(len(pairs))
    n_hold = round(holdout_frac * len(pairs))
    held = sorted(pairs[i] for i in perm[:n_hold])
    train = sorted(pairs[i] for i in perm[n_hold:])
    return train, held


def make_tensors(pairs: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Input ids (right-padded with EOS) and a mask marking answer + EOS target positions.

    ``mask[i, t]`` is 1 when token ``t`` of row ``i`` is a supervised target (predicted
    from position ``t - 1``).
    """
    ids = torch.full((len(pairs), SEQ_LEN), EOS_ID, dtype=torch.long)
    mask = torch.zeros((len(pairs), SEQ_LEN), dtype=torch.float32)
    for i, (a, b) in enumerate(pairs):
        p = prompt_ids(a, b)
        ans = [*encode_text(str(a + b)), EOS_ID]
        seq = p + ans
        ids[i, : len(seq)] = torch.tensor(seq)
        mask[i, len(p) : len(seq)] = 1.0
    return ids, mask


# --------------------------------------------------------------------------- model


def build_config(intermediate_size: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=intermediate_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=32,
        hidden_act="silu",
        max_position_embeddings=64,
        rms_norm_eps=1e-5,
        initializer_range=0.02,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=None,
        attention_bias=False,
        mlp_bias=False,
        use_cache=True,
        architectures=["LlamaForCausalLM"],
    )


@torch.no_grad()
def greedy_answers(
    model: LlamaForCausalLM, pairs: list[tuple[int, int]], batch: int = 512
) -> list[str | None]:
    """Greedy answers (text before EOS; None when no EOS within ``MAX_NEW_TOKENS``)."""
    model.eval()
    out: list[str | None] = [None] * len(pairs)
    by_len: dict[int, list[int]] = {}
    for i, (a, b) in enumerate(pairs):
        by_len.setdefault(len(prompt_ids(a, b)), []).append(i)
    for idxs in by_len.values():
        for s in range(0, len(idxs), batch):
            chunk = idxs[s : s + batch]
            x = torch.tensor([prompt_ids(*pairs[i]) for i in chunk])
            gen = []
            for _ in range(MAX_NEW_TOKENS):
                nxt = model(input_ids=x).logits[:, -1].float().argmax(-1)
                gen.append(nxt)
                x = torch.cat([x, nxt[:, None]], dim=1)
            g = torch.stack(gen, dim=1).tolist()
            for i, row in zip(chunk, g, strict=True):
                if EOS_ID in row:
                    body = row[: row.index(EOS_ID)]
                    if all(t >= N_SPECIAL for t in body):
                        out[i] = bytes(t - N_SPECIAL for t in body).decode("utf-8", "replace")
    return out


def accuracy(model: LlamaForCausalLM, pairs: list[tuple[int, int]]) -> float:
    answers = greedy_answers(model, pairs)
    ok = sum(ans == str(a + b) for ans, (a, b) in zip(answers, pairs, strict=True))
    return ok / len(pairs)


def lr_at(step: int, total: int, peak: float, warmup: int, final_frac: float) -> float:
    """Linear warmup, then cosine decay to ``final_frac * peak``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return peak * (final_frac + (1 - final_frac) * 0.5 * (1 + math.cos(math.pi * t)))


# --------------------------------------------------------------------------- outputs


def write_card(out: Path, info: dict) -> None:
    """Model card. The mlx_lm section is filled by ``measure_tiny_adder.py --update-card``."""
    card = f"""# tiny-adder

A tiny `LlamaForCausalLM` trained from scratch (CPU, torch, fixed seed) to do 2-digit
addition: given `<s>37+48=` it should answer `85</s>`. Its answers can be right or wrong,
so it is used by pytest-infercheck's tests and demos to check answer flips and KL divergence
between this bf16 baseline and quantized variants (see `../make_models.py`).

Not a language model: anything other than the `<s>a+b=` prompt format is out of
distribution. There is no chat template.

## Architecture

| field | value |
|---|---|
| architecture | `LlamaForCausalLM` (`model_type: llama`) |
| hidden size / layers / heads | 128 / 2 / 4 (head dim 32, no GQA) |
| intermediate size | {info["intermediate_size"]} (SwiGLU) |
| vocab | 259 (3 specials + 256 bytes) |
| max positions | 64, default RoPE (theta 10000) |
| tied embeddings | no |
| parameters | {info["n_params"]:,} |
| weights | bfloat16, `model.safetensors` ({info["weights_bytes"]:,} bytes) |

## Tokenizer

Byte-level BPE (`tokenizers`), **no merges**, ByteLevel pre-tokenizer
(`add_prefix_space=False`, `use_regex=True`, i.e. GPT-2 regex), ByteLevel decoder.
Ids: `<unk>`=0, `<s>`=1 (BOS), `</s>`=2 (EOS), then byte `b` -> id `b + 3`
(`"0"`..`"9"` -> 51..60, `"+"` -> 46, `"="` -> 64). The tokenizer does not add BOS by
itself: prompts are `[1] + [b + 3 for b in "37+48=".encode()]`.

## Training

```
/root/.cache/infercheck-train-venv/bin/python examples/models/train_tiny_adder.py
```

- data: all 10,000 pairs `a, b in 0..99`; {info["n_heldout"]} pairs ({info["holdout_frac"]:.0%})
  held out by a seeded permutation (seed {info["seed"]}); loss only on answer digits + EOS
- sequence: `<s>` + `a+b=` + `c` + `</s>`
- optimizer: AdamW, peak lr {info["lr"]}, weight decay {info["weight_decay"]},
  {info["warmup"]} warmup steps then cosine decay, batch {info["batch_size"]},
  {info["steps"]} steps, fp32 master weights, saved as bf16
- seed {info["seed"]}, `torch.use_deterministic_algorithms(True)`, {info["threads"]} torch threads,
  torch {info["torch_version"]}, transformers {info["transformers_version"]}
- wall time: {info["train_seconds"]:.0f} s on CPU

Accuracy measured by the training script (torch, greedy, max 4 new tokens, bf16 weights):

| split | exact-match accuracy |
|---|---|
| held-out ({info["n_heldout"]} pairs) | {info["acc_heldout_bf16"]:.4f} |
| all 10,000 pairs | {info["acc_all_bf16"]:.4f} |

## Measured with mlx_lm

{CARD_MARK_START}
_Not measured yet: run `.venv/bin/python examples/models/measure_tiny_adder.py --update-card`._
{CARD_MARK_END}
"""
    (out / "README.md").write_text(card)


def save(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in ("model.safetensors", "config.json", "generation_config.json"):
        (out / name).unlink(missing_ok=True)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)

    # transformers 5 writes "dtype" and "rope_parameters"; older readers (mlx_lm's convert,
    # llama.cpp, transformers 4) look at "torch_dtype" / "rope_theta".
    cfg = json.loads((out / "config.json").read_text())
    cfg["architectures"] = ["LlamaForCausalLM"]
    cfg["model_type"] = "llama"
    cfg["torch_dtype"] = "bfloat16"
    cfg["dtype"] = "bfloat16"
    cfg["rope_theta"] = 10000.0
    cfg["bos_token_id"] = BOS_ID
    cfg["eos_token_id"] = EOS_ID
    (out / "config.json").write_text(json.dumps(dict(sorted(cfg.items())), indent=2) + "\n")

    # Plain fast-tokenizer class name so transformers 4.x can read it too, and no template.
    tcfg = json.loads((out / "tokenizer_config.json").read_text())
    tcfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    tcfg.pop("chat_template", None)
    (out / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2, sort_keys=True) + "\n")


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--intermediate-size", type=int, default=256)
    ap.add_argument("--holdout-frac", type=float, default=0.15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--no-save", action="store_true", help="train and report only")
    args = ap.parse_args(argv)

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    train_pairs, held_pairs = split_pairs(args.seed, args.holdout_frac)
    train_ids, train_mask = make_tensors(train_pairs)
    print(f"train pairs {len(train_pairs)}, held-out pairs {len(held_pairs)}")

    config = build_config(args.intermediate_size)
    model = LlamaForCausalLM(config).float()
    model.config._attn_implementation = "sdpa"
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params:,}")

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": args.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=args.lr,
        betas=(0.9, 0.98),
        eps=1e-8,
    )
    gen = torch.Generator().manual_seed(args.seed)

    t0 = time.perf_counter()
    for step in range(args.steps):
        model.train()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, args.warmup, 0.02)
        idx = torch.randint(0, len(train_pairs), (args.batch_size,), generator=gen)
        x, m = train_ids[idx], train_mask[idx]
        logits = model(input_ids=x).logits[:, :-1].float()
        tgt, tmask = x[:, 1:], m[:, 1:]
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="none"
        )
        loss = (nll * tmask.reshape(-1)).sum() / tmask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % args.eval_every == 0 or step == 0:
            msg = f"step {step + 1:5d} loss {loss.item():.4f} ({time.perf_counter() - t0:.0f} s)"
            if (step + 1) % args.eval_every == 0:
                msg += f" held-out acc {accuracy(model, held_pairs):.4f}"
            print(msg, flush=True)
    train_seconds = time.perf_counter() - t0
    print(f"training took {train_seconds:.1f} s")

    acc_held_fp32 = accuracy(model, held_pairs)
    model = model.to(torch.bfloat16)
    acc_held = accuracy(model, held_pairs)
    acc_all = accuracy(model, all_pairs())
    print(f"held-out accuracy fp32 {acc_held_fp32:.4f}, bf16 {acc_held:.4f}")
    print(f"all-pairs accuracy bf16 {acc_all:.4f}")

    if args.no_save:
        return
    import transformers

    tokenizer = build_tokenizer()
    save(model, tokenizer, args.out)
    info = {
        "intermediate_size": args.intermediate_size,
        "n_params": n_params,
        "weights_bytes": (args.out / "model.safetensors").stat().st_size,
        "n_heldout": len(held_pairs),
        "holdout_frac": args.holdout_frac,
        "seed": args.seed,
        "lr": args.lr,
        "weight_decay": args.weight_decay,
        "warmup": args.warmup,
        "batch_size": args.batch_size,
        "steps": args.steps,
        "threads": args.threads,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "train_seconds": train_seconds,
        "acc_heldout_bf16": acc_held,
        "acc_all_bf16": acc_all,
    }
    write_card(args.out, info)
    (args.out / "heldout_pairs.json").write_text(json.dumps([list(p) for p in held_pairs]) + "\n")
    print(f"saved to {args.out}")


if __name__ == "__main__":
    main()
