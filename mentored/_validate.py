"""Input checks shared by every entry point: clear errors before anything reaches the core."""

from __future__ import annotations

import numpy as np

from . import _core

# Relative tolerance on Σ p = 1 per dtype: a float32 softmax over 256k tokens drifts by ~1e-5.
_SUM_RTOL = {np.dtype(np.float32): 1e-3, np.dtype(np.float64): 1e-6}


_HALF = ("float16", "half", "bfloat16")


def as_distribution(x, name: str) -> np.ndarray:
    """``x`` as a float32/float64 ndarray of shape (n,) or (B, n), finite and nonnegative."""
    return _distribution(x, name)[0]


def _distribution(x, name: str, threads: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """as_distribution, and the float64 row sums it computed on the way (on ``threads``, as the core takes them)."""
    # The usual case first, without the name checks below (a dtype's name costs microseconds).
    a = x if isinstance(x, np.ndarray) and x.dtype in _FLOATS else _floats(x, name)
    if a.ndim not in (1, 2):
        raise ValueError(f"{name} must have shape (n,) or (B, n), got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} is empty (shape {a.shape})")
    sums, lo, hi = row_stats(a, threads)
    # One test for the usual case; NaN fails every comparison, and shows in the sums.
    if not (lo.min() >= 0 and hi.max() < np.inf and sums.min() == sums.min()):
        if np.any(np.isnan(sums)) or np.any(hi == np.inf) or np.any(lo == -np.inf):
            raise ValueError(f"{name} contains NaN or infinite entries")
        raise ValueError(f"{name} has negative entries" + _logits_hint(sums))
    return a, sums


def _logits_hint(sums) -> str:
    """A hint when rows with negative entries look like logits rather than probabilities."""
    if np.all(np.abs(np.atleast_1d(sums) - 1.0) <= 1e-3):
        return ""
    return (
        " and rows that do not sum to 1: these look like logits, not probabilities. "
        "Pass softmax(logits) (torch.softmax(logits, -1), scipy.special.softmax(logits, axis=-1))"
    )


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _floats(x, name: str) -> np.ndarray:
    """``x`` as a float32/float64 ndarray, or a TypeError that says why not."""
    # Half precision is refused by name before numpy sees it: torch's bfloat16 tensors do not
    # convert at all (numpy has no such type), and a clear message beats numpy's.
    half = str(getattr(x, "dtype", "")).rsplit(".", 1)[-1]
    if half in _HALF or half.startswith("float8"):
        raise TypeError(f"{name} has dtype {half}; cast it to float32 or float64 (half precision is not supported)")
    try:
        a = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise TypeError(f"{name} is not an array of numbers: {exc}") from None
    if a.dtype == np.float16 or a.dtype.name in _HALF or a.dtype.name.startswith("float8"):
        raise TypeError(f"{name} has dtype {a.dtype}; cast it to float32 or float64 (half precision is not supported)")
    if a.dtype.kind in "iu":
        a = a.astype(np.float64)
    elif a.dtype.kind != "f":
        raise TypeError(f"{name} must hold real numbers, got dtype {a.dtype}")
    if a.dtype.itemsize > 8:
        a = a.astype(np.float64)
    elif not a.dtype.isnative:  # big-endian input (a .npy written elsewhere): native order for the core
        a = a.astype(a.dtype.newbyteorder("="))
    return a


def row_stats(a: np.ndarray, threads: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of a float32/float64 array: Σ (in float64), min and max, in one compiled pass.

    ``threads`` as :func:`threads_arg` returns it (0: the core's default, the calling thread alone
    for small batches)."""
    rows = np.ascontiguousarray(a.reshape(-1, a.shape[-1]))
    stats = _core.row_stats(rows, threads)
    shape = a.shape[:-1]
    return stats[:, 0].reshape(shape), stats[:, 1].reshape(shape), stats[:, 2].reshape(shape)


def check_sums(a: np.ndarray, name: str, normalize: bool, sums: np.ndarray | None = None) -> np.ndarray:
    """Refuse rows that are all zero, and rows not summing to 1 unless ``normalize``."""
    if sums is None:
        sums = row_stats(a)[0]  # finite entries near 1e308 may sum to inf: handled below
    zero = np.flatnonzero(np.atleast_1d(sums) <= 0)
    if zero.size:
        raise ValueError(f"{name} has all-zero rows: {_rows(zero)}")
    if normalize:
        if a.dtype == np.float32:
            # Left as given: both cores divide each row by its float64 sum, and dividing here would
            # round the normalised p to float32 first, so that π would answer a p that is off the
            # float64-normalised one by an ulp per entry (docs/reliability.md).
            return a
        if np.all((sums >= 1e-300) & (sums < np.inf)):
            # float64 rows too: the core divides by the sum itself (dividing here and again there
            # would round twice; at budget 0, π = p/Σp exactly). Rows summing below 1e-300 (no
            # float64 reciprocal) or past DBL_MAX are rescaled here instead.
            return a
        if not np.all(np.isfinite(sums)):
            # Finite entries whose sum overflows (near 1e308): scale each row by its maximum first.
            a = a / a.max(axis=-1, keepdims=True)
            sums = a.sum(axis=-1, dtype=np.float64)
        return a / sums[..., None] if a.ndim == 2 else a / sums
    rtol = _SUM_RTOL[a.dtype]
    off = np.flatnonzero(np.abs(np.atleast_1d(sums) - 1.0) > rtol)
    if off.size:
        worst = float(np.atleast_1d(sums)[off[0]])
        raise ValueError(
            f"{name} rows must sum to 1 (relative tolerance {rtol:g} for {a.dtype}); "
            f"rows {_rows(off)} do not (first sums to {worst!r}). Pass normalize=True to renormalise."
        )
    return a


def as_pair(target, draft, normalize: bool, with_sums: bool = False, threads: int = 0):
    """(p, q) checked; with ``with_sums``, also their float64 row sums as a (..., 2) array (as
    ``row_stats`` computes them, for the core to skip its own pass), or None if a row was rescaled.
    ``threads``: as :func:`threads_arg` returns it, for the checking pass."""
    p, sp = _distribution(target, "target", threads)
    q, sq = _distribution(draft, "draft", threads)
    if p.shape != q.shape:
        raise ValueError(f"target and draft must have the same shape, got {p.shape} and {q.shape}")
    p2, q2 = check_sums(p, "target", normalize, sp), check_sums(q, "draft", normalize, sq)
    if not with_sums:
        return p2, q2
    return p2, q2, (np.stack([sp, sq], axis=-1) if p2 is p and q2 is q else None)


def per_row(value, rows: int, name: str, *, upper: float | None = None) -> np.ndarray:
    """A scalar or one value per row, as a float64 array of length ``rows``; NaN and negatives refused."""
    try:
        v = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number or an array of numbers, got {type(value).__name__}") from None
    if v.ndim == 0:
        v = np.full(rows, float(v))
    if v.shape != (rows,):
        raise ValueError(f"{name} must be a scalar or have one value per row ({rows}), got shape {v.shape}")
    if np.any(np.isnan(v)):
        raise ValueError(f"{name} is NaN")
    if np.any(v < 0):
        raise ValueError(f"{name} must be nonnegative, got {v[v < 0][0]}")
    if upper is not None and np.any(v > upper):
        raise ValueError(f"{name} must be at most {upper}, got {v[v > upper][0]}")
    return np.ascontiguousarray(v)


def threads_arg(threads) -> int:
    if threads is None:
        return 0
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
    if threads > _MAX_THREADS:  # the core takes a C int; more threads than that is a mistake anyway
        raise ValueError(f"threads must be at most {_MAX_THREADS}, got {threads}")
    return int(threads)


_MAX_THREADS = 4096


def _rows(idx) -> str:
    idx = list(map(int, idx))
    return ", ".join(map(str, idx[:8])) + (f", … ({len(idx)} in all)" if len(idx) > 8 else "")
