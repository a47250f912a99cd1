r"""Serving: mentored verification in vLLM v1's rejection-sampler layout (docs/serving.md).

:func:`rejection_sample` takes what vLLM's ``rejection_sample`` takes, flattened over requests
(``draft_token_ids [T]``, ``num_draft_tokens [B]``, ``draft_probs [T, V]`` or ``None``,
``target_probs [T, V]``, ``bonus_token_ids [B, 1]``), and returns int32 ``[B, max_k + 1]`` with
:data:`PLACEHOLDER_TOKEN_ID` (−1) after the first rejection and in unused columns. At ``budget=0`` it
is lossless speculative sampling, decision for decision with :func:`mentored.speculative_step`
given the same uniforms; at ``budget > 0`` every emitted token has law exactly the mentored
verifier :math:`\pi` of its position (docs/theory.md §2, §8).

:class:`Verifier` holds buffers for a decoding loop that calls this every step (numpy input).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property

import numpy as np

from ._validate import _floats, check_sums, per_row, row_stats, sum_rtol, threads_arg
from .divergences import _NP, Divergence, _TorchOps, divergence as _divergence
from . import _core
from ._validate import _check_zeros as check_zeros, _row_error
from .speculative import _core_divergence, _step_error, solve_pi

__all__ = ["PLACEHOLDER_TOKEN_ID", "rejection_sample", "onehot_acceptance", "Verifier"]

PLACEHOLDER_TOKEN_ID = -1
_RNG = np.random.default_rng()  # unseeded requests on numpy input (torch input: torch's global RNG)
_BISECT = 80  # halvings of [p_x, 1] for the token-only verifier: absolute error 2^-80
# Who solves dense rows of CPU tensors: "core" (the compiled one-shot solve, on zero-copy numpy views
# of the tensors) or "torch" (mentored.torch_backend, the device algorithm, also on CPU). On CPU a
# torch sort of 64 × 131072 ratios alone costs several times a whole lossless verification step
# (benchmarks/torch_lossless.py); the core's bucketed solve does not sort. Other devices: torch.
CPU_SOLVER = "core"


def _is_torch(x) -> bool:
    return x is not None and type(x).__module__.startswith("torch")


def _host_array(name, x, kinds, what):
    """``x`` (a list, an array or a tensor) as a numpy array whose dtype is of ``kinds``: a count given
    as 1.5 or a flag given as 2 is refused, not truncated or taken as true."""
    a = np.asarray(x.tolist() if hasattr(x, "tolist") else x)
    if a.size and a.dtype.kind not in kinds:
        raise TypeError(f"{name} must hold {what}, got dtype {a.dtype}")
    return a


class _Plan:
    """Host-side bookkeeping of one call: who is where, and with which divergence and budget.

    What the core call needs is computed here (counts, greedy flags, divergences and their index per
    request, budgets per row or one for all); the rest of the layout (``starts``, ``req``, ``pos``, the
    random and greedy positions, the groups by divergence) only where a path reads it."""

    def __init__(self, num_draft_tokens, B, is_greedy, divergence, budget, T):
        n = _host_array("num_draft_tokens", num_draft_tokens, "iu", "integers").astype(np.int64, copy=False)
        if n.ndim != 1 or n.shape[0] != B:
            raise ValueError(f"num_draft_tokens must have one entry per request (B = {B} from bonus_token_ids), got shape {n.shape}")
        if B and n.min() < 0:
            raise ValueError(f"num_draft_tokens must be nonnegative, got {int(n.min())}")
        if int(n.sum()) != T:
            raise ValueError(f"num_draft_tokens sums to {int(n.sum())}, but draft_token_ids holds {T} tokens")
        self.B, self.T, self.n = B, T, n
        self.K = int(n.max()) if B else 0
        g = None
        if is_greedy is not None:
            g = _host_array("is_greedy", is_greedy, "b", "booleans")
            if g.shape != (B,):
                raise ValueError(f"is_greedy must have shape (B,) = ({B},), got {g.shape}")
            g = np.ascontiguousarray(g, dtype=bool) if g.any() else None
        self.greedy_or_none = g
        # divergence and budget, per request or global
        if isinstance(divergence, (str, Divergence)):
            self.divs, self.which = [_divergence(divergence)], None
        else:
            given = list(divergence)
            if len(given) != B:
                raise ValueError(f"divergence must be one name or one per request (B = {B}), got {len(given)}")
            divs, which = [], np.empty(B, dtype=np.int32)
            for b, d in enumerate(given):
                d = _divergence(d)
                if d not in divs:
                    divs.append(d)
                which[b] = divs.index(d)
            self.divs, self.which = divs, (which if len(divs) > 1 else None)
        if np.ndim(budget) == 0:
            self.eps_request = None
            self.eps_rows = per_row(budget, 1, "budget")  # one for all
        else:
            self.eps_request = per_row(budget, B, "budget", unit="request")
            self.eps_rows = np.repeat(self.eps_request, n)

    @cached_property
    def greedy(self) -> np.ndarray:
        return self.greedy_or_none if self.greedy_or_none is not None else np.zeros(self.B, dtype=bool)

    @cached_property
    def starts(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.n)[:-1]]).astype(np.int64) if self.B else self.n

    @cached_property
    def req(self) -> np.ndarray:
        return np.repeat(np.arange(self.B, dtype=np.int64), self.n)

    @cached_property
    def pos(self) -> np.ndarray:
        return np.arange(self.T, dtype=np.int64) - self.starts[self.req]

    @cached_property
    def grd(self) -> np.ndarray:
        return np.flatnonzero(self.greedy[self.req])

    @cached_property
    def rnd(self) -> np.ndarray:
        return np.flatnonzero(~self.greedy[self.req])

    @cached_property
    def eps_rnd(self) -> np.ndarray:
        """The budget of each random position (rnd order)."""
        eps = self.eps_rows if self.eps_request is not None else np.full(self.T, self.eps_rows[0])
        return eps[self.rnd]

    @cached_property
    def groups(self) -> list:
        """Random positions by divergence: (Divergence, indices into rnd, or None for all of them)."""
        if self.which is None:
            return [(self.divs[0], None)] if self.rnd.size else []
        wr = self.which[self.req[self.rnd]]
        groups = [(d, np.flatnonzero(wr == i)) for i, d in enumerate(self.divs) if np.any(wr == i)]
        return [(groups[0][0], None)] if len(groups) == 1 else groups

    def where(self, t: int) -> str:
        return f"row {t} (request {int(self.req[t])}, position {int(self.pos[t])})"


def _bonus_shape(bonus_token_ids) -> int:
    """B, from bonus_token_ids of shape (B,) or (B, 1): a (B, 2) array flattened would give request b
    its neighbour's ids."""
    shape = tuple(getattr(bonus_token_ids, "shape", ()))
    if len(shape) not in (1, 2) or shape[1:] not in ((), (1,)):
        raise ValueError(f"bonus_token_ids must have shape (B,) or (B, 1), one id per request, got shape {shape}")
    return int(shape[0])


