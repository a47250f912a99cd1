r"""Train the shipped character-level transformer pair: ``python -m mentored.integrations.train``.

Both models are GPT-2 causal LMs built from a config (no download), trained on the demo's text and
split (:func:`mentored.demo.textlm.demo_models` with seed 0: CPython's ``pydoc_data.topics`` and the
docstrings of a fixed list of standard-library modules, documents shuffled and split 80/10/10) with
the demo's :class:`~mentored.demo.textlm.CharTokenizer` (105 characters, id 0 the unknown character).

* target :math:`p`: 4 layers, width 160, 4 heads, context 256, 900 steps of 16 windows;
* drafter :math:`q`: 2 layers, width 48, 2 heads, context 256, 2,000 steps (about 17x fewer
  FLOPs per token, see :func:`flops_per_token`).

Training is seeded and runs on one CPU thread (``torch.set_num_threads(1)``): AdamW, linear warm-up
then cosine decay, batches of random windows from the training split. The weights are saved as
float16 safetensors, with ``SHA256SUMS``, the vocabulary, the training curves (``curves.csv``) and
the held-out bits per character (``results.json``, measured with the float16 weights as shipped).
On the same machine and torch version a rerun gives the same weights byte for byte. Each model
reseeds before it trains, so ``--only target`` and ``--only drafter`` in two processes run the same
computation as one sequential run; the shipped pair was trained that way. Other CPUs or torch versions round differently, so their
weights differ slightly; that spread has not been measured.

``python -m mentored.integrations.train --out DIR`` writes elsewhere (the default is the package's
``mentored/models``); ``--target-steps`` / ``--drafter-steps`` shorten a run.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import math
import os
import time
from pathlib import Path

import numpy as np

from mentored.integrations.weights import MODELS_DIR, write_checksums  # absolute: this module also runs as mentored.train

__all__ = ["main", "train_one", "bits_per_char", "flops_per_token", "gpt2_config"]

CONTEXT = 256

# name -> (layers, width, heads, steps, batch, peak learning rate)
SIZES = {
    "target": dict(n_layer=4, n_embd=160, n_head=4, steps=900, batch=16, lr=2e-3),
    "drafter": dict(n_layer=2, n_embd=48, n_head=2, steps=2000, batch=16, lr=3e-3),
}


def gpt2_config(V: int, n_layer: int, n_embd: int, n_head: int, dropout: float = 0.0):
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=V, n_positions=CONTEXT, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
        resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
        bos_token_id=None, eos_token_id=None, pad_token_id=0, tie_word_embeddings=True,
    )


def flops_per_token(config, context: int = CONTEXT // 2) -> float:
    """Forward FLOPs per token (2 per multiply-add): the weight matmuls, the LM head and attention
    over ``context`` earlier positions (the mean over a full window by default)."""
    d, L, V = config.n_embd, config.n_layer, config.vocab_size
    inner = config.n_inner or 4 * d
    per_layer = 2 * (4 * d * d + 2 * d * inner) + 2 * 2 * context * d  # qkv+proj, MLP, QK^T and AV
    return L * per_layer + 2 * d * V


def _windows(data: np.ndarray, starts: np.ndarray, length: int):
    import torch

    idx = starts[:, None] + np.arange(length)[None, :]
    return torch.from_numpy(data[idx])


@functools.lru_cache(maxsize=1)
def _splits():
    from .corpus import splits

    s = splits(0)
    return s.tokenizer, s.train, s.valid, s.test


def bits_per_char(model, ids: np.ndarray, n: int | None = 20000, context: int = CONTEXT, stride: int = CONTEXT // 2) -> float:
    """Mean :math:`-\\log_2 p(x_i \\mid x_{<i})` over ``ids[:n]``, each position seen with between
    ``context - stride`` and ``context`` earlier characters (the first window: all of them)."""
    import torch

    ids = np.asarray(ids[:n] if n else ids, dtype=np.int64)
    total, count = 0.0, 0
    with torch.no_grad():
        start = 0
        while True:
            lo = max(0, start + stride - context) if start else 0
            hi = min(ids.size, start + stride) if start else min(ids.size, context)
            x = torch.from_numpy(ids[lo:hi])[None]
            logp = torch.log_softmax(model(input_ids=x).logits.double(), dim=-1)[0]
            first = start - lo if start else 0
            # position i (i >= 1) is predicted by logits at i - 1; position 0 of the text has no context: skip it
            tgt = x[0, max(first, 1) :]
            lp = logp[max(first, 1) - 1 : -1].gather(1, tgt[:, None])
            total -= float(lp.sum())
            count += tgt.numel()
            if hi >= ids.size:
                break
            start = hi
    return total / count / math.log(2)


def train_one(name: str, *, seed: int = 0, steps: int | None = None, log=print, curve=None):
    import torch
    from transformers import GPT2LMHeadModel

    tok, train, valid, _ = _splits()
    s = dict(SIZES[name])
    steps = s["steps"] if steps is None else steps
    cfg = gpt2_config(tok.V, s["n_layer"], s["n_embd"], s["n_head"])
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(cfg)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}], lr=s["lr"], betas=(0.9, 0.95))
    warm = max(1, steps // 20)
    lr_at = lambda i: s["lr"] * (i + 1) / warm if i < warm else s["lr"] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (i - warm) / max(1, steps - warm))))  # noqa: E731
    rng = np.random.default_rng(seed)
    valid_x = _windows(valid, np.arange(0, 32 * CONTEXT, CONTEXT), CONTEXT)  # 32 fixed windows, 8,192 characters
    t0 = time.perf_counter()
    for i in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(i)
        x = _windows(train, rng.integers(0, train.size - CONTEXT, size=s["batch"]), CONTEXT)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i % 50 == 0 or i == steps - 1:
            model.eval()
            with torch.no_grad():
                vloss = float(model(input_ids=valid_x, labels=valid_x).loss)
            model.train()
            row = dict(model=name, step=i, train_bits=float(loss.detach()) / math.log(2), valid_bits=vloss / math.log(2), seconds=time.perf_counter() - t0)
            if curve is not None:
                curve.append(row)
            log(f"{name} step {i:5d}  train {row['train_bits']:.4f}  valid {row['valid_bits']:.4f} bits/char  {row['seconds']:.0f} s")
    model.eval()
    return model, time.perf_counter() - t0


def save_model(name: str, model, out: Path, *, curve: list, seconds: float) -> dict:
    """``out/name``: float16 safetensors and config, the training curve, and the held-out bits per
    character measured with the float16 weights as shipped."""
    import torch
    from transformers import GPT2LMHeadModel

    _, _, valid, test = _splits()
    (out / name).mkdir(parents=True, exist_ok=True)
    model.to(torch.float16).save_pretrained(out / name, safe_serialization=True)
    (out / name / "generation_config.json").unlink(missing_ok=True)
    os.chmod(out / name / "model.safetensors", 0o644)  # safetensors writes 0600; package data must be readable
    shipped = GPT2LMHeadModel.from_pretrained(out / name, dtype=torch.float32).eval()  # what users load
    result = dict(
        config={k: getattr(shipped.config, k) for k in ("n_layer", "n_embd", "n_head", "n_positions", "vocab_size")},
        parameters=sum(p.numel() for p in shipped.parameters()),
        flops_per_token=flops_per_token(shipped.config),
        train_seconds=seconds,
        test_bits_20000=bits_per_char(shipped, test, 20000),
        valid_bits=bits_per_char(shipped, valid, None),
    )
    with open(out / name / "curve.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(curve[0]))
        w.writeheader()
        for row in curve:
            w.writerow({k: (f"{v:.5f}" if isinstance(v, float) else v) for k, v in row.items()})
    (out / name / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def assemble(out: Path, extra: dict) -> dict:
    """The pair's ``results.json``, ``curves.csv``, ``vocab.json`` and ``SHA256SUMS`` from ``out/target`` and ``out/drafter``."""
    tok = _splits()[0]
    results = dict(extra)
    rows = []
    for name in ("target", "drafter"):
        results[name] = json.loads((out / name / "result.json").read_text())
        with open(out / name / "curve.csv", newline="") as f:
            rows += list(csv.DictReader(f))
    results["flops_ratio"] = results["target"]["flops_per_token"] / results["drafter"]["flops_per_token"]
    (out / "vocab.json").write_text(json.dumps(tok.vocab, ensure_ascii=False))
    with open(out / "curves.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    for name in ("target", "drafter"):
        (out / name / "curve.csv").unlink()
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    write_checksums(out)  # every file: load_pair refuses an unlisted one
    return results


def main(argv=None) -> int:
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--target" in argv or any(a.startswith("--target=") for a in argv):
        pre = argparse.ArgumentParser(add_help=False)
        pre.add_argument("--target", choices=("char", "smollm"), required=True)
        known, rest = pre.parse_known_args(argv)
        if known.target == "smollm":
            from mentored.integrations.train_smollm import main as smollm_main  # absolute: this module also runs as mentored.train

            return smollm_main(rest)
        argv = rest
    import torch

    ap = argparse.ArgumentParser(prog="python -m mentored.integrations.train", description="Train the shipped character-level transformer pair (one CPU thread, seeded).")
    ap.add_argument("--out", type=Path, default=MODELS_DIR, help="output directory (default: the package's mentored/models)")
    ap.add_argument("--target", choices=("char", "smollm"), default="char",
                    help="char: the character-level GPT-2 pair (default); smollm: the drafter for SmolLM2-135M-Instruct (its own options: --target smollm --help)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target-steps", type=int, default=None)
    ap.add_argument("--drafter-steps", type=int, default=None)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: the shipped weights were trained so)")
    ap.add_argument(
        "--only", choices=("target", "drafter"), default=None,
        help="train one model (each is seeded on its own: two processes, one per model, give the weights of one sequential run); "
        "the pair's files are assembled once both are there",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    steps = dict(target=args.target_steps, drafter=args.drafter_steps)
    for name in ("drafter", "target") if args.only is None else (args.only,):
        curve = []
        model, seconds = train_one(name, seed=args.seed, steps=steps[name], curve=curve, log=lambda m: print(m, flush=True))
        r = save_model(name, model, args.out, curve=curve, seconds=seconds)
        print(f"{name}: {r['parameters']:,} parameters, {r['flops_per_token'] / 1e6:.3f} MFLOPs/token, {seconds:.0f} s; "
              f"test bits/char {r['test_bits_20000']:.4f} (first 20,000 characters), valid {r['valid_bits']:.4f}", flush=True)
    if all((args.out / n / "result.json").is_file() and (args.out / n / "curve.csv").is_file() for n in ("target", "drafter")):
        extra = dict(seed=args.seed, threads=args.threads, torch=torch.__version__, transformers=__import__("transformers").__version__, context=CONTEXT)
        results = assemble(args.out, extra)
        print(f"FLOPs ratio target/drafter: {results['flops_ratio']:.1f}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
