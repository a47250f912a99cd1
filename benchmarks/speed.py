"""Speed of the solver against its anchors, measured side by side in one run on the same data.

    python benchmarks/speed.py            # the full table (a few minutes)
    python benchmarks/speed.py --quick    # vocab 32k only

Data: LLM-like rows (softmax of Gaussian logits, the drafter's logits a noisy copy), float32.
Every time is the best of several repeats, in milliseconds, and every ratio is against a baseline
measured in the same process on the same arrays:

- stream: one numpy pass, ``np.minimum(p, q, out=buf)``: the memory floor (single-threaded);
- solver: ``mentored.solve(..., divergence="kl", budget=0.1)``, 1 thread and all threads, and all
  threads writing into a preallocated ``out=`` (what a decoding loop does: no fresh π per call);
- argsort: a numpy solve built on ``np.argsort`` of the ratios (below), the obvious alternative;
- lossless: the standard speculative step (accept/residual sampling) in numpy;
- reference: mentored.check.reference (bisection on the definitions), one row, where it finishes;
- cvxpy: the oracle at n = 1k and 10k, one row;
- torch: a sort-based solve in torch, when torch is installed.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

import mentored
from mentored.check import reference
from mentored.check.testing import llm_like


def cell(x: float, width: int, fmt: str, suffix: str = "") -> str:
    """A table cell; a measurement that was skipped prints as a dash, not as nan."""
    return f"{'—' if x != x else format(x, fmt) + suffix:>{width}}"


def best(fn, repeat=5, budget_s=20.0):
    """Best wall time of ``fn()`` in ms over ``repeat`` runs (fewer if it is slow)."""
    times = []
    start = time.perf_counter()
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        if time.perf_counter() - start > budget_s:
            break
    return 1e3 * min(times)


def rows(batch, n, seed=0):
    rng = np.random.default_rng(seed)
    P = np.empty((batch, n), np.float32)
    Q = np.empty((batch, n), np.float32)
    for b in range(batch):
        p, q = llm_like(rng, n)
        P[b], Q[b] = p, q
    return P, Q


def argsort_solve(P, Q, budget, iters=60):
    """MD(kl, ε) for each row with numpy: sort the ratios, prefix sums, bisection on s.

    Vectorised over rows; the thresholds at s come from searchsorted on the sorted breakpoints,
    and D_kl(π(s)‖p) from prefix sums of p·f(r) (tilted f, as in the core).
    """
    P = P.astype(np.float64)
    Q = Q.astype(np.float64)
    r = Q / P
    order = np.argsort(r, axis=1)
    r = np.take_along_axis(r, order, 1)
    p = np.take_along_axis(P, order, 1)
    q = np.take_along_axis(Q, order, 1)
    f = r * np.log(r) - r + 1.0
    cp = np.concatenate([np.zeros((len(P), 1)), np.cumsum(p, 1)], 1)
    cq = np.concatenate([np.zeros((len(P), 1)), np.cumsum(q, 1)], 1)
    cf = np.concatenate([np.zeros((len(P), 1)), np.cumsum(p * f, 1)], 1)
    rows_ = np.arange(len(P))
    tv = 0.5 * np.abs(P - Q).sum(1)
    below = (r < 1).sum(1)
    # Down at the sorted ratios (lower side) and Up (upper side), for locating the thresholds.
    down = tv[:, None] - (r * cp[:, :-1] - cq[:, :-1])
    up = (cq[:, -1:] - cq[:, 1:]) - r * (cp[:, -1:] - cp[:, 1:])  # ψ(r_j): mass above r_j
    d_up = cq[rows_, -1] - cq[rows_, below] - (cp[rows_, -1] - cp[rows_, below])

    def divergence(s):
        g = tv - s
        k = np.array([np.searchsorted(-down[i, : below[i]], -s[i], side="left") for i in rows_])
        k = np.maximum(k, 1)
        t_lo = (g + cq[rows_, k]) / cp[rows_, k]
        h = np.maximum(d_up - s, 0)
        m = np.array([below[i] + np.searchsorted(-up[i, below[i]:], -h[i], side="left") for i in rows_])
        m = np.minimum(m, P.shape[1] - 1)
        above_p = cp[rows_, -1] - cp[rows_, m]
        above_q = cq[rows_, -1] - cq[rows_, m]
        t_hi = np.where(above_p > 0, (above_q - h) / np.where(above_p > 0, above_p, 1), np.inf)
        fl = t_lo * np.log(t_lo) - t_lo + 1
        fh = np.where(np.isfinite(t_hi), t_hi * np.log(t_hi) - t_hi + 1, 0)
        return cp[rows_, k] * fl + (cf[rows_, m] - cf[rows_, k]) + above_p * fh

    lo, hi = np.zeros(len(P)), np.minimum(tv, d_up)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        ok = divergence(mid) <= budget
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    return 1 - tv + lo


def lossless_step(P, Q, rng):
    """Standard speculative sampling for one drafted token per row, in numpy."""
    u = rng.random((len(P), 2))
    x = np.array([np.searchsorted(np.cumsum(q), v * q.sum()) for q, v in zip(Q, u[:, 0])])
    x = np.minimum(x, P.shape[1] - 1)
    rows_ = np.arange(len(P))
    accept = u[:, 1] * Q[rows_, x] < P[rows_, x]
    residual = np.maximum(P - Q, 0)
    c = np.cumsum(residual, 1)
    y = (c < (u[:, 1] * c[:, -1])[:, None]).sum(1)
    return np.where(accept, x, y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    vocabs = [32768] if args.quick else [32768, 131072, 262144]
    batches = [1, 8, 64]
    threads = os.cpu_count() or 1
    print(f"machine: {platform.machine()}, {threads} cores, {platform.processor() or 'cpu'}; numpy {np.__version__};"
          f" OpenMP in the core: {mentored._core.has_openmp()}")
    print("times in ms (best of repeats); ratios against the stream pass on the same arrays\n")
    header = (
        f"{'vocab':>7} {'batch':>5} {'stream':>8} {'solve 1t':>9} {'solve':>8} {'/stream':>8} {'out=':>8} {'/stream':>8}"
        f" {'argsort':>9} {'/solve':>7} {'/out=':>6} {'lossless':>9} {'/stream':>8}"
    )
    print(header)
    summary = {}
    for n in vocabs:
        for B in batches:
            P, Q = rows(B, n)
            buf = np.empty_like(P)
            out = np.empty_like(P)
            t_stream = best(lambda: np.minimum(P, Q, out=buf), 15)
            t_one = best(lambda: mentored.solve(P, Q, divergence="kl", budget=0.1, threads=1), 7)
            t_all = best(lambda: mentored.solve(P, Q, divergence="kl", budget=0.1), 15)
            t_out = best(lambda: mentored.solve(P, Q, divergence="kl", budget=0.1, out=out), 15)
            t_sort = best(lambda: argsort_solve(P, Q, 0.1), 3) if B <= 8 or n <= 131072 else float("nan")
            rng = np.random.default_rng(1)
            t_lossless = best(lambda: lossless_step(P, Q, rng), 3)
            summary[(n, B)] = (t_stream, t_one, t_all, t_out, t_sort)
            print(
                f"{n:7d} {B:5d} {t_stream:8.2f} {t_one:9.2f} {t_all:8.2f} {t_all / t_stream:7.1f}x {t_out:8.2f}"
                f" {t_out / t_stream:7.1f}x {cell(t_sort, 9, '.1f')} {cell(t_sort / t_all, 6, '.1f', 'x')}"
                f" {cell(t_sort / t_out, 5, '.1f', 'x')} {t_lossless:9.2f} {t_lossless / t_stream:7.1f}x"
            )
    # The argsort solve must agree with the core (it is a second, independent implementation).
    P, Q = rows(4, 32768)
    gap = np.max(np.abs(argsort_solve(P, Q, 0.1) - mentored.solve(P, Q, divergence="kl", budget=0.1).acceptance))
    print(f"\nargsort solve vs core, acceptance: max |diff| = {gap:.1e}")

    print("\nscaling (kl, budget 0.1, float32):")
    P, Q = rows(8, 262144 if not args.quick else 65536)
    small = P[:, : P.shape[1] // 4] / P[:, : P.shape[1] // 4].sum(1, keepdims=True)
    smallq = Q[:, : Q.shape[1] // 4] / Q[:, : Q.shape[1] // 4].sum(1, keepdims=True)
    t_big = best(lambda: mentored.solve(P, Q, divergence="kl", budget=0.1, threads=1))
    t_small = best(lambda: mentored.solve(small.astype(np.float32), smallq.astype(np.float32), divergence="kl", budget=0.1, threads=1))
    print(f"  time(n) / time(n/4), 1 thread: {t_big / t_small:.2f} (4.00 is linear)")
    P1, Q1 = rows(64, 32768)
    t64 = best(lambda: mentored.solve(P1, Q1, divergence="kl", budget=0.1, threads=1))
    t8 = best(lambda: mentored.solve(P1[:8], Q1[:8], divergence="kl", budget=0.1, threads=1))
    print(f"  time(batch 64) / time(batch 8), 1 thread: {t64 / t8:.2f} (8.00 is linear)")
    t2 = best(lambda: mentored.solve(P1, Q1, divergence="kl", budget=0.1, threads=2))
    print(f"  threads 1 -> 2 on 64 x 32768: speed-up {t64 / t2:.2f}x")
    # A sympy generator runs as an expression program in the core (mentored/divergences/program.py): against the
    # nearest built-in (hellinger, f∞ = 1 as well) on the same rows and budget.
    import sympy as sp

    t = sp.Symbol("t", positive=True)
    tri = mentored.Divergence.from_sympy((t - 1) ** 2 / (t + 1), t, name="triangular")
    for nt in (1, threads):
        t_tri = best(lambda: mentored.solve(P1, Q1, divergence=tri, budget=0.1, threads=nt))
        t_hel = best(lambda: mentored.solve(P1, Q1, divergence="hellinger", budget=0.1, threads=nt))
        print(f"  custom triangular / hellinger on 64 x 32768, {nt} thread(s): {t_tri:.1f} / {t_hel:.1f} ms = {t_tri / t_hel:.2f}x")
    query = {}
    for n in (2**10, 2**20):
        p, q = llm_like(np.random.default_rng(2), n)
        path = mentored.MentoredPath(p, q)
        budgets = np.random.default_rng(3).uniform(0, 0.5, 2000)
        path.frontier(budgets[:10], "kl")  # build the kl table once
        query[n] = best(lambda: path.frontier(budgets, "kl")) / len(budgets)
        print(f"  MentoredPath query at n = 2^{int(np.log2(n))}: {1e3 * query[n]:.2f} us")

    if (131072, 64) in summary:
        t_stream, t_one, t_all, t_out, t_sort = summary[(131072, 64)]
        # What an exact solve cannot skip: f at every token the thresholds leave unclipped (D_f
        # needs Σ p f(q/p) over them), here timed alone through the core's vectorised f, spread
        # over all threads as the solver does.
        P, Q = rows(64, 131072)
        sol = mentored.solve(P, Q, divergence="kl", budget=0.1)
        r = Q.astype(np.float64) / P
        middle = r[(r >= sol.t_lo[:, None]) & (r <= sol.t_hi[:, None])]
        t_f = best(lambda: mentored._core.generator_f_array(1, middle), 9) / (os.cpu_count() or 1)
        print("\nratios, from the runs above (64 x 131072 float32, kl, budget 0.1):")
        print(f"  solve / single-threaded stream: {t_all / t_stream:.1f}x ({t_out / t_stream:.1f}x with out=)")
        print(f"  argsort solve / solve: {t_sort / t_all:.1f}x ({t_sort / t_out:.1f}x with out=)")
        print(f"  threads 1 -> 2: {t_one / t_all:.2f}x here, {t64 / t2:.2f}x on 64 x 32768")
        print(f"  MentoredPath query 2^20 / 2^10: {query[2**20] / query[2**10]:.2f}x")
        print(
            f"  floor: f alone at the {middle.size / 64:.0f} unclipped tokens of each row costs {t_f / t_stream:.2f} stream"
            f" passes ({t_f:.2f} ms, shared by {os.cpu_count()} threads); reading p, q to place the thresholds and"
            " writing pi come on top"
        )

    print("\nanchors on one row:")
    for n in (1000, 10000):
        p, q = llm_like(np.random.default_rng(4), n)
        t_core = best(lambda: mentored.solve(p, q, divergence="kl", budget=0.1))
        t_ref = best(lambda: reference.solve(p, q, "kl", 0.1), 1)
        try:
            from mentored.check.oracle import oracle_solve

            t_cvx = best(lambda: oracle_solve(p, q, "kl", 0.1), 1, budget_s=60)
        except ImportError:
            t_cvx = float("nan")
        print(
            f"  n = {n:6d}: core {t_core:.3f} ms, numpy reference {t_ref:.0f} ms ({t_ref / t_core:.0f}x),"
            f" cvxpy {cell(t_cvx, 0, '.0f', ' ms')} ({cell(t_cvx / t_core, 0, '.0f', 'x')})"
        )
    try:
        import torch  # noqa: F401
    except ImportError:
        print("\ntorch: not installed, no torch anchor in this run")
    else:
        from mentored.backends import torch as torch_backend  # type: ignore[attr-defined]

        P, Q = rows(8, 131072)
        tp, tq = torch.from_numpy(P), torch.from_numpy(Q)
        t_torch = best(lambda: torch_backend._solve(tp, tq, divergence="kl", budget=0.1), 3)
        t_core = best(lambda: mentored.solve(P, Q, divergence="kl", budget=0.1))
        print(f"\ntorch sort-based, 8 x 131072: {t_torch:.1f} ms, core {t_core:.1f} ms ({t_torch / t_core:.1f}x)")


if __name__ == "__main__":
    main()
