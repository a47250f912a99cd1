"""Input checks shared by every entry point: clear errors before anything reaches the core.

The checks of one speculative step (shapes, ids, budgets, uniforms) are written once for any array
kind, so that every backend (:mod:`mentored.backends`) refuses the same inputs with the same messages
and tolerances; the values of rows on a device are checked there, by the device backend, with the
tolerances of :func:`sum_rtol`.
"""

from __future__ import annotations

import numpy as np

from .. import _core

# Shared by the layers above (not the package's public face: the entry points check their own arguments).
__all__ = [
    "as_distribution", "as_pair", "block_method", "check_step_inputs", "check_sums", "check_zeros", "floats", "pair_arrays", "per_row", "refuse_pair",
    "row_error", "row_stats", "step_budgets", "step_uniforms", "sum_rtol", "threads_arg",
]

# Relative tolerance on Σ p = 1 per dtype: a float32 softmax over 256k tokens drifts by ~1e-5.
_SUM_RTOL = {np.dtype(np.float32): 1e-3, np.dtype(np.float64): 1e-6}


def sum_rtol(dtype, normalize: bool) -> float:
    """The tolerance on a row's sum the core checks (inf: any positive sum, the row is normalised)."""
    return np.inf if normalize else _SUM_RTOL[np.dtype(dtype)]


_HALF = ("float16", "half", "bfloat16")


def as_distribution(x, name: str) -> np.ndarray:
    """``x`` as a float32/float64 ndarray of shape (n,) or (B, n), finite and nonnegative."""
    return _distribution(x, name)[0]


def _distribution(x, name: str) -> tuple[np.ndarray, np.ndarray]:
    """as_distribution, and the float64 row sums it computed on the way."""
    a = _array(x, name)
    sums, lo, hi = row_stats(a)
    _check_entries(name, sums, lo, hi)
    return a, sums


def _array(x, name: str) -> np.ndarray:
    """``x`` as a float32/float64 ndarray of shape (n,) or (B, n), not empty; its values unread."""
    # The usual case first, without the name checks of floats (a dtype's name costs microseconds).
    a = x if isinstance(x, np.ndarray) and x.dtype in _FLOATS else floats(x, name)
    if a.ndim not in (1, 2):
        raise ValueError(f"{name} must have shape (n,) or (B, n), got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} is empty (shape {a.shape})")
    return a


def _check_entries(name: str, sums, lo, hi) -> None:
    """Refuse NaN, ±inf and negative entries, from each row's float64 Σ, min and max (row_stats)."""
    # One test for the usual case; NaN fails every comparison, and shows in the sums.
    if not (lo.min() >= 0 and hi.max() < np.inf and sums.min() == sums.min()):
        if np.any(np.isnan(sums)) or np.any(hi == np.inf) or np.any(lo == -np.inf):
            raise ValueError(f"{name} contains NaN or infinite entries")
        raise ValueError(f"{name} has negative entries" + _logits_hint(sums))


def _logits_hint(sums) -> str:
    """A hint when rows with negative entries look like logits rather than probabilities."""
    if np.all(np.abs(np.atleast_1d(sums) - 1.0) <= 1e-3):
        return ""
    return (
        " and rows that do not sum to 1: these look like logits, not probabilities. "
        "Pass softmax(logits) (torch.softmax(logits, -1), scipy.special.softmax(logits, axis=-1))"
    )


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def floats(x, name: str) -> np.ndarray:
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
    """Refuse rows that are all zero, and rows not summing to 1 unless ``normalize``; normalised rows
    that the core cannot scale by their sum's reciprocal come back rescaled."""
    if sums is None:
        sums = row_stats(a)[0]  # finite entries near 1e308 may sum to inf: handled below
    _check_row_sums(name, a.dtype, sums, normalize)
    if normalize:
        if not _needs_rescale(a.dtype, sums):
            # Left as given: both cores divide each row by its float64 sum. Dividing a float32 row
            # here would round the normalised p to float32 first, so that π would answer a p off the
            # float64-normalised one by an ulp per entry (docs/reliability.md); dividing a float64
            # row here and again there would round twice (at budget 0, π = p/Σp exactly).
            return a
        # float64 rows summing below 1e-300 (no float64 reciprocal) or past DBL_MAX: rescaled here.
        if not np.all(np.isfinite(sums)):
            # Finite entries whose sum overflows (near 1e308): scale each row by its maximum first.
            a = a / a.max(axis=-1, keepdims=True)
            sums = a.sum(axis=-1, dtype=np.float64)
        return a / sums[..., None] if a.ndim == 2 else a / sums
    return a


