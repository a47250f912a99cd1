r"""Mentored verification in torch: the solve and the speculative step on any device.

The same mathematics as the C++ core (docs/theory.md §3–4), written with one sort per row, prefix
sums and a search over :math:`s` vectorised over rows, so that it runs where the logits live (CPU or
CUDA) without a host round trip. Built-in divergences only; it is checked against
:func:`mentored.solve` in the tests. torch is imported lazily by :func:`mentored.speculative_step`.

On a row, with ratios :math:`r_i = q_i/p_i`,

.. math::

    t\,P_{r<t} - Q_{r<t} = \mathrm{TV}(p, q) - s \;\Rightarrow\; t_{lo}(s), \qquad
    Q_{r>t} - t\,P_{r>t} = D_{up} - s \;\Rightarrow\; t_{hi}(s),

both piecewise affine in :math:`t` with breakpoints at the sorted ratios, so each threshold is a
``searchsorted`` on the values at the breakpoints and one division. With suffix sums of
:math:`p_i \tilde f(r_i)` on each side, :math:`D_f(\pi(s)\|p)` costs :math:`O(\log V)` per row
and per :math:`s` (docs/theory.md §4); it is nondecreasing in :math:`s`, and the budget's :math:`s`
is found by a k-ary search (255 points per row per step and 9 steps on a GPU, 15 and 18 on a
CPU: a bracket :math:`2^{-72}` of the curve's length). One sort per row, everything else
:math:`O(V)` or less per row, and no host synchronisation: the whole solve is queued on the
device. Written for a GPU: on a CPU the sort alone costs several lossless verification steps, and
:func:`mentored.serving.rejection_sample` hands CPU tensors to the core (docs/serving.md, "The
device path").
"""

from __future__ import annotations

import math

import numpy as np
try:
    import torch
except ImportError as exc:
    raise ImportError("mentored.torch_backend needs torch: pip install 'mentored[torch]'") from exc

from .divergences import BUILTIN_NAMES, divergence as _divergence
from ._validate import _check_step_inputs as check_step_inputs  # the step checks shared with numpy
from ._validate import _check_tensor_rows as check_rows
from ._validate import _check_zeros as check_zeros
from ._validate import _step_budgets as step_budgets

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


_DOWN = 2.0**-128  # upper-side ratios are held scaled, r·2⁻¹²⁸, as in cpp/mentored/path.hpp
_UP = 2.0**128
# The budget search: (points per step, steps), the bracket shrinking by the first each step, to 2⁻⁷²
# of the curve's length (finer than the 64 halvings of [0, s_max] it replaces). On a GPU few wide
# steps (each is ~40 kernel launches); on a CPU narrow ones, whose small ops stay on the calling
# thread (torch runs searchsorted in parallel past 200 queries, and a busy machine stalls that).
_SEARCH = {"cpu": (16, 18)}
_SEARCH_DEVICE = (256, 9)