def _check_generators(generators, B: int) -> None:
    """generators: request index in [0, B) → numpy.random.Generator or torch.Generator."""
    if generators is None:
        return
    if not isinstance(generators, Mapping):
        raise TypeError(f"generators must be a dict from request index to a numpy.random.Generator or torch.Generator, got {type(generators).__name__}")
    for b, gen in generators.items():
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)):
            raise TypeError(f"generators: request index {b!r} is not an integer")
        if not 0 <= b < B:
            raise ValueError(f"generators: request index {b} is outside [0, B) = [0, {B})")
        if not (isinstance(gen, np.random.Generator) or (_is_torch(gen) and type(gen).__name__ == "Generator")):
            raise TypeError(f"generators[{b}] (request {b}) must be a numpy.random.Generator or torch.Generator, got {type(gen).__name__}")


def _check_ids(draft, bonus, V: int, B: int, T: int):
    if tuple(draft.shape) != (T,):
        raise ValueError(f"draft_token_ids must be flat, shape (num_tokens,) = ({T},), got {tuple(draft.shape)}")
    if draft.shape[0]:
        lo, hi = int(draft.min()), int(draft.max())
        if lo < PLACEHOLDER_TOKEN_ID or hi >= V:
            raise ValueError(f"draft_token_ids must lie in [0, V) = [0, {V}) or be the placeholder -1, got ids from {lo} to {hi}")
    if B:
        lo, hi = int(bonus.min()), int(bonus.max())
        if lo < 0 or hi >= V:
            raise ValueError(f"bonus_token_ids must lie in [0, V) = [0, {V}), got ids from {lo} to {hi}")


# ---------------------------------------------------------------- the token-only verifier (§8)


def onehot_acceptance(p_x, budget, divergence="kl", zeros="keep"):
    r"""π_x of the verifier of a token-only drafter :math:`q = \delta_x` (docs/theory.md §8), per row.

    The largest :math:`a = \pi_x \in [p_x, 1]` with
    :math:`p_x \tilde f(a/p_x) + (1 - p_x)\,\tilde f((1 - a)/(1 - p_x)) \le \varepsilon`; the rest of
    :math:`\pi` is :math:`(1 - a)/(1 - p_x)\cdot p_i`. Closed forms for ``tv``
    (:math:`p_x + \varepsilon`) and ``chi2`` (:math:`p_x + \sqrt{\varepsilon p_x (1 - p_x)}`), a
    bisection vectorised over rows otherwise. Where :math:`p_x = 0`: 0 with ``zeros="keep"`` or
    :math:`f_\infty = \infty`, else the largest :math:`z` with :math:`\tilde f(1 - z) + \tilde f_\infty z \le \varepsilon`.
    ``p_x`` and ``budget`` broadcast; float64 numpy in, float64 numpy out.
    """
    div = _divergence(divergence)
    check_zeros(zeros)
    px, eps = np.broadcast_arrays(np.asarray(p_x, dtype=np.float64), np.asarray(budget, dtype=np.float64))
    shape = px.shape
    return _onehot_np(np.ascontiguousarray(px.ravel()), np.ascontiguousarray(eps.ravel()), div, zeros).reshape(shape)


