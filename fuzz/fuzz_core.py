"""atheris fuzzer for the raw compiled core, mentored._core (no Python validation in front of it).

Each input's bytes decide a dtype (float32/float64), a divergence code, a mode, a shape (B, n) and
every entry, drawn from a table of adversarial values (0, the smallest denormals, 1e±300, NaN, ±inf,
negatives, huge finite values whose sum overflows) or read as raw floats. The harness calls
_core.solve, and _core.Path with at / pi / frontier / divergence_at, and checks:

- no crash (under fuzz/sanitized.sh's ASan/UBSan build: no memory error, no undefined behaviour);
- a row with any NaN, inf or negative entry, or a sum that overflows, gets status 2, never a π;
- a row that sums to zero gets status 1;
- every other row gets status 0 (or 3 for an out-of-reach acceptance) and a π that is finite,
  nonnegative, and sums to 1 within 1e-6.

    python fuzz/fuzz_core.py -runs=200000                      # plain build
    fuzz/sanitized.sh --fuzz -runs=20000                        # the ASan/UBSan core (see README)

atheris instruments the Python harness for coverage; the C++ core is not coverage-instrumented
(that needs clang's -fsanitize=fuzzer-no-link; gcc 12 here), so the decoding above is structured to
reach the core's branches (zeros, ties, p = q, disjoint supports, extreme ratios) by construction.
"""

from __future__ import annotations

import sys

import atheris
import numpy as np

from mentored import _core  # not instrumented: atheris would instrument all of sympy with it

_SPECIAL = [0.0, 0.0, 0.0, 5e-324, 1e-310, 1.4e-45, 1e-300, 1e-38, 1e-12, 0.5, 1.0, 1.0, 2.0, 1e12, 1e38, 1e300,
            1.7e308, float("nan"), float("inf"), -1.0, -0.0]
_BAD_FRACTION = 8  # about one row in eight gets a non-finite or negative entry


@atheris.instrument_func
def _row(fdp, n, dtype, allow_bad):
    style = fdp.ConsumeIntInRange(0, 4)
    if style == 0:  # raw floats from the input
        x = np.array([fdp.ConsumeRegularFloat() for _ in range(n)], dtype=np.float64)
        x = np.abs(x)
    elif style == 1:  # special values
        x = np.array([_SPECIAL[fdp.ConsumeIntInRange(0, len(_SPECIAL) - 4)] for _ in range(n)])
    elif style == 2:  # log-uniform magnitudes 1e-320..1e300
        x = 10.0 ** np.array([fdp.ConsumeIntInRange(-320, 300) for _ in range(n)], dtype=np.float64)
    elif style == 3:  # few distinct values: ties
        vals = [1.0, 2.0, 3.0]
        x = np.array([vals[fdp.ConsumeIntInRange(0, 2)] for _ in range(n)])
    else:  # one nonzero entry
        x = np.zeros(n)
        x[fdp.ConsumeIntInRange(0, n - 1)] = 1.0
    if allow_bad and fdp.ConsumeIntInRange(0, _BAD_FRACTION - 1) == 0:
        x[fdp.ConsumeIntInRange(0, n - 1)] = _SPECIAL[fdp.ConsumeIntInRange(len(_SPECIAL) - 4, len(_SPECIAL) - 1)]
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(dtype)


def _expected_status(p, q, reciprocal=True):
    """The status the core owes this row; `reciprocal`: it scales by 1/Σ (the batched solver)."""
    a, b = p.astype(np.float64), q.astype(np.float64)
    if not (np.all(a >= 0) and np.all(b >= 0) and np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return 2
    with np.errstate(over="ignore"):
        sp, sq = a.sum(), b.sum()
    if not (sp > 0 and sq > 0):
        return 1
    if not (np.isfinite(sp) and np.isfinite(sq)):
        return 2
    with np.errstate(over="ignore", divide="ignore"):
        if reciprocal and not (np.isfinite(np.float64(1) / sp) and np.isfinite(np.float64(1) / sq)):
            return 2  # Σ below 2^-1024: refused by the batched solver (oneshot.hpp)
    return 0


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    dtype = np.float32 if fdp.ConsumeBool() else np.float64
    code = fdp.ConsumeIntInRange(0, 6)
    mode = fdp.ConsumeIntInRange(0, 1)
    B = fdp.ConsumeIntInRange(1, 4)
    n = fdp.ConsumeIntInRange(1, 48)
    P = np.stack([_row(fdp, n, dtype, True) for _ in range(B)])
    Q = np.stack([_row(fdp, n, dtype, True) for _ in range(B)])
    values = np.array([_SPECIAL[fdp.ConsumeIntInRange(0, len(_SPECIAL) - 1)] if mode == 0 else fdp.ConsumeProbability() for _ in range(B)])
    threads = fdp.ConsumeIntInRange(0, 3)

    pi, res, status, stats = _core.solve(P, Q, code, mode, values, threads)
    assert pi.dtype == dtype and pi.shape == P.shape and res.shape == (B, 8) and stats.shape == (B, 6)
    for r in range(B):
        want = _expected_status(P[r], Q[r])
        got = int(status[r])
        if want:
            assert got == want, (r, got, want, P[r], Q[r])
            continue
        assert got in (0, 3), (r, got)
        if got == 0:
            x = pi[r].astype(np.float64)
            assert np.all(np.isfinite(x)) and np.all(x >= 0), x
            assert abs(x.sum() - 1.0) <= 1e-6, x.sum()
            assert np.isfinite(res[r, 0]) and -1e-12 <= res[r, 3] <= 1 + 1e-9, res[r]

    # The sorted structure of one row (float64 only, as MentoredPath passes it).
    p, q = P[0].astype(np.float64), Q[0].astype(np.float64)
    try:
        path = _core.Path(p, q)
    except ValueError:
        assert _expected_status(p, q, reciprocal=False) != 0
        return
    assert _expected_status(p, q, reciprocal=False) == 0
    s = [0.0, path.s_end, path.s_end * fdp.ConsumeProbability()][fdp.ConsumeIntInRange(0, 2)]
    t_lo, t_hi = path.at(s)[1:]
    assert 0 <= t_lo <= 1 <= t_hi, (t_lo, t_hi)
    x, acc = path.pi(s)
    assert np.all(np.isfinite(x)) and np.all(x >= 0) and abs(x.sum() - 1) <= 1e-9, x
    budgets = np.array([_SPECIAL[fdp.ConsumeIntInRange(0, len(_SPECIAL) - 1)] for _ in range(3)])
    out = path.frontier(code, budgets)
    assert out.shape == (3, 4) and np.all(out[:, 0] >= 0) and np.all(out[:, 0] <= path.s_end * (1 + 1e-12) + 1e-300)
    path.divergence_at(code, s)


def main() -> None:
    # Coverage feedback from the harness's own decoding branches (the compiled core has none).
    atheris.Setup(sys.argv, atheris.instrument_func(test_one_input))
    atheris.Fuzz()


if __name__ == "__main__":
    main()
