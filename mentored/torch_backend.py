r"""Mentored verification in torch: the solve and the speculative step on any device.

The same mathematics as the C++ core (docs/theory.md §3–4), written with sorts, prefix sums and a
bisection over :math:`s` vectorised over rows, so that it runs where the logits live (CPU or
CUDA) without a host round trip. Built-in divergences only; it is checked against
:func:`mentored.solve` in the tests. torch is imported lazily by :func:`mentored.speculative_step`.

On a row, with ratios :math:`r_i = q_i/p_i`,

.. math::

    t\,P_{r<t} - Q_{r<t} = \mathrm{TV}(p, q) - s \;\Rightarrow\; t_{lo}(s), \qquad
    Q_{r>t} - t\,P_{r>t} = D_{up} - s \;\Rightarrow\; t_{hi}(s),

both piecewise affine in :math:`t` with breakpoints at the sorted ratios, so each threshold is a
count of breakpoints below a level and one division. :math:`D_f(\pi(s)\|p)` is nondecreasing in
:math:`s`; the budget's :math:`s` is found by bisection (64 halvings in float64).
"""

from __future__ import annotations

import math

import numpy as np
try:
    import torch
except ImportError as exc:
    raise ImportError("mentored.torch_backend needs torch: pip install 'mentored[torch]'") from exc

from .divergences import BUILTIN_NAMES, divergence as _divergence
from .speculative import check_step_inputs, check_zeros, step_budgets

__all__ = ["solve", "speculative_step"]

_LN2 = math.log(2.0)
_INF = math.inf
_FAR = 1e100  # ratios above this: D terms from π and p (docs/reliability.md, denormal targets)


# Tilted generators f̃(t) = f(t) − f'(1)(t − 1) ≥ 0 (same D on the simplex, no cancellation),
# with their f̃∞, as in cpp/mentored/generators.hpp.
def _f_tilde(name: str, t: torch.Tensor) -> torch.Tensor:
    if name == "tv":
        return 0.5 * (t - 1).abs()
    if name == "kl":
        return torch.xlogy(t, t) - t + 1
    if name == "reverse_kl":
        return -torch.log(t) + t - 1
    if name == "chi2":
        return (t - 1) ** 2
    if name == "neyman_chi2":
        return (t - 1) ** 2 / t
    if name == "hellinger":
        return (t.sqrt() - 1) ** 2
    if name == "js":
        return 0.5 * (torch.xlogy(t, 2 * t / (1 + t)) + torch.log(2 / (1 + t)))
    raise ValueError(f"the torch backend knows the built-in divergences {BUILTIN_NAMES}, not {name!r}")


_F_INF_TILDE = {"tv": 0.5, "kl": _INF, "reverse_kl": 1.0, "chi2": _INF, "neyman_chi2": 1.0, "hellinger": 1.0, "js": 0.5 * _LN2}