def _onehot_np(px: np.ndarray, eps: np.ndarray, div: Divergence, zeros: str) -> np.ndarray:
    """π_x of onehot_acceptance for float64 arrays of one length: in the core (speculative.hpp,
    onehot_pi_x) wherever it can evaluate f̃, by the same bisection in numpy otherwise."""
    code = _core_divergence(div)
    if code is not None:
        return _core.onehot(px, eps, code, zeros == "keep")
    f_inf = div.f_inf - div.tilt

    def term(x, y):  # y·f̃(x/y) of a user generator; its limit y·f̃∞·(x/y) where x/y overflows
        r = x / y
        huge = r > 1e100
        return np.where(huge, x * f_inf if np.isfinite(f_inf) else np.inf, y * div.f_tilde(np.where(huge, 1.0, r)))

    with np.errstate(all="ignore"):
        return _onehot(_NP, px, eps, div, zeros, term)


def _onehot_torch(px, eps, div: Divergence, zeros: str):
    from .torch_backend import _torch_forms

    return _onehot(_TorchOps(), px, eps, div, zeros, _torch_forms(div).perspective)


def _onehot(ops, px, eps, div: Divergence, zeros: str, term):
    """The bisection of :func:`onehot_acceptance` on an array namespace (numpy or torch): ``term(x, y)``
    is y·f̃(x/y) for y > 0 there (the divergence's perspective, finite however small y is)."""
    f_inf = div.f_inf - div.tilt  # f̃∞
    zero = px <= 0
    if div.compiled == _core.Generator.tv:
        a = ops.clamp(px + eps, hi=1.0)
    elif div.compiled == _core.Generator.chi2:
        a = ops.clamp(px + ops.sqrt(eps * px * (1.0 - px)), hi=1.0)
    else:
        rest = 1.0 - px
        some = rest > 0
        pos, rest1 = ops.where(zero, 1.0, px), ops.where(some, rest, 1.0)

        def D(a):
            # off the target's support a unit of mass costs f̃∞ (0·∞ = 0 where a = 0)
            t1 = ops.where(zero, ops.where(a > 0, a * f_inf, 0.0), term(a, pos))
            return t1 + ops.where(some, term(1.0 - a, rest1), 0.0)

        lo, hi = px + 0.0, ops.ones_like(px)
        top = D(hi) <= eps
        for _ in range(_BISECT):
            mid = 0.5 * (lo + hi)
            good = D(mid) <= eps
            lo = ops.where(good, mid, lo)
            hi = ops.where(good, hi, mid)
        a = ops.where(top, 1.0, lo)
    a = ops.where(eps <= 0, px, ops.where(a > px, a, px))
    if zeros == "keep" or not np.isfinite(f_inf):
        a = ops.where(zero, 0.0, a)
    return a


# ---------------------------------------------------------------- uniforms


def _uniforms_np(plan: _Plan, generators):
    u = _RNG.random((plan.T, 2))
    for b, gen in (generators or {}).items():  # checked: _check_generators
        b = int(b)
        n = int(plan.n[b])
        if n == 0 or plan.greedy[b]:
            continue  # no draw for a request that needs none: its stream stays its own
        s = int(plan.starts[b])
        if isinstance(gen, np.random.Generator):
            u[s : s + n] = gen.random((n, 2))
        else:  # a torch.Generator
            import torch

            u[s : s + n] = torch.rand((n, 2), generator=gen, dtype=torch.float64, device=gen.device).cpu().numpy()
    return u


def _uniforms_torch(plan: _Plan, generators, device):
    import torch

    u = torch.rand((plan.T, 2), dtype=torch.float64, device=device)
    for b, gen in (generators or {}).items():
        b = int(b)
        n = int(plan.n[b])
        if n == 0 or plan.greedy[b]:
            continue
        s = int(plan.starts[b])
        if isinstance(gen, np.random.Generator):
            u[s : s + n] = torch.from_numpy(gen.random((n, 2))).to(device)
        else:
            u[s : s + n] = torch.rand((n, 2), generator=gen, dtype=torch.float64, device=gen.device).to(device)
    return u


def _given_uniforms(uniforms, T, asarray):
    u = asarray(uniforms)
    if tuple(u.shape) != (T, 2):
        raise ValueError(f"uniforms must have shape (num_tokens, 2) = ({T}, 2), got {tuple(u.shape)}")
    if not bool(((u >= 0) & (u < 1)).all()):
        raise ValueError("uniforms must lie in [0, 1)")
    return u


# ---------------------------------------------------------------- the entry point


