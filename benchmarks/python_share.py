"""The Python share of an entry point: its time with the compiled core replaced by a stub that returns a
recorded answer at once, so that only the Python around the core call is timed (warm caches; compare
benchmarks/latency.py's "Python p50", which subtracts the core's time from real calls and so also
counts the cache misses the core's streaming leaves behind).

    python -P benchmarks/python_share.py      # about 10 s; run with nothing else on the machine

Rows: rejection_sample and Verifier at B·k = 16 (4 requests × 4 drafts), V = 32000, float32, kl 0.1;
solve on 3 × 100 float32 rows. Median, p10 and p90 over 2000 calls (20000 for solve), in µs.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import mentored
from mentored import _core
from mentored.serving import Verifier, rejection_sample


def _time(f, calls):
    for _ in range(calls // 10):
        f()
    ts = np.empty(calls)
    for i in range(calls):
        t0 = time.perf_counter_ns()
        f()
        ts[i] = time.perf_counter_ns() - t0
    ts /= 1e3
    return np.median(ts), np.percentile(ts, 10), np.percentile(ts, 90)


def _stubbed(name, answer):
    """Replace _core.<name> by a function returning ``answer``; returns the original."""
    real = getattr(_core, name)
    setattr(_core, name, lambda *a, **k: answer)
    return real


def main() -> int:
    rng = np.random.default_rng(0)
    B, k, V = 4, 4, 32000
    T = B * k

    def rows(n, v):
        x = rng.random((n, v), dtype=np.float32) ** 8
        return (x / x.sum(-1, dtype=np.float64, keepdims=True)).astype(np.float32)

    q, p = rows(T, V), rows(T, V)
    draft, bonus, n = rng.integers(0, V, T), rng.integers(0, V, (B, 1)), [k] * B
    code = int(mentored.divergence("kl").compiled)
    answer = _core.verify(p, q, draft, n, bonus, rng.random((T, 2)), np.array([0.1]), [code], keep=True, placeholders=True, int32=True,
                          rtol_p=1e-3, rtol_q=1e-3)
    ver = Verifier(V, divergence="kl", budget=0.1)
    p3, q3 = rows(3, 100), rows(3, 100)
    solved = _core.solve(p3, q3, code, _core.Mode.budget.value, np.full(3, 0.1), 1)
    print(f"mentored from {mentored.__file__}")
    print(f"{'call':<40} {'median':>8} {'p10':>8} {'p90':>8}  (µs, the core stubbed)")
    real = _stubbed("verify", answer)
    try:
        for name, f in (("rejection_sample, B·k = 16, V = 32000", lambda: rejection_sample(draft, n, q, p, bonus, divergence="kl", budget=0.1)),
                        ("Verifier, B·k = 16, V = 32000", lambda: ver(draft, n, q, p, bonus))):
            print(f"{name:<40} " + " ".join(f"{v:8.1f}" for v in _time(f, 2000)))
    finally:
        _core.verify = real
    real = _stubbed("solve", solved)
    try:
        f = lambda: mentored.solve(p3, q3, divergence="kl", budget=0.1, threads=1)  # noqa: E731
        print(f"{'solve, 3 × 100':<40} " + " ".join(f"{v:8.1f}" for v in _time(f, 20000)))
    finally:
        _core.solve = real
    return 0


if __name__ == "__main__":
    sys.exit(main())
