r"""Peer lossy verification rules: their exact output laws, and where they sit against the optimum.

A lossy speculative rule drafts :math:`x \sim q`, accepts it with some probability :math:`a_x`,
and otherwise emits a token from some fallback law. Whatever it does, it emits a token with an exact
law :math:`\pi_\mathrm{rule}` and accepts with probability :math:`A_\mathrm{rule}`. Since an accepted
draft is an emitted token equal to the draft, :math:`P(\text{accept}, x) \le \min(\pi_x, q_x)`, so

.. math::

    A_\mathrm{rule} \le \sum_i \min(\pi_{\mathrm{rule},i}, q_i)
    \le A^\star\big(D_f(\pi_\mathrm{rule}\|p)\big)

for every :math:`f` (docs/theory.md §2, §7): no rule lies above the mentored frontier. :func:`output_law`
computes :math:`(\pi_\mathrm{rule}, A_\mathrm{rule})` in closed form (no sampling); :func:`audit`
measures how far below the frontier a rule sits.

Notation as in docs/theory.md: :math:`p` target, :math:`q` drafter, :math:`\pi` output; "verify against
:math:`v`" means ordinary speculative sampling with :math:`v` in place of :math:`p` (accept
:math:`\min(1, v_x/q_x)`, residual :math:`(v - q)_+` normalised), whose law is exactly :math:`v`.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via Speculative
   Decoding", ICML 2023; C. Chen et al., "Accelerating Large Language Model Decoding with
   Speculative Sampling", arXiv:2302.01318, 2023.
.. [2] Fixed-factor lenience as defined in docs/theory.md §7: a constant factor in
   the speculative acceptance test; no single paper's variant is followed.
.. [3] Y. Hao and W. Mou, Cactus, ICLR 2026 (as summarised in docs/theory.md §7).
.. [4] T. Cai et al., "Medusa: Simple LLM Inference Acceleration Framework with Multiple Decoding
   Heads", ICML 2024 (typical acceptance); vLLM's typical acceptance sampler.
.. [5] H. Narasimhan et al., "Faster Cascades via Speculative Decoding", 2024.
.. [6] Holsman et al., "Fuzzy Speculative Decoding for a Tunable Accuracy-Runtime Tradeoff", 2025.
.. [7] Top-k acceptance and interpolation: reference rules defined in docs/audit.md.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import numpy as np

from ..solver import MentoredPath, solve
from ..check.inputs import as_pair
from ..divergences import divergence as _divergence

__all__ = ["RULES", "output_law", "Audit", "audit"]


# ---------------------------------------------------------------------------------------------
# Building blocks


def _verify(v, q):
    """Speculative sampling against the distribution ``v``: the law is ``v``, acceptance Σ min(v, q)."""
    return v, float(np.minimum(v, q).sum())


def _mix(q, accept, residual):
    r"""Law of "accept :math:`x \sim q` w.p. ``accept[x]``, else sample ``residual``" (one fixed residual).

    ``residual`` is an unnormalised nonnegative vector. If it has no mass the rule never needs it
    when rejection is impossible; otherwise the caller must have replaced it.
    """
    kept = q * accept
    acceptance = float(kept.sum())
    reject = max(0.0, 1.0 - acceptance)
    z = residual.sum()
    if z > 0:
        return kept + reject * (residual / z), acceptance
    if reject > 1e-15:  # pragma: no cover - callers guarantee a residual when they can reject
        raise AssertionError("rejection with an empty residual")
    return kept / acceptance, acceptance


def _ratio_accept(num, q):
    """min(1, num_x / q_x), with the value 1 where q_x = 0 (never drafted, so immaterial)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(q > 0, np.minimum(1.0, num / np.where(q > 0, q, 1.0)), 1.0)


# ---------------------------------------------------------------------------------------------
# The rules, one row each (float64 p, q summing to 1)


def _standard(p, q):
    r"""Lossless speculative sampling [1]_: :math:`\pi = p`, :math:`A = \sum_i \min(p_i, q_i)`."""
    return _verify(p.copy(), q)


