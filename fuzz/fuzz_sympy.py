"""Fuzz ``mentored.Divergence.from_sympy`` with random compositions of Abs, Max, Piecewise, exp, log and powers.

Every call must return a Divergence or refuse with a ValueError (a SymbolicTimeoutError included)
within the time limit; anything else, or a call that runs past the limit plus a margin, is a failure.
Seeded and run by hand (not part of the test suite; tests/test_adversarial.py holds a slice)::

    python3 fuzz/fuzz_sympy.py --count 2000 --seed 0 --timeout 5

Prints the counts (accepted / refused / time-limit refusals / other exceptions), the slowest calls
and the maximum wall time. Each expression is shifted so that f(1) = 0 (most of the time) and
usually given a convex part, so that both acceptances and refusals occur.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import warnings

import numpy as np
import sympy as sp

T = sp.Symbol("t", positive=True)


def random_expr(rng: np.random.Generator, depth: int = 0) -> sp.Expr:
    """A random expression in T from Abs, Max, Piecewise, exp, log, powers, sums and products."""
    leaves = [T, T - 1, T - 2, T + 1, sp.Rational(int(rng.integers(1, 5)), int(rng.integers(1, 4))) * T]
    if depth >= 2 or rng.random() < 0.3:
        return leaves[int(rng.integers(len(leaves)))]
    a = random_expr(rng, depth + 1)
    kind = int(rng.integers(9))
    if kind == 0:
        return sp.Abs(a - sp.Rational(int(rng.integers(0, 4)), 2))
    if kind == 1:
        return sp.Max(a, random_expr(rng, depth + 1))
    if kind == 2:
        c = sp.Rational(int(rng.integers(1, 6)), 2)
        return sp.Piecewise((a, T >= c), (random_expr(rng, depth + 1), True))
    if kind == 3:
        return sp.exp(a / int(rng.integers(1, 4)))
    if kind == 4:
        return sp.log(a) if rng.random() < 0.5 else a * sp.log(a)
    if kind == 5:
        return a ** sp.Rational(int(rng.choice([-2, -1, 1, 2, 3, 4])), int(rng.choice([1, 2, 3])))
    if kind == 6:
        return a + random_expr(rng, depth + 1)
    if kind == 7:
        return a * random_expr(rng, depth + 1)
    return (a - 1) ** 2


def generator(rng: np.random.Generator) -> sp.Expr:
    """A candidate f: a random part, often plus a convex part, shifted (usually) so that f(1) = 0."""
    e = random_expr(rng)
    if rng.random() < 0.6:
        e = e + int(rng.integers(1, 4)) * (T - 1) ** 2
    if rng.random() < 0.9:
        try:
            at1 = e.subs(T, 1)
        except (ValueError, TypeError):  # e.g. Max(zoo, ·): left as it is, for from_sympy to refuse
            at1 = None
        if at1 is not None and at1.is_finite:
            e = e - at1
    return e


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--margin", type=float, default=1.0, help="seconds past the limit still counted as in time")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)

    import mentored
    from mentored.divergences import symbolic
    from mentored.divergences.symbolic import SymbolicTimeoutError

    rng = np.random.default_rng(args.seed)
    counts = collections.Counter()
    slowest = []
    failures = []
    for i in range(args.count):
        f = generator(rng)
        # The limit counts from a ready analysis process: after a refusal for time the next call
        # starts a fresh one (about a second), which is not the analysis's time.
        symbolic._release(symbolic._acquire())
        start = time.monotonic()
        detail = ""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                d = mentored.Divergence.from_sympy(f, T, timeout=args.timeout)
                outcome = f"accepted ({d.convexity_check})"
            except SymbolicTimeoutError as exc:
                outcome = "time-limit refusal"
                detail = str(exc)
            except ValueError as exc:
                outcome = "refused"
                detail = str(exc)
            except Exception as exc:  # noqa: BLE001 - a failure of the fuzz target
                outcome = "other exception"
                failures.append((str(f), f"{type(exc).__name__}: {exc}"))
        wall = time.monotonic() - start
        counts[outcome] += 1
        slowest.append((wall, str(f), outcome))
        if wall > args.timeout + args.margin:
            failures.append((str(f), f"ran {wall:.2f} s, past the limit"))
        if args.verbose:
            print(f"{i:5d} {wall:6.2f}s {outcome:28s} {f}", flush=True)
            if outcome == "time-limit refusal":
                print(f"      {detail}", flush=True)
    slowest.sort(reverse=True)
    print(f"expressions: {args.count} (seed {args.seed}, timeout {args.timeout:g} s)")
    for k in sorted(counts):
        print(f"  {k:28s} {counts[k]}")
    print(f"max wall time: {slowest[0][0]:.3f} s; median {np.median([w for w, _, _ in slowest]):.3f} s")
    print("slowest:")
    for w, f, o in slowest[:5]:
        print(f"  {w:6.2f} s  {o:28s} {f}")
    if failures:
        print(f"FAILURES: {len(failures)}")
        for f, why in failures[:20]:
            print(f"  {f}: {why}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
