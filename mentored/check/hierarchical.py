r"""Hierarchical Speculative Decoding (HSD) on a chain of drafts: a plain numpy reference.

HSD is the verification rule of Zhou, Huang, Li, Wu, Wang, Zhang, Lin and Cheng, "Overcoming Joint
Intractability with Lossless Hierarchical Speculative Decoding", ICLR 2026 (arXiv:2601.05724). This
module renders it for one chain of ``k`` drafts :math:`x_1, …, x_k` drawn from the drafter, with what
an engine has: the target rows :math:`p_t = p(\cdot|x_{<t})` for ``t = 1..k+1`` and the drafter rows
:math:`q_t = q(\cdot|x_{<t})` for ``t = 1..k``, all along the drafted path (full rows over the
vocabulary at each drafted position; nothing off the path).

The rule (positions 1-indexed; :math:`P_t = \prod_{s<t} p_s(x_s)`, :math:`Q_t = \prod_{s<t} q_s(x_s)`
the prefix joints, :math:`r_t = P_t/Q_t`, :math:`R_t = \max(1, r_1, …, r_t)` the running cap):

1. the *capped* target mass of the sibling branch :math:`(x_{<t}, v)` is :math:`(P_t/R_t)\,p_t(v)`,
   the drafter's :math:`Q_t\,q_t(v)`; their difference :math:`a_t(v)` has positive part
   :math:`a_t^+` (deficient mass, to be filled by resampling there) and negative part :math:`a_t^-`
   (excess mass);
2. the chance of *stopping* at level ``t`` (emitting :math:`x_{<t}` and a token resampled from
   :math:`a_t^+` normalised) rather than stepping back to level ``t - 1`` is
   :math:`c_t = \sum_v a_t^+ / \max(\sum_v a_t^+, \sum_v a_t^-)`, decided by independent coins per
   level; :math:`c_1 = 1`, and the level kept is the deepest one whose coin says stop;
3. the whole draft is accepted (with the target's bonus token after it) with probability
   :math:`\min(1, r_{k+1}/R_k)` for ``variant="capped"``; otherwise the stop level of step 2 decides.

Since :math:`\sum_v a_t(v) = Q_t(w_{t-1} - 1)` with :math:`w_{t-1} = r_t/R_t \le 1`,
:math:`c_t = \sum(w_{t-1} p_t - q_t)^+ / (\sum(w_{t-1} p_t - q_t)^+ + 1 - w_{t-1})`, and
:math:`w_t = r_{t+1}/\max(1, r_1..r_{t+1})` obeys :math:`w_t = \min(1, w_{t-1}\,p_t(x_t)/q_t(x_t))`
(a reflected random walk in log space). These are exactly the weights, backward acceptance
probabilities and residuals of block verification (Sun et al., ICLR 2025, arXiv:2403.10444): with the
capped final acceptance, HSD on a chain *is* block verification, decision for decision given the same
uniforms (``tests/test_hierarchical.py`` checks this against ``method="block"``).

``variant="released"`` is the rule as the authors' released single-draft code states it
(``transformers/generation/utils.py``, ``_speculative_sampling`` with ``backward=True``): identical
except that the whole draft is accepted with the *uncapped* :math:`\min(1, r_{k+1})`. That variant is
not lossless whenever some prefix ratio :math:`r_t` exceeds 1 (on the binary example of
:func:`exact_law` it emits ``BA`` with probability 1/3 where the target has 2/9); it is kept here only
to measure and show that.

Uniforms, one ``(k, 2)`` array per request, laid out as block verification's in
:func:`mentored.verify.serving.rejection_sample`: ``u[k-1, 0]`` decides the whole draft, ``u[t-2, 0]``
the stop coin of level ``t`` (``t = 2..k``: stop iff ``u < c_t``), ``u[t-1, 1]`` the token resampled at
level ``t`` (inverse CDF).
"""

from __future__ import annotations

import itertools

import numpy as np

__all__ = ["hierarchical_verify", "hierarchical_verify_batch", "exact_law", "exact_accepted", "VARIANTS"]

VARIANTS = ("capped", "released")