class _Rows:
    """The sorted-ratio structure of a batch of rows (R, V), float64 (docs/theory.md §4).

    One sort per row, by a key that puts the target's favoured side first, by ratio descending, then
    the other side by ratio ascending, then ties and the target's zeros::

        [ r > 1, from the largest down | r < 1, from 0 up | r = 1 and p = 0 ]

    so that the prefix sums of p and q on each side accumulate from its extreme (the mass capped at
    t_hi, held at t_lo, however small, is a sum of its own tokens), and the suffix sums of p·f̃(r)
    accumulate from ratio 1 (the unclipped tokens). Down and Up are piecewise affine between sorted
    ratios; the thresholds at s are a ``searchsorted`` on their values at the breakpoints and one
    division, and D_f(π(s)‖p) is O(1) per row from the tables (``divergence``). The budget search
    evaluates D at many points per row per step (``_SEARCH``). Nothing is read back to the host.

    Ratios of the upper side past DBL_MAX (p denormal next to q) are ordered by their scaled value
    r·2⁻¹²⁸; their terms p f̃(r) are taken in perspective form from (q, p), and the capped group's
    P_hi·f̃(t_hi) from (capped mass, P_hi), so that nothing overflows (docs/reliability.md).
    """

    def __init__(self, p: torch.Tensor, q: torch.Tensor, name: str):
        self.p, self.q, self.name = p, q, name
        up = (q > p) & (p > 0)
        lo = q < p  # implies p > 0
        r = q / p  # inf or NaN where p = 0: those tokens are keyed by the masks alone
        u = torch.where(torch.isfinite(r), r * _DOWN, (q * _DOWN) / p)  # r·2⁻¹²⁸, also where r overflows
        key = torch.where(up, u.neg_(), torch.where(lo, r, 2.0))
        del r, u
        key, order = torch.sort(key, dim=-1)
        ps, qs = p.gather(-1, order), q.gather(-1, order)
        del order
        in_hi = key < 0
        in_lo = (key >= 0) & (key < 1.5)
        R = p.shape[0]
        self.q0 = torch.where(p > 0, 0.0, q).sum(-1)
        self.tv = (p - q).clamp_(min=0).sum(-1)
        self.d_up = self.tv - self.q0
        zero = torch.zeros((R, 1, 2), dtype=p.dtype, device=p.device)
        # Exclusive prefix sums, (R, V + 1, 2) of (p, q): the upper side starts at index 0, so the plain
        # sums are its own; the lower side's are masked to it.
        pq = torch.stack([ps, qs], -1)
        self.E_hi = torch.cat([zero, pq.cumsum(1)], 1)
        pq.mul_(in_lo[..., None])
        self.E_lo = torch.cat([zero, pq.cumsum(1)], 1)
        del pq
        # p·f̃(r) per token, in perspective form from (q, p): finite however large r is (p denormal).
        F = torch.where(in_hi | in_lo, _perspective(name, qs, torch.where(in_hi | in_lo, ps, 1.0)), 0.0)
        del ps, qs
        # Suffix sums of F on each side, (R, V + 1, 2): column 0 the upper side, column 1 the lower.
        FF = torch.stack([torch.where(in_hi, F, 0.0), F.masked_fill_(~in_lo, 0.0)], -1).flip(1)  # F may be inf: no 0·inf
        del F
        self.S = torch.cat([FF.cumsum_(1).flip(1), zero], 1)
        del FF
        # Breakpoints. Lower: g_k = r_k P_{<k} − Q_{<k} (nondecreasing); t_lo solves g(t) = TV − s.
        # Upper: h_m = Q_{<m} − r_m P_{<m} (nondecreasing along the descending side); t_hi solves
        # h(t) = D_up − s. Outside its side each is −inf/+inf, so that one searchsorted on the whole
        # row counts the side's breakpoints below a level; cummax absorbs rounding.
        g = torch.addcmul(-self.E_lo[:, :-1, 1], key, self.E_lo[:, :-1, 0])
        g = torch.where(in_lo, g, torch.where(in_hi, -_INF, _INF))
        self.g = g.cummax(-1).values
        del g
        # r_m P_{<m} as u_m·(P·2¹²⁸) with u = −key on the upper side: finite past DBL_MAX.
        h = torch.addcmul(self.E_hi[:, :-1, 1], key, self.E_hi[:, :-1, 0] * _UP)
        self.h = torch.where(in_hi, h, _INF).cummax(-1).values
        del h
        self.key = key
        self.n_hi = in_hi.sum(-1)
        self.n_lo = in_lo.sum(-1)

    def s_max(self, zeros: str = "continue") -> torch.Tensor:
        """The end of the curve: TV − Q0 where mass on {p = 0} is refused (f∞ = ∞, or zeros="keep"), else TV."""
        if zeros == "keep" or math.isinf(_F_INF_TILDE[self.name]):
            return torch.minimum(self.tv, self.d_up)
        return self.tv

    def _at(self, s: torch.Tensor):
        """Thresholds and table entries at s (R, K): the dict of what π(s) and D(s) need."""
        c = (self.tv[:, None] - s).clamp(min=0)
        k = torch.searchsorted(self.g, c)  # index in the row of the first unclipped lower token
        PL = self.E_lo[..., 0].gather(-1, k)
        QL = self.E_lo[..., 1].gather(-1, k)
        t_lo = torch.where(PL > 0, (c + QL) / torch.where(PL > 0, PL, 1.0), 0.0)  # PL = 0 only at s = TV
        # within the gap of sorted ratios found, and in [0, 1]
        V = self.key.shape[-1]
        first = k <= self.n_hi[:, None]
        r_below = torch.where(first, 0.0, self.key.gather(-1, (k - 1).clamp(min=0)))
        last = k >= (self.n_hi + self.n_lo)[:, None]
        r_above = torch.where(last, 1.0, self.key.gather(-1, k.clamp(max=V - 1)))
        t_lo = torch.minimum(torch.maximum(t_lo, r_below), r_above).clamp(0.0, 1.0)
        t_lo = torch.where(s <= 0, 1.0, t_lo)
        c2 = self.d_up[:, None] - s
        m = torch.searchsorted(self.h, c2, right=True)  # capped upper tokens
        PH = self.E_hi[..., 0].gather(-1, m)
        QH = self.E_hi[..., 1].gather(-1, m)
        open_end = (c2 <= 0) | (PH <= 0)
        m = torch.where(open_end, 0, m)  # nothing capped: every upper token is at q
        one = torch.ones_like(PH)
        num = torch.where(open_end, one, QH - c2)
        den = torch.where(open_end, one, PH)
        num = torch.maximum(num, den)  # t_hi ≥ 1
        num = torch.where(s <= 0, one, num)
        den = torch.where(s <= 0, one, den)
        open_end = open_end & (s > 0)
        t_hi = torch.where(open_end, _INF, num / den)
        return dict(k=k, m=m, PL=PL, t_lo=t_lo, t_hi=t_hi, num=num, den=den, open_end=open_end, s=s)

    def divergence(self, s: torch.Tensor, at=None) -> torch.Tensor:
        """D_f(π(s)‖p) at s (R, K), O(log V) per point (docs/theory.md §4)."""
        a = at or self._at(s)
        name = self.name
        PL, t_lo = a["PL"], a["t_lo"]
        d = torch.where(PL > 0, PL * _f_tilde(name, t_lo), 0.0)
        d = d + self.S[..., 1].gather(-1, a["k"]) + self.S[..., 0].gather(-1, a["m"])
        num, den, t_hi, open_end = a["num"], a["den"], a["t_hi"], a["open_end"]
        near = t_hi <= _FAR
        capped = torch.where(near, den * _f_tilde(name, torch.where(near, t_hi, 1.0)), _perspective(name, num, den))
        d = d + torch.where(open_end | (a["m"] == 0), 0.0, capped)
        return d + self._tail(s)

    def _tail(self, s: torch.Tensor) -> torch.Tensor:
        extra = (s - self.d_up[:, None]).clamp(min=0)
        f_inf = _F_INF_TILDE[self.name]
        return torch.where(extra > 0, extra * f_inf, 0.0) if math.isinf(f_inf) else extra * f_inf

    def search(self, eps: torch.Tensor, zeros: str = "continue") -> torch.Tensor:
        """The largest s ≤ s_max with D_f(π(s)‖p) ≤ ε, per row (R,): a k-ary search, no host sync."""
        s_hi = self.s_max(zeros)
        e = eps[:, None]
        ok_end = (self.divergence(s_hi[:, None]) <= e)[:, 0]
        lo = torch.zeros_like(s_hi)
        hi = s_hi
        K, steps = _SEARCH.get(s_hi.device.type, _SEARCH_DEVICE)
        frac = torch.arange(1, K, dtype=s_hi.dtype, device=s_hi.device) / K
        for _ in range(steps):
            pts = lo[:, None] + (hi - lo)[:, None] * frac
            good = (self.divergence(pts) <= e).to(torch.int64).cumprod(-1)  # D is nondecreasing in s
            n = good.sum(-1, keepdim=True)
            lo = torch.where(n[:, 0] > 0, pts.gather(-1, (n - 1).clamp(min=0))[:, 0], lo)
            hi = torch.where(n[:, 0] < K - 1, pts.gather(-1, n.clamp(max=K - 2))[:, 0], hi)
        s = torch.where(ok_end, s_hi, lo)
        return torch.where(eps <= 0, torch.zeros_like(s), s)

    def point(self, s: torch.Tensor) -> "_Point":
        a = self._at(s[:, None])
        z = (s - self.d_up).clamp(min=0) / torch.where(self.q0 > 0, self.q0, 1.0)
        return _Point(a["t_lo"][:, 0], a["t_hi"][:, 0], a["num"][:, 0], a["den"][:, 0], a["open_end"][:, 0], z)

    def pi(self, s: torch.Tensor) -> torch.Tensor:
        return self.point(s).pi(self.p, self.q)