def _check_row_sums(name: str, dtype, sums, normalize: bool) -> None:
    """Refuse rows that are all zero, and rows not summing to 1 (unless ``normalize``), from their sums."""
    sums = np.atleast_1d(sums)
    zero = np.flatnonzero(sums <= 0)
    if zero.size:
        raise ValueError(f"{name} has all-zero rows: {_rows(zero)}")
    if normalize:
        return
    rtol = _SUM_RTOL[np.dtype(dtype)]
    off = np.flatnonzero(np.abs(sums - 1.0) > rtol)
    if off.size:
        raise ValueError(
            f"{name} rows must sum to 1 (relative tolerance {rtol:g} for {np.dtype(dtype)}); "
            f"rows {_rows(off)} do not (first sums to {float(sums[off[0]])!r}). Pass normalize=True to renormalise."
        )


def _needs_rescale(dtype, sums) -> bool:
    """Whether check_sums would rescale these normalised rows (float64 summing below 1e-300 or past DBL_MAX)."""
    return np.dtype(dtype) == np.float64 and not np.all((sums >= 1e-300) & (sums < np.inf))


def pair_arrays(target, draft) -> tuple[np.ndarray, np.ndarray]:
    """(p, q) as arrays of one shape (as_pair's checks that read no values): for a solve whose entries
    and sums the core checks in its own pass (refuse_pair says why it refused a row)."""
    p, q = _array(target, "target"), _array(draft, "draft")
    if p.shape != q.shape:
        raise ValueError(f"target and draft must have the same shape, got {p.shape} and {q.shape}")
    return p, q


def refuse_pair(stats: np.ndarray, p_dtype, q_dtype, normalize: bool, shape) -> tuple[bool, bool]:
    """The error of :func:`as_pair` for rows the core refused (its statuses zero_row, bad_value and
    off_sum), from its per-row stats (B, 6): Σ, min and max of p, then of q (as row_stats computes
    them). Raises it; returns, where every entry and sum passes, whether each side needs
    check_sums' rescaling (normalised float64 rows whose sum has no float64 reciprocal or passes
    DBL_MAX, which the core refuses)."""
    lead = tuple(shape[:-1])
    sp, lp, hp, sq, lq, hq = (stats[:, j].reshape(lead) for j in range(6))
    _check_entries("target", sp, lp, hp)
    _check_entries("draft", sq, lq, hq)
    _check_row_sums("target", p_dtype, sp, normalize)
    _check_row_sums("draft", q_dtype, sq, normalize)
    return normalize and _needs_rescale(p_dtype, sp), normalize and _needs_rescale(q_dtype, sq)


def as_pair(target, draft, normalize: bool):
    """(p, q) checked: entries, shapes and sums (normalised rows rescaled where check_sums must)."""
    p, sp = _distribution(target, "target")
    q, sq = _distribution(draft, "draft")
    if p.shape != q.shape:
        raise ValueError(f"target and draft must have the same shape, got {p.shape} and {q.shape}")
    return check_sums(p, "target", normalize, sp), check_sums(q, "draft", normalize, sq)


