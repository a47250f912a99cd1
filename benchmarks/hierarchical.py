"""Accepted drafts per round at ε = 0 (lossless): token-by-token, block verification, and Hierarchical
Speculative Decoding (HSD; Zhou et al., "Overcoming Joint Intractability with Lossless Hierarchical
Speculative Decoding", ICLR 2026, arXiv:2601.05724) on chains of k = 4 drafts.

    python3 benchmarks/hierarchical.py [--seeds 3] [--chains 16] [--rounds 1500]

1. LLM-like rows: a chain is k positions, each with its own (p_j, q_j) from
   ``mentored.check.testing.llm_like`` over V = 1,024 tokens (logit scale uniform in [3, 7] per position,
   drafter logits the target's plus N(0, 0.7²) noise, as benchmarks/block.py), plus a bonus row; fresh rows
   per position, not depending on the drafted prefix. Per chain, ``--rounds`` rounds: drafts x_j ~ q_j,
   uniforms (k, 2) per round, the SAME drafts and uniforms for every rule. Token and block go through
   ``mentored.verify.serving.rejection_sample`` (``method="token"``/``"block"``, budget 0); HSD through
   ``mentored.check.hierarchical.hierarchical_verify_batch``, in the lossless (capped) reading and, for
   reference only, as the authors' released code states it (uncapped whole-draft acceptance: not lossless).
   Reported: per seed the mean accepted drafts per round over its chains and rounds; over seeds the mean,
   the min–max of the seed means and the Monte Carlo standard error over all rounds; and the mean paired
   difference HSD − block per round with its standard error.
2. The binary example p = (1/3, 2/3), q = (2/3, 1/3) at every position, k = 2: exact values (rational
   arithmetic, ``mentored.check.hierarchical.exact_accepted`` for HSD; 10/9 and 11/9 for token and block,
   Sun et al.) and the same Monte Carlo.
3. How far the released rule is from lossless: the exact total-variation distance between its emitted
   stream (completed by the target to k + 1 tokens) and the target chain, by enumeration
   (``exact_law``) on small LLM-like chains (V = 8, k = 3, rows as in 1, one chain per seed); the capped
   rule's distance is reported alongside (rounding only).

Writes benchmarks/hierarchical_results.json.
"""

from __future__ import annotations

import argparse
import json
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

from mentored.check.hierarchical import exact_accepted, exact_law, hierarchical_verify_batch
from mentored.check.testing import llm_like
from mentored.verify.serving import rejection_sample

ROOT = Path(__file__).resolve().parent.parent
K, V = 4, 1024
RULES = ("token", "block", "hsd", "hsd_released")


def chain_rows(rng, k, V):
    """k + 1 (p, q) rows, the last the bonus position's target row."""
    rows = [llm_like(rng, V, float(rng.uniform(3.0, 7.0)), 0.7) for _ in range(k + 1)]
    return np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows[:k]])


def rounds(p, q, R, rng):
    """R rounds on one chain (rows p (k+1, V), q (k, V)); accepted drafts per round for every rule."""
    k, V = q.shape
    x = np.stack([rng.choice(V, size=R, p=q[j]) for j in range(k)], axis=1)  # (R, k)
    u = rng.random((R, k, 2))
    bonus = rng.choice(V, size=R, p=p[k])
    flat_q = np.broadcast_to(q, (R, k, V)).reshape(-1, V)
    flat_p = np.broadcast_to(p[:k], (R, k, V)).reshape(-1, V)
    out = {}
    for method in ("token", "block"):
        emitted = rejection_sample(x.ravel(), [k] * R, flat_q, flat_p, bonus, uniforms=u.reshape(-1, 2), method=method)
        out[method] = (emitted >= 0).sum(axis=1) - 1  # emitted = accepted drafts + one token
    P = np.broadcast_to(p, (R, k + 1, V))
    Q = np.broadcast_to(q, (R, k, V))
    out["hsd"] = hierarchical_verify_batch(P, Q, x, u)[1]
    out["hsd_released"] = hierarchical_verify_batch(P, Q, x, u, variant="released")[1]
    return out