class _Point:
    """A point of the curve per row: thresholds (t_hi as num/den, see below) and the share z of q on {p = 0}.

    ``t_hi = num/den`` (``inf`` when nothing is capped); the pair is kept because the quotient may
    overflow when the capped target mass ``den`` is denormal, while the capped values
    ``p_i·t_hi = (p_i/den)·num`` do not. π is computed for any rows (``pi``) or tokens (``pi_at``)
    of the solved ones, so that a verifier forms only the rows it draws from.
    """

    def __init__(self, t_lo, t_hi, num, den, open_end, z):
        self.t_lo, self.t_hi, self.num, self.den, self.open_end, self.z = t_lo, t_hi, num, den, open_end, z

    @staticmethod
    def identity(n: int, like: torch.Tensor) -> "_Point":
        """s = 0 on n rows: t_lo = t_hi = 1, π = p."""
        f = lambda v: torch.full((n,), v, dtype=torch.float64, device=like.device)  # noqa: E731
        return _Point(f(1.0), f(1.0), f(1.0), f(1.0), torch.zeros(n, dtype=torch.bool, device=like.device), f(0.0))

    def put(self, rows: torch.Tensor, other: "_Point") -> None:
        for mine, theirs in zip(self._fields(), other._fields()):
            mine[rows] = theirs

    def _fields(self):
        return (self.t_lo, self.t_hi, self.num, self.den, self.open_end, self.z)

    def take(self, rows: torch.Tensor) -> "_Point":
        return _Point(*(x[rows] for x in (self.t_lo, self.t_hi, self.num, self.den, self.open_end, self.z)))

    def pi(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """π on rows (R, V) or tokens (R, …): max(t_lo p_i, min(q_i, t_hi p_i)), q_i·z where p_i = 0."""
        shape = (-1,) + (1,) * (p.ndim - 1)
        t_lo, t_hi, num, den, open_end, z = (x.reshape(shape) for x in (self.t_lo, self.t_hi, self.num, self.den, self.open_end, self.z))
        # p_i·t_hi, without forming t_hi where it overflows; ≥ p_i since t_hi ≥ 1.
        cap = torch.where(torch.isfinite(t_hi), p * t_hi, (p / den) * num)
        cap = torch.where(open_end, _INF, cap)
        body = torch.maximum(t_lo * p, torch.minimum(q, cap))
        return torch.where(p > 0, body, q * z)


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


def solve_rows(p: torch.Tensor, q: torch.Tensor, name: str, eps: torch.Tensor, zeros: str = "continue") -> torch.Tensor:
    """π in float64 for float64 rows (R, V) and budgets ``eps`` (R,) on their device: no checks, no host sync."""
    rows = _Rows(p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True), name)
    return rows.pi(rows.search(eps, zeros))


def solve_point(p: torch.Tensor, q: torch.Tensor, name: str, eps: torch.Tensor, zeros: str = "continue") -> "_Point":
    """The thresholds of the optimum per row, for rows (R, V) already normalised, float64.

    π of any row or token follows without forming the others (``_Point.pi``). No checks, no host
    synchronisation.
    """
    rows = _Rows(p, q, name)
    return rows.point(rows.search(eps, zeros))


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
