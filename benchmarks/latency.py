"""Latency of one verification step, idle and with every core kept busy by other processes.

    python3 -P benchmarks/latency.py              # ~1 minute
    python3 -P benchmarks/latency.py --quick      # fewer calls

For two cases, a decode step of B·k = 16 rows over V = 32000 tokens and a small one of 3 rows over
100 tokens, it times (p50 and p99 over many calls, in microseconds):

- ``core``: the compiled solve alone (``mentored._core.solve`` into a held buffer), the floor of
  ``solve``; ``core solve + step``: the compiled solve of every row, then the accept/residual step
  (two calls); ``core verify``: the one call that solves each position when it is reached and
  verifies it, the floor of a ``Verifier`` step;
- ``solve``: ``mentored.solve`` with its default threads, with ``threads=1``, and with ``threads=<all
  cores>`` (the default before small batches ran on the calling thread);
- ``rejection_sample``: the vLLM-layout entry point (validation on), numpy;
- ``Verifier``: ``mentored.verify.serving.Verifier``, buffers held between calls (validation off).

The calls are interleaved round-robin, so that each round sees one machine state. Python's share
of a call is measured inside the call: the core's entry points (solve, speculative_step, row_stats,
verify) are wrapped with timers, and the share is the median of the call's time minus the time spent in
them. This is the per-call overhead of the Python layer around the core; it does not depend on the
machine state staying the same between two timings.

"Busy" starts one process per core, each spinning in a bounded loop (it stops by itself after
``--busy-seconds``, or when the benchmark sets the stop event), and stops them before exiting.
Timings on a shared machine are noisy: compare the ratios within one run.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import numpy as np


def _spin(stop, seconds):
    end = time.monotonic() + seconds
    x = 0
    while not stop.is_set() and time.monotonic() < end:
        for _ in range(10_000):
            x += 1


class Busy:
    """Keep ``n`` cores busy with bounded spinning processes, for the duration of a ``with`` block."""

    def __init__(self, n, seconds):
        self.n, self.seconds = n, seconds

    def __enter__(self):
        ctx = mp.get_context("spawn")
        self.stop = ctx.Event()
        self.procs = [ctx.Process(target=_spin, args=(self.stop, self.seconds), daemon=True) for _ in range(self.n)]
        for p in self.procs:
            p.start()
        time.sleep(0.5)  # let them get scheduled
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join()


def _time_all(fns, calls, warm=5):
    """Round-robin: each round calls every function once, so that all see the same machine state.

    Returns {name: per-call times (calls,) in µs}.
    """
    names = list(fns)
    for _ in range(warm):
        for name in names:
            fns[name]()
    t = np.empty((calls, len(names)))
    for i in range(calls):
        for j, name in enumerate(names):
            t0 = time.perf_counter()
            fns[name]()
            t[i, j] = time.perf_counter() - t0
    return {name: t[:, j] * 1e6 for j, name in enumerate(names)}


_COMPILED = ("solve", "row_stats", "verify", "onehot")


def _python_share(fn, calls):
    """Median over calls of (time of the call − time inside the compiled core during it), in µs.

    The core's entry points are wrapped for the measurement, so that each call's compiled time is
    measured inside the call itself: unlike a difference of two timings, this does not depend on
    the machine state staying the same between them (the wrapper's own cost counts as Python).
    """
    from mentored import _core

    spent = [0.0]
    originals = {name: getattr(_core, name) for name in _COMPILED}

    def wrap(f):
        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t0

        return timed

    for name, f in originals.items():
        setattr(_core, name, wrap(f))
    try:
        out = np.empty(calls)
        for i in range(calls):
            spent[0] = 0.0
            t0 = time.perf_counter()
            fn()
            out[i] = time.perf_counter() - t0 - spent[0]
    finally:
        for name, f in originals.items():
            setattr(_core, name, f)
    return float(np.percentile(out, 50) * 1e6)


def _softmax32(z):
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    return (e / e.sum(1, keepdims=True)).astype(np.float32)


def _case(B, k, V, seed=0):
    """Rows as a model gives them: float32 softmax of logits (no subnormals, which cost ~100× per
    entry on x86), the drafter's logits a noisy copy of the target's."""
    rng = np.random.default_rng(seed)
    T = B * k
    z = rng.normal(0.0, 2.5, (T, V))
    p = _softmax32(z)
    q = _softmax32(z + rng.normal(0.0, 1.0, (T, V)))
    draft = np.array([rng.choice(V, p=r / r.sum()) for r in q.astype(np.float64)], dtype=np.int64)
    bonus = rng.integers(0, V, (B, 1))
    return p, q, draft, [k] * B, bonus


def run(calls, busy_seconds, div="kl", budget=0.1):
    import mentored
    from mentored import _core
    from mentored.verify.serving import Verifier, rejection_sample

    ncpu = os.cpu_count() or 1
    code = mentored.divergence(div).compiled
    rows = []
    for label, (B, k, V) in (("B·k = 16, V = 32000", (4, 4, 32000)), ("3 × 100", (3, 1, 100))):
        p, q, draft, n, bonus = _case(B, k, V)
        T = B * k
        out = np.empty_like(p)
        eps = np.full(T, budget)
        ver = Verifier(V, divergence=div, budget=budget, zeros="keep", dtype=np.float32, threads=1, seed=0)
        pi = _core.solve(p, q, code, 0, eps, 1, out=out)[0]
        u = np.random.default_rng(1).random((B, k, 2))
        n64, u2 = np.asarray(n, dtype=np.int64), u.reshape(T, 2)

        def raw():  # the compiled calls a Verifier step makes: solve, then accept/residual
            _core.solve(p, q, code, 0, eps, 1, out=out)
            _core.verify(p, q, draft, n64, bonus, u2, eps, [None], pi=pi, keep=True, threads=1, int32=True)  # π given

        fns = {
            "core (threads=1)": lambda: _core.solve(p, q, code, 0, eps, 1, out=out),
            "core solve + step (threads=1)": raw,
            "core verify (threads=1)": lambda: _core.verify(p, q, draft, n64, bonus, u2, eps, [int(code)], keep=True, threads=1, int32=True),
            "solve (default threads)": lambda: mentored.solve(p, q, divergence=div, budget=budget),
            "solve (threads=1)": lambda: mentored.solve(p, q, divergence=div, budget=budget, threads=1),
            f"solve (threads={ncpu})": lambda: mentored.solve(p, q, divergence=div, budget=budget, threads=ncpu),
            "rejection_sample": lambda: rejection_sample(draft, n, q, p, bonus, divergence=div, budget=budget, threads=1),
            "Verifier": lambda: ver(draft, n, q, p, bonus),
        }
        for state in ("idle", "busy"):
            if state == "busy":
                ctx = Busy(ncpu, busy_seconds)
            else:
                ctx = _Null()
            with ctx:
                res = _time_all(fns, calls if V > 1000 else calls * 5)
                share = {name: _python_share(fn, calls) for name, fn in fns.items()}
            for name, t in res.items():
                rows.append((label, state, name, np.percentile(t, 50), np.percentile(t, 99), share[name]))
    return rows


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="40 calls per measurement")
    ap.add_argument("--busy-seconds", type=float, default=120.0, help="upper bound on each busy process's life")
    args = ap.parse_args()
    calls = 40 if args.quick else args.calls
    rows = run(calls, args.busy_seconds)
    print(f"{'case':<22} {'load':<5} {'call':<36} {'p50 µs':>9} {'p99 µs':>9} {'Python p50':>11}")
    for label, state, name, p50, p99, py in rows:
        print(f"{label:<22} {state:<5} {name:<36} {p50:9.1f} {p99:9.1f} {py:11.1f}")


if __name__ == "__main__":
    main()