def _check(p_rows, q_rows, drafts, u, variant):
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    p = np.asarray(p_rows, dtype=np.float64)
    q = np.asarray(q_rows, dtype=np.float64)
    x = np.asarray(drafts, dtype=np.int64)
    u = np.asarray(u, dtype=np.float64)
    if x.ndim != 1 or x.size < 1:
        raise ValueError(f"drafts must be a vector of k ≥ 1 token ids, got shape {x.shape}")
    k = x.size
    if q.ndim != 2 or q.shape[0] != k:
        raise ValueError(f"q_rows must have shape (k, V) = ({k}, V): one drafter row per draft, got {q.shape}")
    V = q.shape[1]
    if p.shape != (k + 1, V):
        raise ValueError(f"p_rows must have shape (k + 1, V) = ({k + 1}, {V}): a target row per draft and the bonus row, got {p.shape}")
    if u.shape != (k, 2):
        raise ValueError(f"u must have shape (k, 2) = ({k}, 2), got {u.shape}")
    if (x < 0).any() or (x >= V).any():
        raise ValueError(f"drafts must be token ids in [0, {V}), got {x.tolist()}")
    if (q[np.arange(k), x] <= 0).any():
        raise ValueError("a draft has drafter probability 0: it could not have been drawn from q")
    return p, q, x, u


def _draw(weights, u):
    """Inverse CDF of the (unnormalised, nonnegative) weights at u."""
    c = np.cumsum(weights)
    return int(min(np.searchsorted(c, u * c[-1], side="right"), len(c) - 1))


def hierarchical_verify(p_rows, q_rows, drafts, u, *, variant="capped"):
    r"""One request's HSD decision (module docstring for the rule and the layout of ``u``).

    p_rows : (k + 1, V) target rows :math:`p_t` along the drafted path, the last the bonus row.
    q_rows : (k, V) drafter rows :math:`q_t` along the drafted path.
    drafts : (k,) drafted tokens.
    u : (k, 2) uniforms in [0, 1).

    Returns ``(tokens, n_accepted)``: the emitted tokens (the accepted drafts then one token, resampled
    or the bonus drawn from :math:`p_{k+1}`) and how many drafts were accepted.
    """
    p, q, x, u = _check(p_rows, q_rows, drafts, u, variant)
    k = x.size
    pk = p[np.arange(k), x]
    qk = q[np.arange(k), x]
    with np.errstate(divide="ignore"):
        # log r_t for t = 1..k+1 (r_1 = 1): prefix joint ratios, in logs so long drafts do not underflow
        logr = np.concatenate([[0.0], np.cumsum(np.log(pk) - np.log(qk))])
    logR = np.maximum.accumulate(np.maximum(logr, 0.0))  # log R_t, the running cap (≥ 0)
    w = np.exp(logr - logR)  # w_{t-1} = r_t / R_t ∈ [0, 1], t = 1..k+1
    final = w[k] if variant == "capped" else min(1.0, float(np.exp(logr[k])))
    if u[k - 1, 0] < final:
        return [int(v) for v in x] + [_draw(p[k], u[k - 1, 1])], k
    # the branch masses at level t, divided by Q_t > 0 (a common factor of c_t and the residual)
    for t in range(k, 0, -1):  # 1-indexed level; the deepest level whose coin says stop is kept
        a = w[t - 1] * p[t - 1] - q[t - 1]
        plus = np.maximum(a, 0.0)
        s_plus, s_minus = plus.sum(), np.maximum(-a, 0.0).sum()
        # no mass to move at this level (w p_t = q_t): stop here, as block verification does
        c = 1.0 if max(s_plus, s_minus) <= 0 else s_plus / max(s_plus, s_minus)
        if t == 1 or u[t - 2, 0] < c:
            resid = plus if s_plus > 0 else p[t - 1]
            return [int(v) for v in x[: t - 1]] + [_draw(resid, u[t - 1, 1])], t - 1
    raise AssertionError("unreachable: level 1 always stops")


