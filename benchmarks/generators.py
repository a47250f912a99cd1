"""The vectorised f̃ of each built-in against its scalar form, on the same ratios, in one process.

    python benchmarks/generators.py                 # an installed mentored (pip install .)
    PYTHONPATH=. python benchmarks/generators.py    # the clone's sources, the core copied in beside them

For every built-in, the best of 15 interleaved timings of ``_core.generator_f_array`` (BuiltinF::many,
the loop the solver runs over a block of ratios) and of ``_core_testing.generator_f_loop`` (one
scalar generator_f per ratio, what the solver ran before every built-in had its own loop), on
10⁶ ratios of two kinds: q/p of LLM-like rows (exp of N(0, 1.5²)) and ratios of every scale
(exp of U(−700, 700)). Prints the ratio scalar/vectorised. Timings on a shared machine are noisy:
compare the ratios within one run.
"""

from __future__ import annotations

import time

import numpy as np

from mentored import _core, _core_testing


def _best(fn, reps: int = 15) -> float:
    return min(_timed(fn) for _ in range(reps))


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    rng = np.random.default_rng(0)
    n = 10**6
    data = {"exp N(0, 1.5²)": np.exp(rng.normal(0.0, 1.5, n)), "exp U(-700, 700)": np.exp(rng.uniform(-700.0, 700.0, n))}
    for label, t in data.items():
        print(f"{label}, {n} ratios (ns per ratio)")
        for name, member in _core.Generator.__members__.items():
            code = int(member)
            vec, loop = [], []
            for _ in range(15):  # interleaved: each pair sees one machine state
                vec.append(_timed(lambda: _core.generator_f_array(code, t)))
                loop.append(_timed(lambda: _core_testing.generator_f_loop(code, t)))
            v, s = min(vec), min(loop)
            print(f"  {name:12s} scalar {s / n * 1e9:6.2f}   vectorised {v / n * 1e9:6.2f}   ratio {s / v:5.2f}")


if __name__ == "__main__":
    main()