def rejection_sample(
    draft_token_ids,
    num_draft_tokens,
    draft_probs,
    target_probs,
    bonus_token_ids,
    *,
    divergence="kl",
    budget=0.0,
    is_greedy=None,
    generators=None,
    uniforms=None,
    zeros="keep",
    threads=None,
    validate=True,
    normalize=False,
):
    r"""Verify a batch of drafts with mentored decoding, in vLLM v1's flattened layout.

    Request ``b`` owns the ``n_b = num_draft_tokens[b]`` consecutive rows starting at
    :math:`\sum_{c<b} n_c` of ``draft_token_ids``, ``draft_probs`` and ``target_probs``. For each of
    its positions, with target :math:`p`, drafter :math:`q` and drafted token :math:`x`:

    - **random requests** (the default): :math:`\pi` is the mentored verifier of
      :math:`\mathrm{MD}(f, \varepsilon)` (docs/theory.md §2); the draft is accepted iff
      ``u0 · q_x < π_x`` (``q`` read as :math:`q/\sum q`, the row π answers); at the first rejection the token at that position is drawn from
      :math:`(\pi - q)_+` normalised (inverse CDF at ``u1``) and the row stops. Every emitted
      token has law exactly :math:`\pi`; at ``budget=0``, :math:`\pi = p` (lossless).
    - ``draft_probs=None`` (n-gram, EAGLE without probabilities): :math:`q = \delta_x`, never
      materialised; :math:`\pi` is the verifier of largest :math:`\pi_x` within budget
      (docs/theory.md §8, :func:`onehot_acceptance`); accept iff ``u0 < π_x``, else draw from
      :math:`p` without :math:`x`, renormalised.
    - **greedy requests** (``is_greedy[b]``): accept while :math:`x = \arg\max p` (first maximum),
      emit the argmax at the first mismatch, as vLLM does.
    - a **placeholder** draft (−1) is always rejected; a random request then draws its token from
      :math:`p` (there is no draft to lean toward), a greedy one emits the argmax.
    - all ``n_b`` accepted: ``bonus_token_ids[b]`` at column ``n_b``.

    Parameters
    ----------
    draft_token_ids : (T,) integer array or tensor
    num_draft_tokens : sequence of B ints (0 allowed)
    draft_probs : (T, V) float array or tensor, or None
    target_probs : (T, V) float array or tensor (after temperature and top-k/top-p)
    bonus_token_ids : (B, 1) or (B,) integer array or tensor (any other shape is refused)
    divergence : str or Divergence, or one per request
    budget : float, or one per request (float64, ≥ 0, ``inf`` allowed)
    is_greedy : (B,) bool, optional
    generators : dict request index → ``numpy.random.Generator`` or ``torch.Generator``, optional
        Indices in [0, B). A seeded request draws its two uniforms per position from its own generator (nothing when
        it has no drafts or is greedy), so its output depends only on its own rows and generator.
    uniforms : (T, 2) in [0, 1), optional
        Column 0 decides acceptance, column 1 samples the recovered token. Overrides ``generators``.
    zeros : {"keep", "continue"}
        ``"keep"``: :math:`\pi_i = 0` wherever :math:`p_i = 0`, for every divergence (the target's
        zeros are hard constraints: top-k/top-p, bad words, grammars; docs/serving.md). ``"continue"``:
        the problem as stated, which may put mass there when :math:`f_\infty < \infty`.
    threads : int, optional
        Core threads over rows (numpy input; CPU tensors with dense ``draft_probs``, whose rows
        the core solves: :data:`CPU_SOLVER`).
    validate : bool
        Check shapes, ids and that rows are distributions (torch: a few host synchronisations).
        Without it, numpy rows are still checked by the solve (entries and sums, the rows it
        solves); torch rows are not checked, and are read normalised.
    normalize : bool
        Take rows with any positive sum as :math:`p/\sum p` and :math:`q/\sum q`, as
        :func:`mentored.solve` does; otherwise each row must sum to 1 within the tolerance of its
        dtype (relative 1e-6 in float64, 1e-3 in float32) and is read normalised within it. A float32
        softmax widened to float64 sums to 1 only to float32's rounding: pass ``normalize=True``.

    Returns
    -------
    int32 array or tensor (B, max(num_draft_tokens) + 1), −1 where nothing is emitted.
    """
    check_zeros(zeros)
    B = _bonus_shape(bonus_token_ids)
    T = int(draft_token_ids.shape[0]) if getattr(draft_token_ids, "ndim", 1) == 1 else -1
    plan = _Plan(num_draft_tokens, B, is_greedy, divergence, budget, T)
    _check_generators(generators, B)
    args = plan, draft_token_ids, draft_probs, target_probs, bonus_token_ids, generators, uniforms, zeros, threads, validate, normalize
    tensors = [x for x in (target_probs, draft_probs, draft_token_ids, bonus_token_ids) if _is_torch(x)]
    if tensors and (CPU_SOLVER != "core" or any(x.device.type != "cpu" for x in tensors)):
        return _torch_path(*args)
    return _host_path(*args, tensors=bool(tensors))