def _lenience(p, q, *, lam):
    r"""Fixed-factor lenience [2]_: accept :math:`x` w.p. :math:`\min(1, p_x / (\lambda q_x))`.

    On rejection sample :math:`(p - q)_+` normalised, as written in the spec, so
    :math:`\pi = \sum_x q_x a_x \delta_x + (1 - \sum_x q_x a_x)\,\mathrm{res}`. Convention:
    :math:`\lambda < 1` is lenient (accepts more than lossless); :math:`\lambda = 1` is lossless;
    :math:`\lambda > 1` accepts *less* than lossless, and its output is not :math:`p` in general
    (the residual does not compensate the extra rejections). When :math:`p = q` the residual is
    empty; rejection (possible for :math:`\lambda > 1`) then samples :math:`p`, the usual fallback,
    which keeps the rule lossless on :math:`p = q`.
    """
    accept = _ratio_accept(p / lam, q)
    residual = np.maximum(p - q, 0.0)
    if residual.sum() <= 0:
        residual = p
    return _mix(q, accept, residual)


def _cactus(p, q, *, delta):
    r"""Cactus [3]_: verify the drafted :math:`x` against a token-dependent :math:`H_x`.

    :math:`\gamma_x = \mathrm{clip}(p_x + \sqrt{2\delta p_x (1 - p_x)}, 0, 1)`,
    :math:`H_x = \gamma_x` at :math:`x` and :math:`p_y (1 - \gamma_x)/(1 - p_x)` at :math:`y \ne x`;
    accept w.p. :math:`\min(1, \gamma_x / q_x)`, else sample :math:`(H_x - q)_+` normalised. The law
    is the mixture :math:`\pi = \sum_x q_x [a_x \delta_x + (1 - a_x) r_x]`.

    Computed in :math:`O(n \log n)`, not the naive :math:`O(n^2)`: with :math:`c_x = (1-\gamma_x)/(1-p_x)`
    and :math:`\rho_y = q_y / p_y`, off the diagonal :math:`(H_x - q)_+ = (c_x p_y - q_y)_+`, which is
    positive iff :math:`\rho_y < c_x`; so both the normalisers :math:`Z_x` and the mixture are prefix
    sums over ratios sorted once. The diagonal term :math:`(\gamma_x - q_x)_+` is positive only when
    :math:`a_x = 1`, where the residual is never used. :math:`H_x` sums to 1, so :math:`Z_x \ge q_x -
    \gamma_x > 0` whenever rejection is possible. At :math:`p_x = 1`, :math:`H_x = \delta_x = p`.
    """
    gamma = np.clip(p + np.sqrt(2.0 * delta * p * np.maximum(1.0 - p, 0.0)), 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where(p < 1.0, (1.0 - gamma) / np.where(p < 1.0, 1.0 - p, 1.0), 0.0)
        rho = np.where(p > 0, q / np.where(p > 0, p, 1.0), np.inf)  # p_y = 0: (c·0 − q_y)₊ = 0
    accept = _ratio_accept(gamma, q)

    # Z_x = Σ_{y ≠ x} (c_x p_y − q_y)₊ + (γ_x − q_x)₊, from prefix sums over ρ sorted ascending.
    order = np.argsort(rho, kind="stable")
    cp = np.concatenate(([0.0], np.cumsum(p[order])))
    cq = np.concatenate(([0.0], np.cumsum(q[order])))
    below = np.searchsorted(rho[order], c, side="left")  # #{y : ρ_y < c_x}
    z = c * cp[below] - cq[below] - np.maximum(c * p - q, 0.0) + np.maximum(gamma - q, 0.0)
    z = np.maximum(z, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(accept < 1.0, q * (1.0 - accept) / np.where(z > 0, z, 1.0), 0.0)

    # π_y = q_y a_y + Σ_{x ≠ y} w_x (c_x p_y − q_y)₊ = q_y a_y + p_y Σ_{c_x > ρ_y} w_x c_x − q_y Σ_{c_x > ρ_y} w_x − (own term).
    corder = np.argsort(c, kind="stable")
    cs = c[corder]
    tail_wc = np.concatenate((np.cumsum((w * c)[corder][::-1])[::-1], [0.0]))
    tail_w = np.concatenate((np.cumsum(w[corder][::-1])[::-1], [0.0]))
    start = np.searchsorted(cs, rho, side="right")  # first x with c_x > ρ_y
    mixed = p * tail_wc[start] - q * tail_w[start] - w * np.maximum(c * p - q, 0.0)
    pi = q * accept + np.maximum(mixed, 0.0)
    return pi, float((q * accept).sum())


def _typical(p, q, *, posterior_threshold, posterior_alpha):
    r"""Typical acceptance (Medusa; vLLM) [4]_: accept :math:`x` iff :math:`p_x > \tau`, else emit :math:`\arg\max p`.

    :math:`\tau = \min(\text{posterior\_threshold}, \text{posterior\_alpha}\cdot e^{-H(p)})`, with
    :math:`H(p) = -\sum_i p_i \log p_i` (natural log, :math:`0 \log 0 = 0`). Ties in
    :math:`\arg\max p` go to the lowest index (``numpy.argmax``).
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = float(-np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum())
    tau = min(posterior_threshold, posterior_alpha * math.exp(-entropy))
    accept = (p > tau).astype(np.float64)
    residual = np.zeros_like(p)
    residual[int(np.argmax(p))] = 1.0
    return _mix(q, accept, residual)


def _tv(p, q):
    return 0.5 * float(np.abs(p - q).sum())


def _cascade_opt(p, q, *, alpha):
    r"""Speculative cascade, "OPT" deferral [5]_: verify against :math:`q` (always accept, :math:`\pi = q`)
    if :math:`\max q \ge \max p - \alpha\,\mathrm{TV}(p, q)`, else against :math:`p` (lossless)."""
    if q.max() >= p.max() - alpha * _tv(p, q):
        return q.copy(), 1.0
    return _verify(p.copy(), q)


def _cascade_tok(p, q, *, alpha):
    r"""Speculative cascade, token-specific rule [5]_: verify against :math:`t = q\,1_S + \eta\,p`,

    :math:`S = \{i : p_i \ge (1-\alpha)\max p\}`, :math:`\eta = 1 - q(S)`; :math:`\sum t = q(S) + \eta = 1`.
    """
    s = p >= (1.0 - alpha) * p.max()
    eta = 1.0 - float(q[s].sum())
    t = np.where(s, q, 0.0) + max(eta, 0.0) * p
    return _verify(t, q)


def _fuzzy(p, q, *, threshold):
    r"""Fuzzy speculative decoding [6]_: accept every draft (:math:`\pi = q`) if
    :math:`\mathrm{JSD}(p, q) \le` ``threshold`` (natural log, the package's ``js``), else lossless."""
    if float(_divergence("js")(q, p)) <= threshold:
        return q.copy(), 1.0
    return _verify(p.copy(), q)


def _topk(p, q, *, k):
    r"""Top-k acceptance [7]_: accept :math:`x` iff it is among the target's top :math:`k`, else sample
    :math:`(1_T - q)_+` normalised, with :math:`1_T` the *indicator vector* of the top-k set :math:`T`
    (so the residual is :math:`\propto 1 - q_i` on :math:`T`).

    Ties: :math:`T = \{i : p_i \ge p_{(k)}\}` with :math:`p_{(k)}` the k-th largest value, so every token
    tied with the k-th is in (the set is order-independent and may exceed k). The residual is empty only
    if :math:`T = \{i\}` with :math:`q_i = 1`; then no draft is ever rejected and :math:`\pi = q`.
    """
    kth = np.sort(p)[::-1][min(k, p.size) - 1]
    top = (p >= kth).astype(np.float64)
    return _mix(q, top, np.maximum(top - q, 0.0))


def _interp(p, q, *, alpha):
    r"""Reference line [7]_: verify against the interpolation :math:`\alpha q + (1 - \alpha) p`, :math:`\alpha \in [0, 1]`."""
    return _verify(alpha * q + (1.0 - alpha) * p, q)


_RULES = {
    "standard": _standard,
    "lenience": _lenience,
    "cactus": _cactus,
    "typical": _typical,
    "cascade_opt": _cascade_opt,
    "cascade_tok": _cascade_tok,
    "fuzzy": _fuzzy,
    "topk": _topk,
    "interp": _interp,
}


@dataclass(frozen=True)
class _Knob:
    """The values a knob may take: a real number (an integer if ``integer``) in [lo, hi], an end
    excluded where ``open_lo``/``open_hi``; NaN never. ±inf belongs only where the interval reaches it
    and means the rule's limit there (``cascade_opt`` at α = −∞ is lossless, at +∞ always π = q)."""

    lo: float = -math.inf
    hi: float = math.inf
    open_lo: bool = False
    open_hi: bool = False
    integer: bool = False

    def domain(self) -> str:
        if self.integer:
            return f"an integer ≥ {self.lo:g}"
        return f"a number in {'(' if self.open_lo else '['}{self.lo:g}, {self.hi:g}{')' if self.open_hi else ']'}"

    def value(self, rule: str, name: str, x) -> float | int:
        """``x`` as the rule computes with it (a float, or an int), or a ValueError naming both."""
        # bool is an int to Python (and np.bool_ a number to numpy): refused, as strings and arrays are
        kind = numbers.Integral if self.integer else numbers.Real
        if not isinstance(x, kind) or isinstance(x, (bool, np.bool_)):
            raise ValueError(f"rule {rule!r}: {name} must be {self.domain()}, got {x!r} ({type(x).__name__})")
        v = int(x) if self.integer else float(x)
        # NaN fails both comparisons
        if not ((self.lo < v if self.open_lo else self.lo <= v) and (v < self.hi if self.open_hi else v <= self.hi)):
            raise ValueError(f"rule {rule!r}: {name} must be {self.domain()}, got {v!r}")
        return v


_UNIT = _Knob(0.0, 1.0)
#: Rule name → its knobs and the values each may take (checked by :func:`output_law`).
_KNOBS = {
    "standard": {},
    "lenience": {"lam": _Knob(0.0, open_lo=True, open_hi=True)},
    "cactus": {"delta": _Knob(0.0, open_hi=True)},  # δ = ∞ would make 0·∞ of γ at p_x ∈ {0, 1}
    "typical": {"posterior_threshold": _Knob(0.0), "posterior_alpha": _Knob(0.0)},  # ∞: the other one alone
    "cascade_opt": {"alpha": _Knob()},
    "cascade_tok": {"alpha": _UNIT},
    "fuzzy": {"threshold": _Knob()},  # below 0 (JSD's least): lossless, above log 2: always π = q
    "topk": {"k": _Knob(1.0, integer=True)},
    "interp": {"alpha": _UNIT},
}

#: Rule name → the names of its knobs (keyword arguments of :func:`output_law`).
RULES = {rule: tuple(knobs) for rule, knobs in _KNOBS.items()}


def output_law(rule: str, target, draft, **params):
    r"""The exact output law and acceptance of a lossy speculative rule, in closed form.

    For a draft :math:`x \sim q` verified by ``rule`` against the target :math:`p`, returns the law
    :math:`\pi_\mathrm{rule}` of the emitted token and :math:`A_\mathrm{rule} = P(\text{draft accepted})`.
    The rules and their sources are in the module docstring and in each ``_rule`` docstring:

    ============  ===============================  ==========================================
    rule          knobs                            verifier
    ============  ===============================  ==========================================
    standard      —                                :math:`p` (lossless)
    lenience      ``lam``                          accept :math:`\min(1, p_x/(\lambda q_x))`, residual :math:`(p-q)_+`
    cactus        ``delta``                        token-dependent :math:`H_x` (Hao & Mou)
    typical       ``posterior_threshold, posterior_alpha``  :math:`p_x > \tau`, else :math:`\arg\max p`
    cascade_opt   ``alpha``                        :math:`q` or :math:`p` by the OPT deferral rule
    cascade_tok   ``alpha``                        :math:`q 1_S + \eta p`
    fuzzy         ``threshold``                    :math:`q` if JSD(p, q) ≤ threshold, else :math:`p`
    topk          ``k``                            :math:`x \in` top-k of :math:`p`, residual :math:`(1_T - q)_+`
    interp        ``alpha``                        :math:`\alpha q + (1-\alpha) p`
    ============  ===============================  ==========================================

    Parameters
    ----------
    rule : str
        One of ``RULES``.
    target, draft : array_like, shape (n,) or (B, n)
        :math:`p` and :math:`q`, rows summing to 1 (computed in float64).
    **params
        The rule's knobs, by name (``RULES[rule]``), real scalars shared by all rows: ``lam`` in
        (0, ∞), ``delta`` in [0, ∞), ``posterior_threshold`` and ``posterior_alpha`` in [0, ∞],
        ``alpha`` of ``cascade_tok`` and ``interp`` in [0, 1], ``alpha`` of ``cascade_opt`` and
        ``threshold`` any (±∞: the rule's limits), ``k`` an integer ≥ 1. NaN, values outside these,
        bools and non-numbers raise a ValueError naming the rule and the knob.

    Returns
    -------
    pi : ndarray, shape (n,) or (B, n), float64
        :math:`\pi_\mathrm{rule}`, nonnegative, summing to 1 up to rounding.
    acceptance : float or ndarray (B,)
        :math:`A_\mathrm{rule}`.

    Examples
    --------
    >>> import numpy as np
    >>> from mentored.analysis.rules import output_law
    >>> pi, acc = output_law("interp", [0.5, 0.3, 0.2], [0.2, 0.3, 0.5], alpha=0.5)
    >>> np.round(pi, 12).tolist(), round(acc, 12)
    ([0.35, 0.3, 0.35], 0.85)
    """
    try:
        fn = _RULES[rule]
    except KeyError:
        raise ValueError(f"unknown rule {rule!r}; the rules are {', '.join(_RULES)}") from None
    unknown = set(params) - set(RULES[rule])
    missing = set(RULES[rule]) - set(params)
    if unknown or missing:
        raise TypeError(f"rule {rule!r} takes knobs {RULES[rule]}; got {tuple(params)}")
    params = {name: knob.value(rule, name, params[name]) for name, knob in _KNOBS[rule].items()}
    p, q = as_pair(target, draft, False)
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if p.ndim == 1:
        return fn(p, q, **params)
    out = [fn(pr, qr, **params) for pr, qr in zip(p, q)]
    return np.stack([o[0] for o in out]), np.array([o[1] for o in out])


# ---------------------------------------------------------------------------------------------
# Audit against the frontier


@dataclass(frozen=True)
class Audit:
    r"""Where one rule on one row sits against the mentored frontier of one divergence.

    Attributes
    ----------
    rule, divergence : str
    params : dict
    pi : ndarray
        :math:`\pi_\mathrm{rule}`.
    rule_divergence : float
        :math:`D_\mathrm{rule} = D_f(\pi_\mathrm{rule}\|p)` from the definition; may be ``inf``
        (e.g. ``kl`` when the rule emits tokens with :math:`p_i = 0`).
    acceptance : float
        :math:`A_\mathrm{rule}`.
    optimal_acceptance : float
        :math:`A^\star(D_\mathrm{rule})`, the mentored optimum at the same budget; 1 when
        :math:`D_\mathrm{rule} = \infty`, since an infinite budget admits :math:`\pi = q`.
    acceptance_deficit : float
        :math:`A^\star(D_\mathrm{rule}) - A_\mathrm{rule} \ge 0` (up to rounding).
    optimal_divergence : float
        :math:`D^\star(A_\mathrm{rule})`, the least :math:`D_f(\pi\|p)` with :math:`A(\pi) \ge A_\mathrm{rule}`;
        0 when :math:`A_\mathrm{rule} \le 1 - \mathrm{TV}(p, q)`, and ``inf`` when :math:`A_\mathrm{rule}`
        exceeds the most any finite budget reaches (:math:`1 - Q_0` when :math:`f_\infty = \infty`).
    divergence_overspent : float
        :math:`D_\mathrm{rule} - D^\star(A_\mathrm{rule}) \ge 0` (up to rounding), with
        :math:`\infty - \infty := 0` (both need an infinite divergence) and ``inf`` when only the rule
        spends an infinite one.
    """

    rule: str
    params: dict = field(repr=False)
    divergence: str
    pi: np.ndarray = field(repr=False)
    rule_divergence: float
    acceptance: float
    optimal_acceptance: float
    acceptance_deficit: float
    optimal_divergence: float
    divergence_overspent: float


def audit(rule: str, target, draft, *, divergence="kl", **params) -> Audit:
    r"""Place a rule against the mentored optimum on one row, at equal divergence and equal acceptance.

    .. math::

        \text{deficit} = A^\star(D_\mathrm{rule}) - A_\mathrm{rule}, \qquad
        \text{overspent} = D_\mathrm{rule} - D^\star(A_\mathrm{rule}),

    with :math:`D_\mathrm{rule} = D_f(\pi_\mathrm{rule}\|p)`; both are :math:`\ge 0` by docs/theory.md §7.

    Takes what :func:`output_law` takes, and the divergence to measure with.

    Parameters
    ----------
    rule : str
        One of ``RULES``.
    target, draft : array_like, shape (n,)
        :math:`p` and :math:`q`.
    divergence : str or Divergence, default "kl"
        The :math:`f` of the frontier.
    **params
        The rule's knobs, by name (``RULES[rule]``).

    Returns
    -------
    Audit

    Examples
    --------
    >>> from mentored.analysis.rules import audit
    >>> a = audit("interp", [0.5, 0.3, 0.2], [0.2, 0.3, 0.5], divergence="tv", alpha=0.5)
    >>> round(a.acceptance_deficit, 12), round(a.divergence_overspent, 12)  # interp is on the tv frontier
    (0.0, 0.0)
    """
    div = _divergence(divergence)
    p, q = as_pair(target, draft, False)
    if p.ndim != 1:
        raise ValueError(f"audit takes one row, shape (n,), got {p.shape}")
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    pi, acc = output_law(rule, p, q, **params)
    d_rule = max(float(div(pi, p)), 0.0)  # rounding can give −1e-17 for π ≈ p

    # An infinite budget admits π = q (acceptance 1); solve(budget=inf) instead returns the supremum
    # over finite budgets, 1 − Q0 when f∞ = ∞, which is the wrong reference for a rule that spends ∞.
    a_opt = 1.0 if math.isinf(d_rule) else float(solve(p, q, divergence=div, budget=d_rule, threads=1).acceptance)

    path = MentoredPath(p, q)
    a_reach = path.acceptance(path.s_max(div))  # the most any finite budget reaches
    tol = 1e-12
    if acc <= a_reach + tol:
        a = max(0.0, min(acc, a_reach, 1.0))
        d_opt = float(solve(p, q, divergence=div, acceptance=a, threads=1).divergence)
    else:
        d_opt = math.inf
    if math.isinf(d_rule) and math.isinf(d_opt):
        over = 0.0
    else:
        over = d_rule - d_opt
    return Audit(
        rule=rule,
        params=params,
        divergence=div.name,
        pi=pi,
        rule_divergence=d_rule,
        acceptance=acc,
        optimal_acceptance=a_opt,
        acceptance_deficit=a_opt - acc,
        optimal_divergence=d_opt,
        divergence_overspent=over,
    )