def summarise(per_seed):
    """per_seed: list of {rule: array of accepted per round}."""
    res = {}
    for rule in RULES:
        means = [float(np.mean(s[rule])) for s in per_seed]
        allv = np.concatenate([s[rule] for s in per_seed])
        res[rule] = {"mean": float(allv.mean()), "seed_means": means, "min": min(means), "max": max(means),
                     "se": float(allv.std(ddof=1) / np.sqrt(allv.size)), "rounds": int(allv.size)}
    for rule in ("hsd", "hsd_released", "token"):
        d = np.concatenate([s[rule] - s["block"] for s in per_seed]).astype(float)
        res[f"{rule}_minus_block"] = {"mean": float(d.mean()), "se": float(d.std(ddof=1) / np.sqrt(d.size)),
                                      "identical_rounds": float(np.mean(d == 0))}
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--chains", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=1500)
    a = ap.parse_args()
    t0 = time.time()
    per_seed = []
    for seed in range(a.seeds):
        rng = np.random.default_rng(1000 + seed)
        acc = {r: [] for r in RULES}
        for _ in range(a.chains):
            p, q = chain_rows(rng, K, V)
            for r, v in rounds(p, q, a.rounds, rng).items():
                acc[r].append(v)
        per_seed.append({r: np.concatenate(v) for r, v in acc.items()})
    llm = summarise(per_seed)

    bp, bq = np.array([[1 / 3, 2 / 3]] * 3), np.array([[2 / 3, 1 / 3]] * 2)
    F = [Fraction(1, 3), Fraction(2, 3)], [Fraction(2, 3), Fraction(1, 3)]
    exact = {"token": "10/9", "block": "11/9",
             "hsd": str(exact_accepted(lambda s: F[0], lambda s: F[1], 2, 2, one=Fraction(1))),
             "hsd_released": str(exact_accepted(lambda s: F[0], lambda s: F[1], 2, 2, variant="released", one=Fraction(1)))}
    per_seed_b = []
    for seed in range(a.seeds):
        rng = np.random.default_rng(2000 + seed)
        per_seed_b.append(rounds(bp, bq, a.chains * a.rounds, rng))
    binary = summarise(per_seed_b)

    tv = {"capped": [], "released": []}
    for seed in range(a.seeds):
        p, q = chain_rows(np.random.default_rng(3000 + seed), 3, 8)
        pf, qf = (lambda s: p[len(s)]), (lambda s: q[len(s)])
        target = {}
        for y in exact_law(pf, qf, 8, 3, variant="capped"):
            target[y] = float(np.prod([p[j][y[j]] for j in range(4)]))
        for variant in tv:
            law = exact_law(pf, qf, 8, 3, variant=variant)
            tv[variant].append(0.5 * sum(abs(law.get(y, 0.0) - target[y]) for y in target))

    res = {"command": "python3 benchmarks/hierarchical.py " + f"--seeds {a.seeds} --chains {a.chains} --rounds {a.rounds}",
           "k": K, "V": V, "budget": 0.0, "llm_like": llm, "binary": {"exact": exact, "monte_carlo": binary},
           "tv_to_target_V8_k3": tv,
           "seconds": round(time.time() - t0, 1)}
    (ROOT / "benchmarks" / "hierarchical_results.json").write_text(json.dumps(res, indent=1) + "\n")
    for name, table in (("llm_like V=1024 k=4", llm), ("binary k=2", binary)):
        print(name)
        for rule in RULES:
            t = table[rule]
            print(f"  {rule:13s} {t['mean']:.4f} ± {t['se']:.4f}  seeds [{t['min']:.4f}, {t['max']:.4f}]")
        for rule in ("hsd", "hsd_released", "token"):
            t = table[f"{rule}_minus_block"]
            print(f"  {rule} − block  {t['mean']:+.4f} ± {t['se']:.4f}  identical rounds {t['identical_rounds']:.4f}")
    print("exact TV to the target chain (V=8, k=3), per seed:", {v: [f"{x:.2e}" for x in t] for v, t in tv.items()})
    print("binary exact", exact, f"({res['seconds']} s)")


if __name__ == "__main__":
    main()