def hierarchical_verify_batch(p_rows, q_rows, drafts, u, *, variant="capped"):
    """:func:`hierarchical_verify` over B requests of k drafts each: p_rows (B, k + 1, V), q_rows (B, k, V),
    drafts (B, k), u (B, k, 2). Returns (tokens (B, k + 1) padded with -1, n_accepted (B,))."""
    drafts = np.asarray(drafts)
    if drafts.ndim != 2:
        raise ValueError(f"drafts must have shape (B, k), got {drafts.shape}")
    B, k = drafts.shape
    out = np.full((B, k + 1), -1, dtype=np.int64)
    n = np.zeros(B, dtype=np.int64)
    for b in range(B):
        toks, n[b] = hierarchical_verify(p_rows[b], q_rows[b], drafts[b], u[b], variant=variant)
        out[b, : len(toks)] = toks
    return out, n


# ---------------------------------------------------------------- exact law, by enumeration


def _outcomes(p, q, V, k, variant, one):
    """Yield (draft, probability of drafting it, {(n_accepted, emitted tokens) : probability}) for every
    draft, in plain arithmetic on the rows' own number type (``one`` = 1 in it: float or Fraction)."""
    for x in itertools.product(range(V), repeat=k):
        P, Q = [one], [one]
        for t in range(k):
            P.append(P[-1] * p(x[:t])[x[t]])
            Q.append(Q[-1] * q(x[:t])[x[t]])
        if Q[k] == 0:
            continue
        r = [P[t] / Q[t] for t in range(k + 1)]  # r_1..r_{k+1} at indices 0..k
        R, w = one, []
        for t in range(k + 1):
            R = max(R, r[t])
            w.append(r[t] / R)
        final = w[k] if variant == "capped" else min(one, r[k])
        emit = {}
        bonus = p(x)
        for y in range(V):
            emit[(k, x + (y,))] = final * bonus[y]
        rest = one - final  # probability of reaching level t with every deeper coin saying step back
        for t in range(k, 0, -1):
            pt, qt = p(x[: t - 1]), q(x[: t - 1])
            a = [w[t - 1] * pt[v] - qt[v] for v in range(V)]
            s_plus = sum(max(av, 0 * one) for av in a)
            s_minus = sum(max(-av, 0 * one) for av in a)
            c = one if max(s_plus, s_minus) <= 0 else s_plus / max(s_plus, s_minus)
            if t == 1:
                c = one
            stop = rest * c
            if stop:
                for v in range(V):
                    share = (max(a[v], 0 * one) / s_plus) if s_plus > 0 else pt[v]
                    if share:
                        key = (t - 1, x[: t - 1] + (v,))
                        emit[key] = emit.get(key, 0 * one) + stop * share
            rest -= stop
        yield x, Q[k], emit


def exact_law(p, q, V, k, *, variant="capped", one=1.0):
    r"""The exact law of one HSD round's emitted tokens continued to length ``k + 1`` by the target
    (what the next rounds emit), by enumerating the :math:`V^k` drafts: a dict sequence → probability.
    ``p(prefix)``, ``q(prefix)`` give the rows after a prefix (a tuple). Lossless means this equals
    :math:`\prod_j p(y_j|y_{<j})` for every sequence ``y``. Pass ``one=Fraction(1)`` with Fraction rows
    for exact rational arithmetic."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    law: dict = {}
    for _, qx, emit in _outcomes(p, q, V, k, variant, one):
        for (_, seq), pr in emit.items():
            # continue with the target until length k + 1
            stack = [(seq, qx * pr)]
            while stack:
                s, m = stack.pop()
                if len(s) == k + 1:
                    law[s] = law.get(s, 0 * one) + m
                    continue
                row = p(s)
                stack.extend((s + (v,), m * row[v]) for v in range(V) if row[v])
    return law


def exact_accepted(p, q, V, k, *, variant="capped", one=1.0):
    """The exact expected number of accepted drafts per round (enumeration, as :func:`exact_law`)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    total = 0 * one
    for _, qx, emit in _outcomes(p, q, V, k, variant, one):
        total += qx * sum((n * pr for (n, _), pr in emit.items()), 0 * one)
    return total