def _host_ids(x, name: str) -> np.ndarray:
    a = np.asarray(x.detach().numpy() if _is_torch(x) else x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer token ids, got dtype {a.dtype}")
    return a


def _host_rows(x, name: str, plan: _Plan) -> np.ndarray:
    """Rows (T, V) of host memory as the core takes them: CPU tensors as numpy views of their memory."""
    if _is_torch(x):
        from .torch_backend import _as_core_input

        x = _as_core_input(x, name)
    a = _floats(x, name)
    if a.ndim != 2 or a.shape[0] != plan.T:
        raise ValueError(f"{name} must have shape (num_tokens, V) = ({plan.T}, V), got {a.shape}")
    return a


def _host_path(plan, draft_token_ids, draft_probs, target_probs, bonus_token_ids, generators, uniforms, zeros, threads, validate,
               normalize, tensors=False):
    """rejection_sample for host memory (numpy arrays, CPU tensors): one call of the compiled core
    (``_core.verify``), which checks every row it is given as it reads it; ``validate`` adds nothing
    here (every row and id is checked either way)."""
    T = plan.T
    draft = _host_ids(draft_token_ids, "draft_token_ids")
    bonus = _host_ids(bonus_token_ids, "bonus_token_ids")
    if tuple(draft.shape) != (T,):
        raise ValueError(f"draft_token_ids must be flat, shape (num_tokens,) = ({T},), got {tuple(draft.shape)}")
    p = _host_rows(target_probs, "target_probs", plan)
    q = None if draft_probs is None else _host_rows(draft_probs, "draft_probs", plan)
    if q is not None and q.shape != p.shape:
        raise ValueError(f"draft_probs must have the shape of target_probs {p.shape}, got {q.shape}")
    dtypes = (p.dtype, p.dtype if q is None else q.dtype)
    if q is not None and q.dtype != p.dtype:
        p, q = p.astype(np.float64), q.astype(np.float64)
    p = np.ascontiguousarray(p)
    q = None if q is None else np.ascontiguousarray(q)
    if uniforms is not None:
        u = _given_uniforms(uniforms, T, lambda x: np.ascontiguousarray(x.detach().cpu().numpy() if _is_torch(x) else x, dtype=np.float64))
    elif plan.greedy_or_none is not None and plan.greedy_or_none[plan.req].all():
        u = np.zeros((T, 2))  # greedy requests only: their test and token do not read u
    elif tensors:
        u = _uniforms_torch(plan, generators, "cpu").numpy()
    else:
        u = _uniforms_np(plan, generators)
    divs = [_core_divergence(d) for d in plan.divs]
    pi = pi_x = None
    if any(d is None for d in divs):
        pi, pi_x = _given_pi(plan, divs, p, q, draft, threads, zeros, normalize)
    out, bad, status, pos, stats = _core.verify(
        p, q, draft, plan.n, bonus, u, plan.eps_rows, divs, plan.which, plan.greedy_or_none, pi, pi_x, zeros == "keep", 0,
        True, threads_arg(threads), True, sum_rtol(dtypes[0], normalize), sum_rtol(dtypes[1], normalize),
    )
    if bad >= 0:
        if normalize and _rescalable(status, stats, dtypes):
            # Finite, nonnegative float64 rows whose sum has no float64 reciprocal (below 2⁻¹⁰²⁴ or
            # past DBL_MAX), which the core refuses: rescaled here, as solve does, and verified again.
            p, q = (x if x is None else check_sums(x, name, True) for x, name in ((p, "target_probs"), (q, "draft_probs")))
            out = _host_path(plan, draft, q, p, bonus, None, u, zeros, threads, False, True)
            return torch_from(out) if tensors else out
        raise _refusal(status, bad, pos, stats, dtypes, p.shape[1], plan.divs[0 if plan.which is None else int(plan.which[bad])], plan.n,
                       normalize)
    return torch_from(out) if tensors else out


def _rescalable(status, stats, dtypes) -> bool:
    """Whether a refusal of normalised rows is only that a float64 sum has no reciprocal (below 2⁻¹⁰²⁴
    or past DBL_MAX): such rows are rescaled, as solve does, and verified again."""
    return status == _core.StepStatus.bad_value.value and all(_row_error("", d, x, "", True) is None for d, x in zip(dtypes, (stats[:3], stats[3:])))


def _refusal(status, bad, pos, stats, dtypes, V, div, n, normalize) -> ValueError:
    """The error of a refused core call, naming the row of the flattened layout, its request and position."""
    starts = np.concatenate([[0], np.cumsum(np.asarray(n, dtype=np.int64))])
    return _step_error(status, bad, pos, V, div, lambda b, j: f"row {int(starts[b]) + j} (request {b}, position {j})", stats, dtypes,
                       normalize, names=("target_probs", "draft_probs"), ids=_ID_MESSAGES)


# rejection_sample's words for ids the core refused (placeholders are allowed there)
_ID_MESSAGES = {
    _core.StepStatus.bad_token: "draft_token_ids: an id outside [0, {V}) that is not the placeholder -1, at {where}",
    _core.StepStatus.bad_bonus: "bonus_token_ids: an id outside [0, {V}) for request {b}",
}


def torch_from(out: np.ndarray):
    import torch

    return torch.from_numpy(out)


def _given_pi(plan, divs, p, q, draft, threads, zeros, normalize):
    """π (dense drafts) or π_x (token-only) at the random, non-placeholder positions of requests whose
    divergence the core cannot evaluate, computed here; the core reads only those rows."""
    T = plan.T
    which = plan.which[plan.req] if plan.which is not None else np.zeros(T, dtype=np.int32)
    eps = plan.eps_rows if plan.eps_request is not None else np.full(T, plan.eps_rows[0])
    pi = np.zeros_like(p) if q is not None else None
    pi_x = np.zeros(T) if q is None else None
    for i, d in enumerate(divs):
        if d is not None:
            continue
        idx = np.flatnonzero((which == i) & ~plan.greedy[plan.req] & (draft >= 0))
        if not idx.size:
            continue
        if q is not None:
            pi[idx] = solve_pi(p[idx], q[idx], plan.divs[i], eps[idx], threads, zeros, normalize)
        else:
            rows = p[idx]
            px = rows[np.arange(idx.size), draft[idx]].astype(np.float64) / row_stats(rows)[0]
            pi_x[idx] = _onehot_np(px, eps[idx], plan.divs[i], zeros)
    return pi, pi_x


def _torch_path(plan, draft_token_ids, draft_probs, target_probs, bonus_token_ids, generators, uniforms, zeros, threads, validate, normalize):
    import torch

    from ._validate import _check_tensor_rows as check_rows
    from .torch_backend import _Chains, _Point, _row_sums, _verify, solve_point

    B, T = plan.B, plan.T
    p = torch.as_tensor(target_probs)
    device = p.device
    draft = torch.as_tensor(draft_token_ids, device=device)
    bonus = torch.as_tensor(bonus_token_ids, device=device).reshape(-1)
    q = None if draft_probs is None else torch.as_tensor(draft_probs, device=device)
    if p.ndim != 2 or p.shape[0] != T:
        raise ValueError(f"target_probs must have shape (num_tokens, V) = ({T}, V), got {tuple(p.shape)}")
    if q is not None and q.shape != p.shape:
        raise ValueError(f"draft_probs must have the shape of target_probs {tuple(p.shape)}, got {tuple(q.shape)}")
    V = p.shape[1]
    for name, x in (("draft_token_ids", draft), ("bonus_token_ids", bonus)):  # dtypes: no synchronisation
        if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
            raise TypeError(f"{name} must hold integer token ids, got dtype {x.dtype}")
    if validate:
        for name, x in (("target_probs", p), ("draft_probs", q)):
            if x is None:
                continue
            if not x.dtype.is_floating_point or x.element_size() < 4:
                raise TypeError(f"{name} must be float32 or float64, got {x.dtype}")
            if T:
                check_rows(x, name, plan.where, normalize)
        _check_ids(draft, bonus, V, B, T)
    draft = draft.to(torch.int64)
    bonus = bonus.to(torch.int64)

    def dev(a):
        return torch.as_tensor(a, device=device)

    if uniforms is not None:
        u = _given_uniforms(uniforms, T, lambda x: torch.as_tensor(x, dtype=torch.float64, device=device))
    else:
        u = _uniforms_torch(plan, generators, device) if plan.rnd.size else None

    # Each position's acceptance test, u0·q_x < π_x, and its rows at a rejection (torch_backend._verify):
    # greedy positions have π = δ_argmax and q_x = 1, token-only drafts q = δ_x.
    pi_x = torch.zeros(T, dtype=torch.float64, device=device)
    q_x = torch.ones(T, dtype=torch.float64, device=device)
    argmax = torch.full((T,), -1, dtype=torch.int64, device=device)
    grd, rnd = plan.grd, plan.rnd
    if grd.size:
        gi = dev(grd)
        argmax[gi] = (p if grd.size == T else p[gi]).argmax(-1)
        pi_x[gi] = (draft[gi] == argmax[gi]).to(torch.float64)
    point = sp = sq = None
    rows_of_rnd = None
    if rnd.size:
        ri = dev(rnd)
        xs = draft[ri].clamp(min=0)[:, None]
        P = p if rnd.size == T else p[ri]
        if q is None:
            px = P.gather(-1, xs)[:, 0].to(torch.float64) / _row_sums(P.to(torch.float64))  # p_x of p/Σp
            a = torch.empty_like(px)
            for div, idx in plan.groups:
                sel = slice(None) if idx is None else dev(idx)
                a[sel] = _onehot_torch(px[sel], dev(plan.eps_rnd if idx is None else plan.eps_rnd[idx]), div, zeros)
            pi_x[ri] = a
        else:
            Q = q if rnd.size == T else q[ri]
            # Only the thresholds of each row are kept (six numbers): π_x for the acceptance test
            # here, whole rows of π only where a request rejected (rows, below). Rows are normalised
            # in float64 (as the core does) where they are solved; elsewhere only their sums are
            # needed, summed as the core sums them (_row_sums: a plain sum is an ulp off, and so is p/Σp).
            sp = _row_sums(P.to(torch.float64))
            sq = _row_sums(Q.to(torch.float64))
            # Rows at budget 0 need no solve (π = p); the budgets are on the host, so this costs no sync.
            point = _Point.identity(rnd.size, P)
            for div, idx in plan.groups:
                sel = np.arange(rnd.size) if idx is None else idx
                sel = sel[plan.eps_rnd[sel] > 0]
                if sel.size == rnd.size:
                    Pn = P.to(torch.float64) / sp[:, None]
                    Qn = Q.to(torch.float64) / sq[:, None]
                    point = solve_point(Pn, Qn, div, dev(plan.eps_rnd), zeros)
                elif sel.size:
                    ii = dev(sel)
                    Pn = P[ii].to(torch.float64) / sp[ii, None]
                    Qn = Q[ii].to(torch.float64) / sq[ii, None]
                    point.put(ii, solve_point(Pn, Qn, div, dev(plan.eps_rnd[sel]), zeros))
                Pn = Qn = None
            # π answers q/Σq: the test and the residual read that q
            q_x[ri] = Q.gather(-1, xs)[:, 0].to(torch.float64) / sq
            pi_x[ri] = point.pi(P.gather(-1, xs)[:, 0].to(torch.float64) / sp, q_x[ri])
        rows_of_rnd = torch.full((T,), 0, dtype=torch.int64, device=device)
        rows_of_rnd[ri] = torch.arange(rnd.size, device=device)
    greedy = dev(plan.greedy[plan.req])

    def rows(ts):
        """(π, q, p) at positions ts, float64, whose residual (π − q)₊ the rule draws from."""
        p_t = p[ts].to(torch.float64)
        if not rnd.size:
            pi_t, q_t = p_t, torch.zeros_like(p_t)
        elif q is None:  # π off x is ∝ p: the residual is p without x, (p − p_x·δ_x)₊
            x = draft[ts].clamp(min=0)[:, None]
            pi_t, q_t = p_t, torch.zeros_like(p_t).scatter_(-1, x, p_t.gather(-1, x))
        else:
            j = rows_of_rnd[ts]
            pi_t = point.take(j).pi(P[j].to(torch.float64) / sp[j, None], Q[j].to(torch.float64) / sq[j, None])
            q_t = q[ts].to(torch.float64) / sq[j, None]
        if grd.size:
            g = greedy[ts][:, None]
            hot = torch.zeros_like(p_t).scatter_(-1, argmax[ts].clamp(min=0)[:, None], 1.0)
            pi_t, q_t, p_t = torch.where(g, hot, pi_t), torch.where(g, 0.0, q_t), torch.where(g, hot, p_t)
        return pi_t, q_t, p_t

    if u is None:  # greedy requests only: their test and token do not read u
        u = torch.zeros((T, 2), dtype=torch.float64, device=device)
    chains = _Chains.of(plan.n, plan.starts, plan.req, plan.pos, device)
    return _verify(pi_x, q_x, u, draft, bonus, chains, rows)


# ---------------------------------------------------------------- a reusable verifier


class Verifier:
    r""":func:`rejection_sample` for a decoding loop on host memory, with its settings and uniforms held between calls.

    Fixed divergence (a built-in, or a user generator with a :attr:`~mentored.Divergence.program`),
    budget, zeros mode and vocabulary. Each call is the one core call of :func:`rejection_sample`
    (dense or token-only drafts, greedy requests, placeholders, ragged ``num_draft_tokens``), with the
    same decisions given the same uniforms, made without the Python layout checks: the core refuses
    what :func:`rejection_sample` refuses, from its own pass over the rows (every row it is given
    finite, nonnegative and summing to 1 within its dtype's tolerance, any positive sum with
    ``normalize=True``; ids in range and integer; ``bonus_token_ids`` of shape (B,) or (B, 1)).
    ``generators``, input the core does not take as it is (lists, non-contiguous arrays, mixed
    dtypes), and every call with ``validate=True`` go through :func:`rejection_sample` itself, on
    uniforms from this verifier's generator unless ``generators`` are given. float32 and float64
    rows are both taken as they are: ``vocab_size`` and ``dtype`` describe the expected rows and
    convert nothing; ``max_tokens`` is how many rows of uniforms are drawn ahead at a time;
    ``normalize`` as in :func:`rejection_sample`.

    Examples
    --------
    >>> import numpy as np
    >>> from mentored.serving import Verifier
    >>> ver = Verifier(3, divergence="tv", budget=0.4, seed=0)
    >>> p = np.array([[0.6, 0.4, 0.0]]); q = np.array([[0.2, 0.8, 0.0]])
    >>> ver(np.array([1]), [1], q, p, np.array([[0]]), uniforms=np.array([[0.9, 0.5]]))
    array([[1, 0]], dtype=int32)
    """

    def __init__(self, vocab_size, *, divergence="kl", budget=0.0, zeros="keep", max_tokens=1024, dtype=np.float32, threads=1, seed=None, validate=False,
                 normalize=False):
        from ._validate import threads_arg

        self.V = int(vocab_size)
        self.div = _divergence(divergence)
        if _core_divergence(self.div) is None:
            raise ValueError(f"Verifier takes a divergence the core evaluates (a built-in, or one from Divergence.from_sympy "
                             f"with a program); {self.div.name!r} has none: use rejection_sample")
        self.budget = float(budget)
        if not self.budget >= 0:
            raise ValueError(f"budget must be nonnegative (inf allowed), got {self.budget}")
        self.zeros = check_zeros(zeros)
        self.threads = threads_arg(threads)
        self.validate = validate
        self.normalize = bool(normalize)
        # The core's tolerance on the rows' sums, by their dtype (its overloads take these two)
        self._rtol = {np.dtype(d): sum_rtol(d, self.normalize) for d in (np.float32, np.float64)}
        self.rng = np.random.default_rng(seed)
        self._dtype = np.dtype(dtype)
        self._divs = [int(self.div.compiled)]
        self._keep = self.zeros == "keep"
        self._alloc(int(max_tokens))

    def _alloc(self, T):
        self._eps = np.array([self.budget])  # one budget for every row (the core broadcasts it)
        self._u = np.empty((0, 2))  # uniforms drawn ahead from self.rng, handed out in order
        self._ui = 0
        self._chunk = max(int(T), 1)

    def _draw(self, T):
        """The next T pairs of this verifier's uniforms: the stream of ``rng.random`` drawn in advance,
        since one draw costs about as much as all the rest of a step's Python."""
        i, j = self._ui, self._ui + T
        if j > self._u.shape[0]:
            self._u = np.concatenate([self._u[i:], self.rng.random((max(self._chunk, T), 2))])
            i, j = 0, T
        self._ui = j
        return self._u[i:j]

    def __call__(self, draft_token_ids, num_draft_tokens, draft_probs, target_probs, bonus_token_ids, *, is_greedy=None, generators=None, uniforms=None):
        # One core call and a few attribute reads: after the core has streamed the rows, each Python
        # operation runs on a cold cache. The core takes numpy arrays of one float dtype,
        # C-contiguous, as they are (no copy): anything else raises TypeError there, a shape it
        # refuses ValueError, and both go to rejection_sample, which converts or names the problem.
        draft = draft_token_ids
        if self.validate or generators:
            return self._fallback(draft, num_draft_tokens, draft_probs, target_probs, bonus_token_ids, is_greedy, generators, uniforms)
        T = len(draft)
        if uniforms is None:
            u = self._draw(T)
        else:
            u = np.ascontiguousarray(_given_uniforms(uniforms, T, lambda x: np.asarray(x, dtype=np.float64)))
        rtol = self._rtol.get(getattr(target_probs, "dtype", None), np.inf)  # another dtype: TypeError in the core
        try:
            out, bad, status, pos, stats = _core.verify(
                target_probs, draft_probs, draft, num_draft_tokens, bonus_token_ids, u, self._eps, self._divs, None, is_greedy, None, None,
                self._keep, 0, True, self.threads, True, rtol, rtol,
            )
        except (TypeError, ValueError):
            return self._fallback(draft, num_draft_tokens, draft_probs, target_probs, bonus_token_ids, is_greedy, None, u)
        if bad < 0:
            return out
        dtypes = (target_probs.dtype, target_probs.dtype if draft_probs is None else draft_probs.dtype)
        if self.normalize and _rescalable(status, stats, dtypes):
            return self._fallback(draft, num_draft_tokens, draft_probs, target_probs, bonus_token_ids, is_greedy, None, u)
        raise _refusal(status, bad, pos, stats, dtypes, target_probs.shape[1], self.div, num_draft_tokens, self.normalize)

    def _fallback(self, draft, n, q, p, bonus, is_greedy, generators, uniforms):
        if uniforms is None and not generators and getattr(draft, "ndim", 0) == 1:
            uniforms = self._draw(draft.shape[0])  # this verifier's stream, seeded or not
        return rejection_sample(
            draft, n, q, p, bonus, divergence=self.div, budget=self.budget, is_greedy=is_greedy, generators=generators,
            uniforms=uniforms, zeros=self.zeros, threads=self.threads or None, normalize=self.normalize,
        )