class _Rows:
    """The sorted-ratio structure of a batch of rows (R, V), float64."""

    def __init__(self, p: torch.Tensor, q: torch.Tensor):
        self.p, self.q = p, q
        pos = p > 0
        self.pos = pos
        # r = q/p; p = 0 tokens sit at +inf (q > 0) or at 1 (q = 0: they carry nothing).
        r = torch.where(pos, q / torch.where(pos, p, torch.ones_like(p)), torch.where(q > 0, _INF, 1.0))
        self.r = r
        self.q0 = torch.where(pos, 0.0, q).sum(-1)
        self.tv = (p - q).clamp(min=0).sum(-1)
        self.d_up = self.tv - self.q0
        zero = torch.zeros_like(p[:, :1])
        # Lower side, ascending: g(r_j) = r_j P_{<j} − Q_{<j}, nondecreasing; t_lo solves g(t) = TV − s.
        r_up, order = torch.sort(r, dim=-1)
        ps, qs = p.gather(-1, order), q.gather(-1, order)
        self.lo_r = r_up
        self.lo_P = torch.cat([zero, ps.cumsum(-1)], -1)  # exclusive prefix sums, (R, V + 1)
        self.lo_Q = torch.cat([zero, qs.cumsum(-1)], -1)
        self.lo_g = torch.where(torch.isinf(r_up), _INF, r_up * self.lo_P[:, :-1] - self.lo_Q[:, :-1])
        # Upper side, descending over p > 0: h(r_j) = Q_{<j} − r_j P_{<j}, nondecreasing in j; t_hi solves h(t) = D_up − s.
        r_pos = torch.where(pos, r, 0.0)
        r_dn, order = torch.sort(r_pos, dim=-1, descending=True)
        ps, qs = p.gather(-1, order), torch.where(pos, q, 0.0).gather(-1, order)
        self.hi_r = r_dn
        # Ratios past _FAR (p denormal next to q): their D terms need π itself (below). Rare, so the
        # extra work is done only when some row has one (one host synchronisation per solve).
        self.far = bool(((r > _FAR) & pos).any())
        self.hi_P = torch.cat([zero, ps.cumsum(-1)], -1)
        self.hi_Q = torch.cat([zero, qs.cumsum(-1)], -1)
        # 0·∞ = 0 where nothing lies above (a ratio overflowed to inf, e.g. q/p with p denormal): an
        # inf ratio above another gives h = −∞, i.e. "capped at every finite t_hi", as it should.
        P_above = self.hi_P[:, :-1]
        self.hi_h = torch.where(P_above > 0, self.hi_Q[:, :-1] - r_dn * P_above, self.hi_Q[:, :-1])

    def s_max(self, name: str, zeros: str = "continue") -> torch.Tensor:
        """The end of the curve: TV − Q0 where mass on {p = 0} is refused (f∞ = ∞, or zeros="keep"), else TV."""
        if zeros == "keep" or math.isinf(_F_INF_TILDE[name]):
            return torch.minimum(self.tv, self.d_up)
        return self.tv

    def thresholds(self, s: torch.Tensor):
        """(t_lo, t_hi, hi_num, hi_den) at s (R,), s in [0, TV].

        ``t_hi = hi_num/hi_den`` (``inf`` when nothing is capped); the pair is kept because the
        quotient may overflow when the capped target mass ``hi_den`` is denormal, while the capped
        values ``p_i·t_hi = (p_i/hi_den)·hi_num`` do not.
        """
        c = (self.tv - s).clamp(min=0)
        m = (self.lo_g < c[:, None]).sum(-1, keepdim=True)
        P, Q = self.lo_P.gather(-1, m)[:, 0], self.lo_Q.gather(-1, m)[:, 0]
        t_lo = torch.where(P > 0, (c + Q) / torch.where(P > 0, P, 1.0), 0.0)  # P = 0 only at s = TV: t_lo = 0
        t_lo = torch.where(s <= 0, torch.ones_like(t_lo), t_lo.clamp(0.0, 1.0))
        c2 = self.d_up - s
        m = (self.hi_h <= c2[:, None]).sum(-1, keepdim=True)  # h is nondecreasing along the descending order
        P, Q = self.hi_P.gather(-1, m)[:, 0], self.hi_Q.gather(-1, m)[:, 0]
        open_end = (c2 <= 0) | (P <= 0)
        one = torch.ones_like(P)
        num = torch.where(open_end, one, Q - c2)
        den = torch.where(open_end, one, P)
        num = torch.maximum(num, den)  # t_hi ≥ 1
        num = torch.where(s <= 0, one, num)
        den = torch.where(s <= 0, one, den)
        open_end = open_end & (s > 0)
        t_hi = torch.where(open_end, _INF, num / den)
        return t_lo, t_hi, num, den, open_end

    def _body(self, s: torch.Tensor):
        """π on {p > 0} at s, division-free: max(t_lo p_i, min(q_i, t_hi p_i)) (docs/theory.md §3)."""
        t_lo, t_hi, num, den, open_end = self.thresholds(s)
        # p_i·t_hi, without forming t_hi where it overflows; ≥ p_i since t_hi ≥ 1.
        cap = torch.where(torch.isfinite(t_hi)[:, None], self.p * t_hi[:, None], (self.p / den[:, None]) * num[:, None])
        cap = torch.where(open_end[:, None], _INF, cap)
        body = torch.maximum(t_lo[:, None] * self.p, torch.minimum(self.q, cap))
        return body, t_lo, t_hi

    def pi(self, s: torch.Tensor) -> torch.Tensor:
        body, _, _ = self._body(s)
        extra = (s - self.d_up).clamp(min=0) / torch.where(self.q0 > 0, self.q0, 1.0)
        return torch.where(self.pos, body, self.q * extra[:, None])

    def divergence(self, name: str, s: torch.Tensor) -> torch.Tensor:
        if not self.far:
            t_lo, t_hi, _, _, _ = self.thresholds(s)
            t = torch.minimum(torch.maximum(self.r, t_lo[:, None]), t_hi[:, None])
            terms = torch.where(self.pos, self.p * _f_tilde(name, torch.where(self.pos, t, 1.0)), 0.0)
            return terms.sum(-1) + self._tail(name, s)
        body, t_lo, t_hi = self._body(s)
        t = torch.minimum(torch.maximum(self.r, t_lo[:, None]), t_hi[:, None])
        # Where the ratio is huge (p denormal: q/p overflows, or f̃(t) would), p f̃(π/p) in its
        # perspective form, from π and p; elsewhere p f̃(t) as the C++ core computes it.
        far = self.pos & (t > _FAR)
        ok = self.pos & ~far
        terms = torch.where(ok, self.p * _f_tilde(name, torch.where(ok, t, 1.0)), 0.0)
        terms = torch.where(far, _perspective(name, torch.where(far, body, 1.0), torch.where(far, self.p, 1.0)), terms)
        return terms.sum(-1) + self._tail(name, s)

    def _tail(self, name: str, s: torch.Tensor) -> torch.Tensor:
        extra = (s - self.d_up).clamp(min=0)
        f_inf = _F_INF_TILDE[name]
        return torch.where(extra > 0, extra * f_inf, 0.0) if math.isinf(f_inf) else extra * f_inf