def per_row(value, rows: int, name: str, *, upper: float | None = None, unit: str | None = None, where=None) -> np.ndarray:
    """A scalar or one value per row, as a float64 array of length ``rows``; NaN and negatives refused.

    The one rule for budgets (and acceptances, with ``upper=1``) at every entry point: a float64 ≥ 0,
    ``inf`` allowed (no bound). ``unit`` (e.g. ``"request"``) names what the rows are, in the shape
    message and as the place of a bad value ("... for request 3"); ``where(r)`` names row r instead."""
    if type(value) in (float, int) and 0 <= value <= (np.inf if upper is None else upper):  # the common case, fast
        return np.full(rows, float(value))
    try:
        v = np.asarray(value.tolist() if hasattr(value, "tolist") else value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number or an array of numbers, got {type(value).__name__}") from None
    if v.ndim == 0:
        v = np.full(rows, float(v))
    if v.shape != (rows,):
        raise ValueError(f"{name} must be a scalar or have one value per {unit or 'row'} ({rows}), got shape {v.shape}")

    def at(bad) -> str:
        r = int(np.flatnonzero(bad)[0])
        return f" {where(r)}" if where else f" for {unit} {r}" if unit else ""

    if np.any(np.isnan(v)):
        raise ValueError(f"{name} is NaN{at(np.isnan(v))}")
    if np.any(v < 0):
        raise ValueError(f"{name} must be nonnegative{' (inf allowed)' if upper is None else ''}, got {v[v < 0][0]}{at(v < 0)}")
    if upper is not None and np.any(v > upper):
        raise ValueError(f"{name} must be at most {upper}, got {v[v > upper][0]}{at(v > upper)}")
    return np.ascontiguousarray(v)


def priced_values(budgets: np.ndarray, price, rows: int, *, unit: str = "request") -> tuple:
    r"""Budgets, or prices in their place: ``(values, priced)`` for ``rows`` requests.

    ``budgets`` (rows,) are the requests' budgets, checked by :func:`per_row`. ``price=None``: the
    budgets, ``priced`` None. Otherwise a price :math:`\lambda \ge 0` (``inf`` allowed) for all, or one
    per request, where NaN means "this request uses its budget": each priced request's verifier is
    the :math:`\pi` maximising :math:`\sum_i \min(\pi_i, q_i) - \lambda D_f(\pi\|p)` (docs/theory.md
    §4, "Budgets by price"), and ``values`` holds its price (``priced`` bool (rows,) says which). A
    request given both a budget other than 0 (the default) and a price is refused: the two ask for
    different verifiers."""
    if price is None:
        return budgets, None
    try:
        v = np.asarray(price.tolist() if hasattr(price, "tolist") else price, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"price must be a number or an array of numbers, got {type(price).__name__}") from None
    if v.ndim == 0:
        if np.isnan(v):
            raise ValueError("price is NaN: give a price >= 0 (inf allowed), or one per request with NaN where a request uses its budget")
        v = np.full(rows, float(v))
    if v.shape != (rows,):
        raise ValueError(f"price must be a scalar or have one value per {unit} ({rows}), got shape {v.shape}")
    priced = ~np.isnan(v)
    if np.any(v[priced] < 0):
        r = int(np.flatnonzero(priced & (v < 0))[0])
        raise ValueError(f"price must be nonnegative (inf allowed), got {v[r]} for {unit} {r}")
    both = priced & (budgets != 0)
    if np.any(both):
        r = int(np.flatnonzero(both)[0])
        raise ValueError(f"{unit} {r} has both budget={budgets[r]} and price={v[r]}: give one of budget= and price= for a {unit} "
                         f"(price=NaN for a {unit} that uses its budget)")
    return np.ascontiguousarray(np.where(priced, v, budgets)), np.ascontiguousarray(priced)


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


def _dtype_kind(x) -> str:
    return x.dtype.kind


def _itemsize(x) -> int:
    return x.dtype.itemsize


# The checks of one speculative step, for any array kind.

_ZEROS = ("keep", "continue")


def check_zeros(zeros) -> str:
    if zeros not in _ZEROS:
        raise ValueError(f"zeros must be 'keep' or 'continue', got {zeros!r}")
    return zeros


def check_step_inputs(target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, asarray=np.asarray, rows=True,
                      normalize=False, kind=_dtype_kind, itemsize=_itemsize):
    """Shapes, dtypes and id ranges of a step's arrays, for any array kind (``asarray`` keeps the kind;
    ``kind`` gives numpy's dtype kind letter, ``itemsize`` the bytes per entry), and unless ``rows``
    is False (the core checks them as it solves; a device backend checks them there), the rows'
    values of numpy arrays (their sums unless ``normalize``: then only that each is positive)."""
    p, bonus, q, draft = (asarray(x) for x in (target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids))
    for name, x in (("target_with_bonus_probs", p), ("draft_probs", q)):
        if kind(x) != "f":
            raise TypeError(f"{name} must hold floats (float32 or float64), got dtype {x.dtype}")
        if itemsize(x) < 4:
            raise TypeError(f"{name} has dtype {x.dtype}; cast it to float32 or float64 (half precision is not supported)")
    for name, x in (("bonus_token_ids", bonus), ("draft_token_ids", draft)):
        if kind(x) not in "iu":
            raise TypeError(f"{name} must hold integer token ids, got dtype {x.dtype}")
    if q.ndim != 3:
        raise ValueError(f"draft_probs must have shape (B, k, V), got {tuple(q.shape)}")
    B, k, V = q.shape
    if tuple(p.shape) != (B, k + 1, V):
        raise ValueError(
            f"target_with_bonus_probs must have shape (B, k + 1, V) = ({B}, {k + 1}, {V}) to match draft_probs "
            f"{tuple(q.shape)}, got {tuple(p.shape)}"
        )
    if tuple(draft.shape) != (B, k):
        raise ValueError(f"draft_token_ids must have shape (B, k) = ({B}, {k}), got {tuple(draft.shape)}")
    if tuple(bonus.shape) != (B, 1):
        raise ValueError(f"bonus_token_ids must have shape (B, 1) = ({B}, 1), got {tuple(bonus.shape)}")
    if V == 0 or B == 0:
        raise ValueError(f"empty input: B = {B}, V = {V}")
    for name, x in (("draft_token_ids", draft), ("bonus_token_ids", bonus)):
        if x.numel() if hasattr(x, "numel") else x.size:
            lo, hi = int(x.min()), int(x.max())
            if lo < 0 or hi >= V:
                raise ValueError(f"{name} must lie in [0, V) = [0, {V}), got ids from {lo} to {hi}")
    # Every row a distribution, the bonus position included, with (b, j) in the message and the
    # tolerance of mentored.solve (relative 1e-6 in float64, 1e-3 in float32) for numpy and torch alike.
    if rows:
        _check_step_rows(p, "target_with_bonus_probs", k + 1, normalize)
        _check_step_rows(q, "draft_probs", k, normalize)
    return p, bonus, q, draft


def _check_step_rows(x, name: str, per: int, normalize: bool = False) -> None:
    """Rows of a (B, per, V) array: finite, nonnegative, summing to 1 (``normalize``: to a positive
    number); errors name (b, j)."""
    if x.shape[-1] == 0 or per == 0:
        return

    def where(r: int) -> str:
        return f"row (b, j) = ({r // per}, {r % per})"

    _check_row_values(floats(x, name), name, where, normalize)


def _check_row_values(a: np.ndarray, name: str, where, normalize: bool = False) -> np.ndarray:
    """Rows of a float array, in order: finite, nonnegative, summing to 1 (``normalize``: to a
    positive number); ``where(r)`` names row r. Returns the rows' float64 sums, flattened."""
    sums, lo, hi = (v.ravel() for v in row_stats(a))
    off = ~(sums > 0) if normalize else np.abs(sums - 1.0) > _SUM_RTOL[a.dtype]
    for bad in (np.isnan(sums) | (hi == np.inf) | (lo == -np.inf), lo < 0, off):
        r = np.flatnonzero(bad)
        if r.size:
            raise row_error(name, a.dtype, (sums[r[0]], lo[r[0]], hi[r[0]]), where(int(r[0])), normalize)
    return sums


def row_error(name: str, dtype, stats, where: str, normalize: bool = False) -> ValueError | None:
    """The error of one row of a step from its {Σ, min, max} (row_stats; the core's StepError), or
    None if it passes: where says which row. ``normalize``: any positive sum passes."""
    s, lo, hi = (float(x) for x in stats)
    if s != s or hi == np.inf or lo == -np.inf:
        return ValueError(f"{name} contains NaN or infinite entries ({where})")
    if lo < 0:
        return ValueError(f"{name} has negative entries ({where})")
    if normalize:
        return None if s > 0 else ValueError(f"{name} has an all-zero row ({where})")
    rtol = _SUM_RTOL[np.dtype(dtype)]
    if not abs(s - 1.0) <= rtol:
        return ValueError(
            f"{name} rows must sum to 1 (relative tolerance {rtol:g} for {np.dtype(dtype)}); {where} sums to {s!r}. "
            "Pass normalize=True to renormalise."
        )
    return None


def step_budgets(budget, B: int, k: int) -> np.ndarray:
    """The budget broadcast to (B, k), float64, checked by :func:`per_row`'s rule."""
    try:
        b = np.asarray(budget, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"budget must be a number or an array of numbers, got {type(budget).__name__}") from None
    try:
        b = np.broadcast_to(b, (B, k))
    except ValueError:
        raise ValueError(f"budget must broadcast to (B, k) = ({B}, {k}), got shape {b.shape}") from None
    return per_row(b.ravel(), B * k, "budget", where=lambda r: f"at (b, j) = ({r // k}, {r % k})").reshape(B, k)


def step_uniforms(uniforms, seed, B: int, k: int) -> np.ndarray:
    """Uniforms (B, k, 2) in [0, 1), given or drawn from ``seed``."""
    if uniforms is None:
        return np.random.default_rng(seed).random((B, k, 2))
    u = np.ascontiguousarray(np.asarray(uniforms, dtype=np.float64))
    if u.shape != (B, k, 2):
        raise ValueError(f"uniforms must have shape (B, k, 2) = ({B}, {k}, 2), got {u.shape}")
    if not np.all((u >= 0) & (u < 1)):
        raise ValueError("uniforms must lie in [0, 1)")
    return u


METHODS = ("token", "block")


def block_method(method) -> bool:
    """Whether ``method`` asks for block verification (docs/theory.md §10); anything but the two names is refused."""
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return method == "block"