def _perspective(name: str, pi: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """p f̃(π/p) for p > 0 without forming π/p (which overflows when p is denormal)."""
    if name == "tv":
        return 0.5 * (pi - p).abs()
    if name == "kl":
        return torch.xlogy(pi, pi) - pi * torch.log(p) - pi + p
    if name == "reverse_kl":
        return p * (torch.log(p) - torch.log(pi)) + pi - p
    if name == "chi2":
        return (pi - p) ** 2 / p
    if name == "neyman_chi2":
        return torch.where(pi > 0, (pi - p) ** 2 / torch.where(pi > 0, pi, 1.0), _INF)
    if name == "hellinger":
        return (pi.sqrt() - p.sqrt()) ** 2
    if name == "js":
        m = pi + p
        return 0.5 * (torch.xlogy(pi, 2 * pi / m) + p * torch.log(2 * p / m))
    raise ValueError(f"the torch backend knows the built-in divergences {BUILTIN_NAMES}, not {name!r}")


def solve(target: torch.Tensor, draft: torch.Tensor, *, divergence="kl", budget=0.0, zeros="continue") -> torch.Tensor:
    r""":math:`\pi` of :math:`\mathrm{MD}(f, \varepsilon)` for each row of (R, V) tensors, in torch.

    Rows must be distributions, to the same relative tolerance as :func:`mentored.solve` (1e-6 for
    float64, 1e-3 for float32). ``budget`` is a float or an (R,) tensor/array. ``zeros="keep"`` adds
    the constraint :math:`\pi_i = 0` where :math:`p_i = 0` (docs/theory.md §8: the curve stops at
    :math:`s = \mathrm{TV} - Q_0` for every divergence); ``"continue"`` is the problem as stated.
    Returns :math:`\pi` in the dtype and on the device of ``target`` (computed in float64).
    """
    name = builtin_name(divergence)
    if target.ndim != 2 or target.shape != draft.shape:
        raise ValueError(f"target and draft must be (R, V) tensors of one shape, got {tuple(target.shape)} and {tuple(draft.shape)}")
    check_rows(target, "target")
    check_rows(draft, "draft")
    p, q = target.to(torch.float64), draft.to(torch.float64)
    R = p.shape[0]
    b = np.asarray(budget, dtype=np.float64)
    if b.ndim and b.shape != (R,):
        raise ValueError(f"budget must be a scalar or have one value per row ({R}), got shape {b.shape}")
    if np.any(np.isnan(b)) or np.any(b < 0):
        raise ValueError("budget must be nonnegative (inf allowed) and not NaN")
    eps = torch.as_tensor(np.broadcast_to(b, (R,)).copy(), device=p.device)
    return solve_rows(p, q, name, eps, zeros).to(target.dtype)


def builtin_name(divergence) -> str:
    """The name of a built-in divergence, or a ValueError for a custom one."""
    div = _divergence(divergence)
    name = div.name
    # By identity, not by name: a custom divergence may be called "kl" and still be another f.
    if name not in BUILTIN_NAMES or div is not _divergence(name):
        raise ValueError(
            f"the torch backend knows the built-in divergences {BUILTIN_NAMES}; {name!r} here is a custom "
            "divergence: pass numpy arrays to mentored.solve for it"
        )
    return name


_SUM_RTOL = {torch.float32: 1e-3, torch.float64: 1e-6}  # as mentored._validate, per dtype


def check_rows(x: torch.Tensor, name: str, index=None) -> None:
    """Finite, nonnegative rows summing to 1 (relative tolerance per dtype, as numpy's); host sync.

    ``index(r)`` names row ``r`` of the flattened (…, V) tensor in the message (default: ``row r``).
    """
    flat = x.reshape(-1, x.shape[-1])
    where = index or (lambda r: f"row {r}")
    bad = ~torch.isfinite(flat).all(-1)
    if bool(bad.any()):
        raise ValueError(f"{name} contains NaN or infinite entries ({where(int(bad.nonzero()[0, 0]))})")
    neg = (flat < 0).any(-1)
    if bool(neg.any()):
        raise ValueError(f"{name} has negative entries ({where(int(neg.nonzero()[0, 0]))})")
    rtol = _SUM_RTOL.get(flat.dtype, 1e-6)
    sums = flat.to(torch.float64).sum(-1)
    off = (sums - 1).abs() > rtol
    if bool(off.any()):
        r = int(off.nonzero()[0, 0])
        raise ValueError(
            f"{name} rows must sum to 1 (relative tolerance {rtol:g} for {flat.dtype}); {where(r)} sums to {float(sums[r])!r}"
        )


def solve_rows(p: torch.Tensor, q: torch.Tensor, name: str, eps: torch.Tensor, zeros: str = "continue") -> torch.Tensor:
    """π in float64 for float64 rows (R, V) and budgets ``eps`` (R,) on their device: no checks, no host sync."""
    p = p / p.sum(-1, keepdim=True)
    q = q / q.sum(-1, keepdim=True)
    rows = _Rows(p, q)
    s_hi = rows.s_max(name, zeros)
    ok_end = rows.divergence(name, s_hi) <= eps
    lo = torch.zeros_like(s_hi)
    hi = s_hi.clone()
    for _ in range(64):
        mid = 0.5 * (lo + hi)
        good = rows.divergence(name, mid) <= eps
        lo = torch.where(good, mid, lo)
        hi = torch.where(good, hi, mid)
    s = torch.where(ok_end, s_hi, lo)
    s = torch.where(eps <= 0, torch.zeros_like(s), s)
    return rows.pi(s)


def verify(pi: torch.Tensor, q: torch.Tensor, draft: torch.Tensor, bonus: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The accept/residual rule of ``cpp/mentored/speculative.hpp`` on (B, k, V) tensors."""
    B, k, V = q.shape
    pi64, q64 = pi.to(torch.float64), q.to(torch.float64)
    idx = draft.unsqueeze(-1)
    pi_x, q_x = pi64.gather(-1, idx)[..., 0], q64.gather(-1, idx)[..., 0]
    accept = u[..., 0] * q_x < pi_x  # (B, k)
    residual = (pi64 - q64).clamp(min=0)
    empty = residual.sum(-1, keepdim=True) <= 0
    weights = torch.where(empty, pi64, residual)
    cum = weights.cumsum(-1)
    level = u[..., 1:2] * cum[..., -1:]
    # the first i with cum_i > level and w_i > 0; past the end only by rounding: the last with mass
    hit = (cum > level) & (weights > 0)
    ar = torch.arange(V, device=q.device)
    first = torch.where(hit, ar, V).min(-1).values
    last = torch.where(weights > 0, ar, -1).max(-1).values
    resampled = torch.where(first < V, first, last)
    rejected = ~accept
    any_rej = rejected.any(-1)
    j_star = torch.where(any_rej, rejected.to(torch.int64).argmax(-1), k)  # first rejection, or k
    pos = torch.arange(k + 1, device=q.device)
    out = torch.full((B, k + 1), -1, dtype=torch.int64, device=q.device)
    drafts = torch.cat([draft, torch.zeros_like(draft[:, :1])], -1)
    out = torch.where(pos < j_star[:, None], drafts, out)
    res_tok = resampled.gather(-1, j_star.clamp(max=max(k - 1, 0))[:, None])[:, 0] if k else bonus[:, 0]
    at = pos == j_star[:, None]
    out = torch.where(at & any_rej[:, None], res_tok[:, None], out)
    out = torch.where(at & ~any_rej[:, None], bonus[:, :1].to(torch.int64), out)
    return out


def speculative_step(
    target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, *, divergence="kl", budget=0.0, seed=None, uniforms=None,
    zeros="continue",
) -> torch.Tensor:
    """:func:`mentored.speculative_step` for torch tensors, computed on their device."""
    check_zeros(zeros)
    p, bonus, q, draft = check_step_inputs(target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, torch.as_tensor)
    device = p.device
    B, k, V = q.shape
    budgets = step_budgets(budget, B, k)
    if uniforms is None:
        gen = torch.Generator(device=device)
        gen.manual_seed(int(seed) if seed is not None else int(torch.seed()) % (2**63))
        u = torch.rand((B, k, 2), generator=gen, device=device, dtype=torch.float64)
    else:
        u = torch.as_tensor(uniforms, dtype=torch.float64, device=device)
        if tuple(u.shape) != (B, k, 2):
            raise ValueError(f"uniforms must have shape (B, k, 2) = ({B}, {k}, 2), got {tuple(u.shape)}")
        if not bool(((u >= 0) & (u < 1)).all()):
            raise ValueError("uniforms must lie in [0, 1)")
    bonus = bonus.to(device=device, dtype=torch.int64)
    if k == 0:
        return bonus.clone()
    dtype = torch.float32 if p.dtype == q.dtype == torch.float32 else torch.float64
    q = q.to(dtype)
    pi = solve(p[:, :k, :].reshape(B * k, V).to(dtype), q.reshape(B * k, V), divergence=divergence, budget=budgets.ravel(), zeros=zeros)
    return verify(pi.reshape(B, k, V), q, draft.to(device=device, dtype=torch.int64), bonus, u)
