r"""Serving: mentored verification in vLLM v1's rejection-sampler layout (docs/serving.md).

:func:`rejection_sample` takes what vLLM's ``rejection_sample`` takes, flattened over requests
(``draft_token_ids [T]``, ``num_draft_tokens [B]``, ``draft_probs [T, V]`` or ``None``,
``target_probs [T, V]``, ``bonus_token_ids [B, 1]``), and returns int32 ``[B, max_k + 1]`` with
:data:`PLACEHOLDER_TOKEN_ID` (−1) after the first rejection and in unused columns. At ``budget=0`` it
is lossless speculative sampling, decision for decision with :func:`mentored.speculative_step`
given the same uniforms; at ``budget > 0`` every emitted token has law exactly the mentored
verifier :math:`\pi` of its position (docs/theory.md §2, §8).

:class:`Verifier` holds buffers for a decoding loop that calls this every step (numpy input).

:func:`tree_sample` verifies a batch of draft trees (a chain is :func:`rejection_sample` with
``draft_probs=None``, decision for decision), and :func:`tree_verifier` returns each node's verifier
and its expected accepted length (docs/serving.md, "Draft trees").
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property

import numpy as np

from ..check.inputs import block_method, check_zeros, per_row, priced_values, sum_rtol, threads_arg
from ..backends import get_backend, is_tensor
from ..backends.host import core_divergence, given_uniforms, refusal, rescalable
from ..divergences import Divergence, divergence as _divergence
from .. import _core

__all__ = ["PLACEHOLDER_TOKEN_ID", "rejection_sample", "onehot_acceptance", "Verifier", "Emitted", "tree_sample", "tree_verifier"]

PLACEHOLDER_TOKEN_ID = -1




def _host_array(name, x, kinds, what):
    """``x`` (a list, an array or a tensor) as a numpy array whose dtype is of ``kinds``: a count given
    as 1.5 or a flag given as 2 is refused, not truncated or taken as true. A numpy array keeps its
    dtype (uint64 among them: through a list, ids past 2⁶³ would come back as float64)."""
    a = x if isinstance(x, np.ndarray) else np.asarray(x.tolist() if hasattr(x, "tolist") else x)
    if a.size and a.dtype.kind not in kinds:
        raise TypeError(f"{name} must hold {what}, got dtype {a.dtype}")
    return a


_INT64_MAX = int(np.iinfo(np.int64).max)


def _int64(name, a, where, what="value"):
    """An integer array as int64; an unsigned entry past int64 (which the cast would wrap negative) is
    refused by its value, ``where(i)`` naming its place."""
    if a.dtype.kind == "u" and a.size and int(a.max()) > _INT64_MAX:
        i = int(np.argmax(a > _INT64_MAX))
        raise ValueError(f"{name}: {what} {int(a[i])} at {where(i)} is past int64's range (dtype {a.dtype})")
    return a.astype(np.int64, copy=False)


def _greedy_flags(is_greedy, B: int):
    """is_greedy as a bool array (B,), or None when no request is greedy."""
    if is_greedy is None:
        return None
    g = _host_array("is_greedy", is_greedy, "b", "booleans")
    if g.shape != (B,):
        raise ValueError(f"is_greedy must have shape (B,) = ({B},), got {g.shape}")
    return np.ascontiguousarray(g, dtype=bool) if g.any() else None


class _Plan:
    """Host-side bookkeeping of one call: who is where, and with which divergence and budget.

    What the core call needs is computed here (counts, greedy flags, divergences and their index per
    request, budgets (or prices: ``priced``) per row or one for all); the rest of the layout (``starts``, ``req``, ``pos``, the
    random and greedy positions, the groups by divergence) only where a path reads it."""

    def __init__(self, num_draft_tokens, B, is_greedy, divergence, budget, T, method="token", price=None):
        self.block = block_method(method)
        if type(num_draft_tokens) is list and all(type(c) is int for c in num_draft_tokens):
            # vLLM's own form, a list of ints: read without numpy (a few µs a call)
            n, lo, total, K = num_draft_tokens, min(num_draft_tokens, default=0), sum(num_draft_tokens), max(num_draft_tokens, default=0)
            if len(n) != B:
                raise ValueError(f"num_draft_tokens must have one entry per request (B = {B} from bonus_token_ids), got shape ({len(n)},)")
        else:
            n = _int64("num_draft_tokens", _host_array("num_draft_tokens", num_draft_tokens, "iu", "integers"), lambda b: f"request {b}",
                       "count")
            if n.ndim != 1 or n.shape[0] != B:
                raise ValueError(f"num_draft_tokens must have one entry per request (B = {B} from bonus_token_ids), got shape {n.shape}")
            lo, total, K = (int(n.min()), int(n.sum()), int(n.max())) if B else (0, 0, 0)
        if lo < 0:
            raise ValueError(f"num_draft_tokens must be nonnegative, got {lo}")
        if total != T:
            raise ValueError(f"num_draft_tokens sums to {total}, but draft_token_ids holds {T} tokens")
        self.B, self.T, self.counts, self.K = B, T, n, K
        self.greedy_or_none = _greedy_flags(is_greedy, B)
        self.divs, self.which = _request_divergences(divergence, B)
        self.priced = None  # bool (B,): requests whose eps are prices (docs/theory.md §4); None: budgets only
        if price is not None:
            self.eps_request, self.priced = priced_values(per_row(budget, B, "budget", unit="request"), price, B)
            self.eps_rows = np.repeat(self.eps_request, self.n)
        elif type(budget) in (float, int) and budget >= 0:  # one for all, the usual case (NaN fails the test)
            self.eps_request, self.eps_rows = None, np.array([float(budget)])
        elif np.ndim(budget) == 0:
            self.eps_request, self.eps_rows = None, per_row(budget, 1, "budget")
        else:
            self.eps_request = per_row(budget, B, "budget", unit="request")
            self.eps_rows = np.repeat(self.eps_request, self.n)

    @cached_property
    def n(self) -> np.ndarray:
        """num_draft_tokens as int64."""
        return np.asarray(self.counts, dtype=np.int64)

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
        """The budget (a price where ``priced``) of each random position (rnd order)."""
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


def _request_divergences(divergence, B: int):
    """(the distinct divergences, the index of each request's: int32 (B,), or None when one serves all)."""
    if isinstance(divergence, (str, Divergence)):
        return [_divergence(divergence)], None
    given = list(divergence)
    if len(given) != B:
        raise ValueError(f"divergence must be one name or one per request (B = {B}), got {len(given)}")
    divs, which = [], np.empty(B, dtype=np.int32)
    for b, d in enumerate(given):
        d = _divergence(d)
        if d not in divs:
            divs.append(d)
        which[b] = divs.index(d)
    return divs, (which if len(divs) > 1 else None)


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
        if not (isinstance(gen, np.random.Generator) or (is_tensor(gen) and type(gen).__name__ == "Generator")):
            raise TypeError(f"generators[{b}] (request {b}) must be a numpy.random.Generator or torch.Generator, got {type(gen).__name__}")


# ---------------------------------------------------------------- the token-only verifier (§8)


def onehot_acceptance(p_x, budget=0.0, divergence="kl", zeros="keep", *, price=None):
    r"""π_x of the verifier of a token-only drafter :math:`q = \delta_x` (docs/theory.md §8), per row.

    The largest :math:`a = \pi_x \in [p_x, 1]` with
    :math:`p_x \tilde f(a/p_x) + (1 - p_x)\,\tilde f((1 - a)/(1 - p_x)) \le \varepsilon`; the rest of
    :math:`\pi` is :math:`(1 - a)/(1 - p_x)\cdot p_i`. Closed forms for ``tv``
    (:math:`p_x + \varepsilon`) and ``chi2`` (:math:`p_x + \sqrt{\varepsilon p_x (1 - p_x)}`), a
    bisection vectorised over rows otherwise. Where :math:`p_x = 0`: 0 with ``zeros="keep"`` or
    :math:`f_\infty = \infty`, else the largest :math:`z` with :math:`\tilde f(1 - z) + \tilde f_\infty z \le \varepsilon`.
    ``p_x`` and ``budget`` broadcast. numpy in, float64 numpy out (the compiled core); a torch tensor
    in, a float64 tensor on its device out (on a GPU: torch there, no host synchronisation).

    Cost: no pass over the vocabulary, only the :math:`p_x` given (from logits,
    :math:`p_x = e^{\ell_x - \mathrm{logsumexp}(\ell)}`). Per entry: O(1) for tv and chi2, and 80
    halvings of :math:`[p_x, 1]` otherwise (each a few evaluations of :math:`\tilde f`, vectorised over
    the batch on a device; in C++ on the host).

    With ``price`` :math:`\lambda` (≥ 0, ``inf`` allowed; broadcast with ``p_x``) instead of a budget:
    the :math:`a \in [p_x, 1]` maximising :math:`a - \lambda D(a)`, :math:`D(a)` the divergence above
    (the acceptance of :math:`\delta_x` is :math:`\pi_x`; docs/theory.md §4, "Budgets by price").
    :math:`D` is convex in :math:`a`, so the objective is concave and its largest maximiser is where
    :math:`\lambda D'(a^+)` first exceeds 1 (a bisection on that slope in the core; a golden-section
    search for a divergence the core cannot evaluate). ``tv``: 1 for :math:`\lambda \le 1`, else
    :math:`p_x`. Host memory only (numpy arrays, CPU tensors).

    Examples
    --------
    >>> from mentored.verify.serving import onehot_acceptance
    >>> float(onehot_acceptance(0.3, 0.05, divergence="tv"))  # p_x + ε
    0.35
    >>> round(float(onehot_acceptance(0.3, divergence="chi2", price=2.0)), 6)  # p_x + p_x(1 − p_x)/(2λ)
    0.3525
    """
    div = _divergence(divergence)
    check_zeros(zeros)
    if price is not None:
        if not (budget is None or (np.ndim(budget) == 0 and not is_tensor(budget) and float(budget) == 0.0)):
            raise ValueError(f"give one of budget= and price=, not both (got budget={budget!r} and price={price!r})")
        lam = np.asarray(price.tolist() if hasattr(price, "tolist") else price, dtype=np.float64)
        if np.any(np.isnan(lam)) or np.any(lam < 0):
            raise ValueError(f"price must be nonnegative (inf allowed), got {lam[np.isnan(lam) | (lam < 0)].ravel()[0]}")
        return get_backend(p_x).onehot(p_x, lam, div, zeros, price=True)  # the device backend refuses a price
    budgets = budget if is_tensor(budget) else np.asarray(budget, dtype=np.float64)
    if not is_tensor(budget):
        per_row(budgets.ravel(), budgets.size, "budget")  # the one budget rule (a device tensor is taken as given)
    return get_backend(p_x).onehot(p_x, budgets, div, zeros)


# ---------------------------------------------------------------- uniforms


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
    logits=False,
    method="token",
    return_logprobs=False,
    bonus_logprobs=None,
    price=None,
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

    ``method="block"`` verifies each random request's dense drafts jointly (block verification, Sun
    et al. 2025, run on the chain of mentored verifiers; docs/theory.md §10): with
    :math:`w_0 = 1`, :math:`w_{i+1} = \min(w_i \pi_i(x_i)/q_i(x_i), 1)`, it keeps the longest prefix
    :math:`x_{<\tau}` whose test ``u0(position τ−1) < h_τ`` passes (:math:`h_{n} = w_{n}`, and for
    :math:`i < n` :math:`h_i = R_i/(R_i + 1 - w_i)`, :math:`R_i = \sum_y (w_i \pi_i(y) - q_i(y))_+`),
    then draws the token at τ from :math:`(w_\tau \pi_\tau - q_\tau)_+` (``u1``) or emits the bonus.
    The emitted stream's law is still the π chain, and the expected number of accepted drafts is at
    least token by token's; at ``budget=0`` it is lossless block verification. Token-only drafts,
    greedy requests and placeholders are decided as ``method="token"`` decides them (for a one-hot
    :math:`q` the two rules have the same law; a placeholder ends the block).

    Parameters
    ----------
    draft_token_ids : (T,) integer array or tensor
    num_draft_tokens : sequence of B ints (0 allowed)
    draft_probs : (T, V) float array or tensor, or None
    target_probs : (T, V) float array or tensor (after temperature and top-k/top-p)
    bonus_token_ids : (B, 1) or (B,) integer array or tensor (any other shape is refused)
    divergence : str or Divergence, or one per request
    budget : float, or one per request (float64, ≥ 0, ``inf`` allowed)
    price : float, or one per request (float64, ≥ 0, ``inf`` allowed), optional
        Instead of a budget, what a unit of divergence is worth: each position's :math:`\pi` is the one
        maximising :math:`\sum_i \min(\pi_i, q_i) - \lambda D_f(\pi\|p)` for its own :math:`(p, q)`
        (docs/theory.md §4, "Budgets by price"; :func:`mentored.solve` with ``price=``), and for
        token-only drafts the :math:`\pi_x \in [p_x, 1]` maximising :math:`\pi_x - \lambda D_f(\pi\|p)`
        (:func:`onehot_acceptance` with ``price=``). One per request: NaN where a request uses its
        budget. A request with both a budget other than 0 and a price is refused. ``price=inf`` is
        lossless; ``price=0`` spends what the curve allows. Host memory only (numpy arrays, CPU
        tensors): the device algorithm searches budgets.
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
        the core solves: :data:`mentored.backends.CPU_SOLVER`).
    validate : bool
        Check shapes, ids and that rows are distributions, and refuse a row that is not one
        (torch: a few host synchronisations). Without it (serving, where a NaN from a model must not
        stop the engine), a position whose target or draft row is not a distribution (NaN, ±inf,
        negative entries, an all-zero row, a sum off by more than the tolerance) is decided, on
        every path: its draft is rejected and it emits the first largest entry of its target row
        (NaN read as the lowest; token 0 when the row has no number), an id in ``[0, V)`` as vLLM's
        v2 sampler requires of all-NaN rows. Ids out of range are refused either way.
    normalize : bool
        Take rows with any positive sum as :math:`p/\sum p` and :math:`q/\sum q`, as
        :func:`mentored.solve` does; otherwise each row must sum to 1 within the tolerance of its
        dtype (relative 1e-6 in float64, 1e-3 in float32) and is read normalised within it. A float32
        softmax widened to float64 sums to 1 only to float32's rounding: pass ``normalize=True``.
    logits : bool
        ``target_probs`` holds logits, temperature and masks applied (−inf: probability 0): the
        target is their softmax. On a device with token-only drafts no row is normalised: each test
        reads :math:`p_x = e^{\ell_x - \mathrm{logsumexp}\,\ell}`, and only the rows of positions
        that rejected are formed. A row with a NaN, a +inf or no finite entry has no law: refused
        with ``validate``, else decided as above (its softmax is NaN: token 0).
    method : {"token", "block"}
        Token-by-token verification (the default), or block verification of dense drafts.
    return_logprobs : bool
        Also return the exact law of what was emitted (docs/theory.md §11): see Returns.
    bonus_logprobs : (B,) float, optional
        The log-probability of each bonus token under the law it was drawn from (the target's at the
        bonus position, whose divergence is 0): fills the bonus column of ``logprobs`` and
        ``target_logprobs``; NaN there without it.

    Returns
    -------
    int32 array or tensor (B, max(num_draft_tokens) + 1), −1 where nothing is emitted; with
    ``return_logprobs``, an :class:`Emitted` ``(tokens, logprobs)``: ``logprobs`` float64 (B, max + 1),
    :math:`\log \pi(y)` of each emitted token :math:`y` under the verifier of its position (its exact
    law given the tokens before it: the behaviour policy), NaN where nothing is emitted; beside them
    ``.target_logprobs`` (:math:`\log p(y)`, :math:`p/\sum p`), ``.log_weights``
    (:math:`\log p - \log \pi`, the importance weight of the token) and ``.spent``
    (:math:`D_f(\pi\|p)` of that verifier; 0 for a placeholder's token and the bonus). Rows that are no
    distribution (validation off) give NaN.
    """
    check_zeros(zeros)
    B = _bonus_shape(bonus_token_ids)
    T = int(draft_token_ids.shape[0]) if getattr(draft_token_ids, "ndim", 1) == 1 else -1
    plan = _Plan(num_draft_tokens, B, is_greedy, divergence, budget, T, method, price)
    _check_generators(generators, B)
    backend = get_backend(target_probs, draft_probs, draft_token_ids, bonus_token_ids)
    out = backend.verify(plan, draft_token_ids, draft_probs, target_probs, bonus_token_ids, generators=generators, uniforms=uniforms,
                         zeros=zeros, threads=threads, validate=validate, normalize=normalize, logits=bool(logits),
                         notes=bool(return_logprobs))
    if not return_logprobs:
        return out
    return Emitted.of(out, plan.n, bonus_logprobs)


class Emitted(tuple):
    r"""``(tokens, logprobs)`` of a verification asked for its law (``return_logprobs=True``), with
    ``target_logprobs``, ``log_weights`` and ``spent`` beside them (docs/theory.md §11).

    ``logprobs[b, j]`` is :math:`\log \pi_j(y)` for the token :math:`y` emitted at column j of request
    b, :math:`\pi_j` the verifier it was drawn from; ``target_logprobs`` :math:`\log p_j(y)`;
    ``log_weights = target_logprobs − logprobs``, so :math:`\exp \sum_j` of a row's weights is the
    likelihood ratio of its tokens, target over verifier; ``spent[b, j]`` is :math:`D_f(\pi_j\|p_j)`.
    All float64 numpy arrays (B, width), NaN where nothing is emitted."""

    target_logprobs: np.ndarray
    spent: np.ndarray

    def __new__(cls, tokens, logprobs, target_logprobs, spent):
        self = super().__new__(cls, (tokens, logprobs))
        self.target_logprobs, self.spent = target_logprobs, spent
        return self

    @property
    def tokens(self):
        return self[0]

    @property
    def logprobs(self) -> np.ndarray:
        return self[1]

    @property
    def log_weights(self) -> np.ndarray:
        return self.target_logprobs - self.logprobs

    @staticmethod
    def of(verified, n, bonus_logprobs) -> "Emitted":
        """From a backend's ``(tokens, log π, log p, D)`` of requests with ``n`` drafts: the bonus column filled."""
        tokens, logpi, logp, spent = verified
        t = np.asarray(tokens.cpu() if is_tensor(tokens) else tokens)
        logpi, logp, spent = (np.asarray(x.cpu() if is_tensor(x) else x, dtype=np.float64) for x in (logpi, logp, spent))
        n = np.asarray(n, dtype=np.int64)
        rows = np.flatnonzero(n < t.shape[1])
        full = rows[t[rows, n[rows]] >= 0]  # requests that emitted their bonus
        spent[full, n[full]] = 0.0
        if bonus_logprobs is not None:
            lb = np.asarray(bonus_logprobs.cpu() if is_tensor(bonus_logprobs) else bonus_logprobs, dtype=np.float64).reshape(-1)
            if lb.shape != (n.size,):
                raise ValueError(f"bonus_logprobs must have one entry per request, shape ({n.size},), got {lb.shape}")
            logpi[full, n[full]] = logp[full, n[full]] = lb[full]
        return Emitted(tokens, logpi, logp, spent)


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
    ``normalize``, ``method``, ``price`` (one for all: each position's π maximises
    :math:`\sum_i \min(\pi_i, q_i) - \lambda D_f(\pi\|p)`, docs/theory.md §4), ``return_logprobs`` and
    ``bonus_logprobs`` as in :func:`rejection_sample`.

    Examples
    --------
    >>> import numpy as np
    >>> from mentored.verify.serving import Verifier
    >>> ver = Verifier(3, divergence="tv", budget=0.4, seed=0)
    >>> p = np.array([[0.6, 0.4, 0.0]]); q = np.array([[0.2, 0.8, 0.0]])
    >>> ver(np.array([1]), [1], q, p, np.array([[0]]), uniforms=np.array([[0.9, 0.5]]))
    array([[1, 0]], dtype=int32)
    """

    def __init__(self, vocab_size, *, divergence="kl", budget=0.0, zeros="keep", max_tokens=1024, dtype=np.float32, threads=1, seed=None, validate=False,
                 normalize=False, method="token", price=None):

        self.V = int(vocab_size)
        self.div = _divergence(divergence)
        if core_divergence(self.div) is None:
            raise ValueError(f"Verifier takes a divergence the core evaluates (a built-in, or one from Divergence.from_sympy "
                             f"with a program); {self.div.name!r} has none: use rejection_sample")
        self.budget = float(per_row(budget, 1, "budget")[0])
        # One price for every request instead of the budget (docs/theory.md §4): π maximises A − λD.
        self.price = None if price is None else float(priced_values(np.array([self.budget]), price, 1)[0][0])
        self.zeros = check_zeros(zeros)
        self.threads = threads_arg(threads)
        self.validate = validate
        self.normalize = bool(normalize)
        self.method = method
        self._block = block_method(method)
        # The core's tolerance on the rows' sums, by their dtype (its overloads take these two)
        self._rtol = {np.dtype(d): sum_rtol(d, self.normalize) for d in (np.float32, np.float64)}
        self.rng = np.random.default_rng(seed)
        self._dtype = np.dtype(dtype)
        self._divs = [int(self.div.compiled)]
        self._keep = self.zeros == "keep"
        self._alloc(int(max_tokens))

    def _alloc(self, T):
        self._eps = np.array([self.budget if self.price is None else self.price])  # one for every row (the core broadcasts it)
        self._priced = None  # the core's per-request flags, kept for the last B
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

    def __call__(self, draft_token_ids, num_draft_tokens, draft_probs, target_probs, bonus_token_ids, *, is_greedy=None, generators=None, uniforms=None,
                 return_logprobs=False, bonus_logprobs=None):
        # One core call and a few attribute reads: after the core has streamed the rows, each Python
        # operation runs on a cold cache. The core takes numpy arrays of one float dtype,
        # C-contiguous, as they are (no copy): anything else raises TypeError there, a shape it
        # refuses ValueError, and both go to rejection_sample, which converts or names the problem.
        draft = draft_token_ids
        if self.validate or generators or return_logprobs:  # the law of what is emitted: rejection_sample's notes
            return self._fallback(draft, num_draft_tokens, draft_probs, target_probs, bonus_token_ids, is_greedy, generators, uniforms,
                                  return_logprobs, bonus_logprobs)
        T = len(draft)
        if uniforms is None:
            u = self._draw(T)
        else:
            u = given_uniforms(uniforms, T)
        rtol = self._rtol.get(getattr(target_probs, "dtype", None), np.inf)  # another dtype: TypeError in the core
        priced = None
        if self.price is not None:
            B = len(num_draft_tokens)
            if self._priced is None or self._priced.shape[0] != B:
                self._priced = np.ones(B, dtype=bool)
            priced = self._priced
        try:
            out, bad, status, pos, stats = _core.verify(
                target_probs, draft_probs, draft, num_draft_tokens, bonus_token_ids, u, self._eps, self._divs, None, is_greedy, None, None,
                self._keep, 0, True, self.threads, True, rtol, rtol, False, self._block, False, priced,
            )
        except (TypeError, ValueError):
            return self._fallback(draft, num_draft_tokens, draft_probs, target_probs, bonus_token_ids, is_greedy, None, u)
        if bad < 0:
            return out
        dtypes = (target_probs.dtype, target_probs.dtype if draft_probs is None else draft_probs.dtype)
        if self.normalize and rescalable(status, stats, dtypes):
            return self._fallback(draft, num_draft_tokens, draft_probs, target_probs, bonus_token_ids, is_greedy, None, u)
        raise refusal(status, bad, pos, stats, dtypes, target_probs.shape[1], self.div, num_draft_tokens, self.normalize)

    def _fallback(self, draft, n, q, p, bonus, is_greedy, generators, uniforms, return_logprobs=False, bonus_logprobs=None):
        if uniforms is None and not generators and getattr(draft, "ndim", 0) == 1:
            uniforms = self._draw(draft.shape[0])  # this verifier's stream, seeded or not
        return rejection_sample(
            draft, n, q, p, bonus, divergence=self.div, budget=self.budget, price=self.price, is_greedy=is_greedy, generators=generators,
            uniforms=uniforms, zeros=self.zeros, threads=self.threads or None, normalize=self.normalize, method=self.method,
            return_logprobs=return_logprobs, bonus_logprobs=bonus_logprobs,
        )


# ---------------------------------------------------------------- draft trees


_OBJECTIVES = ("length", "acceptance")


class _TreePlan:
    """Host-side layout of a batch of draft trees: who is where, each node's parent, depth and
    children, the nodes by height (bottom-up), and each request's divergence, budget and greedy flag.

    ``parents`` are local to each request: −1 at its node 0 (the root), ``0 <= parents[i] < i``
    otherwise. Every refusal names the request and the node. O(N) in the number of nodes, whatever
    the trees' shapes: checks and indices vectorised; depths, heights and children (what the torch
    path and user generators read) from one pass of the core (``_core.tree_layout``), on first use;
    children padded to a matrix only a height at a time (:meth:`height_kids`)."""

    def __init__(self, parents, num_nodes, N, is_greedy, divergence, budget, objective, price=None):
        if objective not in _OBJECTIVES:
            raise ValueError(f"objective must be 'length' or 'acceptance', got {objective!r}")
        self.objective, self.length = objective, objective == "length"
        n = _int64("num_nodes", _host_array("num_nodes", num_nodes, "iu", "integers"), lambda b: f"request {b}", "count")
        if n.ndim != 1:
            raise ValueError(f"num_nodes must hold one count per request, got shape {n.shape}")
        B = n.shape[0]
        if B and n.min() < 1:
            b = int(np.flatnonzero(n < 1)[0])
            raise ValueError(f"num_nodes must be at least 1 (the root) for every request; request {b} has {int(n[b])}")
        if int(n.sum()) != N:
            raise ValueError(f"num_nodes sums to {int(n.sum())}, but tokens holds {N} nodes")
        self.B, self.T, self.N, self.n, self.counts = B, N, N, n, n
        self.starts = np.concatenate([[0], np.cumsum(n)[:-1]]).astype(np.int64) if B else n
        self.req = np.repeat(np.arange(B, dtype=np.int64), n)
        self.local = np.arange(N, dtype=np.int64) - self.starts[self.req]
        par = _host_array("parents", parents, "iu", "integers")
        if par.shape != (N,):
            raise ValueError(f"parents must have one entry per node, shape ({N},), got {par.shape}")
        par = _int64("parents", par, self.where, "parent")
        root = self.local == 0
        for bad, what in ((root & (par != -1), "the root (node 0) must have parent -1"),
                          (~root & (par == -1), "a second root (parent -1): only node 0 of a request is its root"),
                          (~root & ((par < -1) | (par >= self.local)),
                           "its parent is not an earlier node of its request (parents are local: 0 <= parents[i] < i)")):
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ValueError(f"parents: {what}; {self.where(i)} has parent {int(par[i])}")
        self.parents = np.ascontiguousarray(par)
        self.gp = np.ascontiguousarray(np.where(root, -1, self.starts[self.req] + par))
        self.greedy_or_none = _greedy_flags(is_greedy, B)
        self.greedy = self.greedy_or_none if self.greedy_or_none is not None else np.zeros(B, dtype=bool)
        self.greedy_node = self.greedy[self.req]
        self.divs, self.which = _request_divergences(divergence, B)
        self.eps, self.priced = priced_values(per_row(budget, B, "budget", unit="request"), price, B)
        self.eps_node = self.eps[self.req]
        if self.priced is not None:  # a price is solved in the core (tree.hpp, node_masses), for its built-ins
            for b in np.flatnonzero(self.priced):
                d = self.divs[0 if self.which is None else int(self.which[b])]
                if d.compiled is None:
                    raise ValueError(f"price= on draft trees needs a built-in divergence (the core solves each node's price optimum); "
                                     f"request {int(b)} has {d.name!r}: give it a budget")
        if self.length:
            for d in self.divs:
                _check_weighted(d)

    def where(self, i: int) -> str:
        return f"request {int(self.req[i])}, node {int(self.local[i])}"

    # The layout the torch path and user generators read (the core computes its own): every node's
    # depth, its children in node order (children[first[v]:first[v + 1]]) and the nodes by height
    # (by_height[level[h]:level[h + 1]]), from one O(N) pass of the core.
    @cached_property
    def _layout(self):
        depth, _, first, children, by_height, level = _core.tree_layout(self.gp)
        return depth, first, children, by_height, level

    @cached_property
    def depth(self) -> np.ndarray:
        return self._layout[0]

    @cached_property
    def width(self) -> int:
        """The output's width: the deepest node's depth + 1."""
        return int(self.depth.max()) + 1 if self.N else 1

    @cached_property
    def first(self) -> np.ndarray:
        return self._layout[1]

    @cached_property
    def children(self) -> np.ndarray:
        return self._layout[2]

    @cached_property
    def num_kids(self) -> np.ndarray:
        return np.diff(self.first)

    @cached_property
    def K(self) -> int:
        """The most children of a node."""
        return int(self.num_kids.max()) if self.N else 0

    @cached_property
    def by_height(self) -> np.ndarray:
        return self._layout[3]

    @cached_property
    def num_heights(self) -> int:
        """The greatest height: heights 1 .. num_heights hold the nodes with children."""
        return self._layout[4].size - 2

    def height_kids(self, h: int):
        """(nodes, kids): the global indices of the nodes of height ``h`` ≥ 1, and their children in
        node order, padded with −1 to the most children among them."""
        level = self._layout[4]
        nodes = self.by_height[level[h] : level[h + 1]]
        cnt = self.num_kids[nodes]
        col = np.arange(int(cnt.max()))
        at = np.minimum(self.first[nodes][:, None] + col, self.children.size - 1)
        return nodes, np.where(col < cnt[:, None], self.children[at], -1)

    def groups_of(self, nodes: np.ndarray) -> list:
        """The divergences of ``nodes`` (global indices): [(Divergence, rows of nodes)]."""
        if self.which is None:
            return [(self.divs[0], np.arange(nodes.size))]
        w = self.which[self.req[nodes]]
        return [(d, np.flatnonzero(w == i)) for i, d in enumerate(self.divs) if np.any(w == i)]

    def check_tokens(self, tokens: np.ndarray, V: int) -> np.ndarray:
        """Token ids on the host: integers in [0, V), distinct among siblings; int64."""
        t = _host_array("tokens", tokens, "iu", "integers")
        if t.shape != (self.N,):
            raise ValueError(f"tokens must be flat, one id per node, shape ({self.N},), got {t.shape}")
        out = (t < 0) | (t >= V)  # before the cast: an unsigned id past int64 is named by its value
        if out.any():
            i = int(np.flatnonzero(out)[0])
            raise ValueError(f"tokens: id {int(t[i])} at {self.where(i)} is outside [0, V) = [0, {V})")
        t = t.astype(np.int64, copy=False)
        child = np.flatnonzero(self.gp >= 0)
        key = self.gp[child] * V + t[child]
        order = np.argsort(key, kind="stable")
        same = np.flatnonzero(key[order][1:] == key[order][:-1])
        if same.size:
            i, j = child[order[same[0]]], child[order[same[0] + 1]]
            raise ValueError(f"tokens: {self.where(j)} carries token {int(t[j])}, as does its sibling node {int(self.local[i])} "
                             f"(children of node {int(self.local[self.gp[j]])}); siblings must carry distinct tokens")
        return t


def _check_weighted(div) -> None:
    """objective="length" needs f̃′ strictly increasing on (0, ∞) (f strictly convex), so that (f̃′)⁻¹,
    which the weighted verifier solves its stationarity with, is a function: every built-in (tv by its
    linear program), and a user generator that is linear on no interval (SymbolicInfo.linear_on).
    f″ may be infinite or 0 at single points (|t − 1|^{3/2} at 1), and vanish in floating point on a tail
    (log cosh(t − 1)'s past t ≈ 370)."""
    if div.builtin is not None:
        return
    info = div.symbolic
    if info is None:
        raise ValueError(f"objective='length' needs the generator's derivative and its inverse; divergence {div.name!r} was built "
                         "from callables: build it with Divergence.from_sympy, or use objective='acceptance'")
    if info.linear_on is not None:
        lo, hi = info.linear_on
        raise ValueError(f"objective='length' needs a strictly convex generator (f' strictly increasing on (0, inf), so that "
                         f"(f')^-1 is a function); {div.name!r} is linear on ({lo:g}, {hi:g}): use objective='acceptance'")


def _tree(tokens, parents, num_nodes, target_probs, divergence, budget, objective, is_greedy, generators, uniforms, zeros, threads,
          validate, normalize, price=None):
    check_zeros(zeros)
    if generators is not None and uniforms is not None:
        raise ValueError("tree_sample was given both generators and uniforms: pass one of them (uniforms: the (N, 2) draws, used "
                         "as given; generators: a stream per seeded request)")
    N = len(tokens)
    plan = _TreePlan(parents, num_nodes, N, is_greedy, divergence, budget, objective, price)
    _check_generators(generators, plan.B)
    backend = get_backend(target_probs, tokens)
    return backend.tree(plan, tokens, target_probs, generators=generators, uniforms=uniforms, zeros=zeros, threads=threads,
                        validate=validate, normalize=normalize)


def tree_sample(tokens, parents, num_nodes, target_probs, *, divergence="kl", budget=0.0, objective="length", is_greedy=None,
                generators=None, uniforms=None, zeros="keep", threads=None, validate=True, normalize=False, return_logprobs=False,
                price=None):
    r"""Verify a batch of draft trees with mentored decoding, in one call.

    Request ``b`` owns the ``num_nodes[b]`` consecutive nodes starting at :math:`\sum_{c<b} n_c` of
    ``tokens``, ``parents`` and ``target_probs``, in topological order: its node 0 is the root (the
    last accepted token, not emitted), and ``parents[i]`` is local to the request, ``-1`` at the root
    and an earlier node (``0 <= parents[i] < i``) otherwise; ``tokens[i]`` is the token node ``i`` adds
    and ``target_probs[i]`` the target :math:`p_i` after its path (the root's row: the law of the first
    new token; a leaf's: of its bonus). At node :math:`v` with children :math:`c` carrying the distinct
    tokens :math:`x_c`, the verifier :math:`\pi_v` maximises :math:`\sum_c w_c\,\pi(x_c)` subject to
    :math:`D_f(\pi\|p_v) \le \varepsilon`:

    - ``objective="length"``: :math:`w_c = 1 + A(c)`, with :math:`A(\text{leaf}) = 0` and
      :math:`A(v) = \sum_c w_c\,\pi_v(x_c)` the expected number of accepted tokens from :math:`v`:
      the expected accepted length, maximised node by node bottom-up;
    - ``objective="acceptance"``: :math:`w_c = 1`, the set verifier, maximising :math:`\pi_v(S_v)`;
      its mass on the children :math:`S_v` is :func:`onehot_acceptance` at :math:`p_v(S_v)`, spread in
      proportion to :math:`p_v`.

    The walk: at :math:`v` the first child :math:`c` with ``u0 < π(x_1) + … + π(x_c)`` is accepted
    (``u = uniforms[v]``); otherwise, and at a leaf, the token is drawn from :math:`p_v` without its
    children's tokens, renormalised (inverse CDF at ``u1``), and the request stops. Every emitted token
    has law :math:`\pi_v` at its node; at ``budget=0``, :math:`\pi_v = p_v` and the acceptance at
    :math:`v` is :math:`p_v(S_v)` (the target-only rule SGLang's tree verification uses). Greedy
    requests accept the child that is :math:`\arg\max p_v` (first maximum) and emit the argmax.
    A chain (``parents[i] = i − 1``) is :func:`rejection_sample` with ``draft_probs=None``, decision
    for decision, given the same uniforms and the leaf's bonus drawn from its row at ``u1`` (but
    where :math:`f(0) = \infty` and :math:`p_v(x)/\sum p_v` rounds to 1 with mass left off
    :math:`x`: the tree keeps that complement a few ulps, below).

    Parameters
    ----------
    tokens : (N,) integer array or tensor, ids in [0, V), distinct among siblings
    parents : (N,) integers on the host (a list or an array; local to each request, as above)
    num_nodes : (B,) integers ≥ 1 on the host, summing to N
    target_probs : (N, V) float array or tensor (after temperature, top-k/top-p, masks)
    divergence, budget, is_greedy, zeros, normalize, threads
        As :func:`rejection_sample` (one divergence and budget, or one per request).
    price : float, or one per request, optional
        Instead of a budget, a price :math:`\lambda \ge 0` (``inf`` allowed; NaN in a per-request
        array: that request uses its budget): :math:`\pi_v` maximises
        :math:`\sum_c w_c\,\pi(x_c) - \lambda D_f(\pi\|p_v)` (docs/theory.md §4, "Budgets by price").
        ``"acceptance"``: the children's mass is :func:`onehot_acceptance` with ``price=`` at
        :math:`p_v(S_v)`; ``"length"``: the stationarity of the budget's weighted problem with its
        multiplier fixed (:math:`\theta = 1/\lambda`), and for ``tv`` every class whose weight is at
        least :math:`\lambda` below the top weight drained to it. Built-in divergences, host memory only.
    objective : {"length", "acceptance"}
    generators : dict request index → numpy or torch generator, optional
        A seeded request draws the two uniforms of each of its nodes from its own generator.
    uniforms : (N, 2) in [0, 1), optional
        Row ``i``: ``u0`` walks node ``i``'s children, ``u1`` draws its token if the walk stops there.
        Given with ``generators``: refused (pass one of them).
    validate : bool
        Tensors: check the ids, siblings and rows (host synchronisations); without it nothing is read
        back from the device. Host input is always checked (by the core, in its pass over the rows).
    return_logprobs : bool
        Return an :class:`Emitted` ``(tokens_out, logprobs)`` in place of ``tokens_out``: :math:`\log
        \pi_v(y)` of each emitted token at its node :math:`v` (the children's masses on their tokens, the
        rest of :math:`\pi_v` in proportion to :math:`p_v`; at a leaf :math:`p_v`), with ``target_logprobs``
        and ``spent`` (:math:`D_f(\pi_v\|p_v)`) beside them (docs/theory.md §11), float64 numpy arrays.

    Ids (``tokens``, ``parents``, ``num_nodes``) may be of any integer dtype, unsigned included, and
    are read by value: a uint64 id from 2⁶³ on is outside every vocabulary, and refused as such.

    Where :math:`f(0) = \infty` (reverse_kl, neyman_chi2, user generators like
    :math:`-\log t`), a complement of the children with no mass costs :math:`D = \infty`: wherever
    :math:`p_v` puts mass off the children, their ``accept`` values sum to less than 1 by at least
    the complement's solved mass (a few ulps where that is smaller), in any order of summation, so
    that :math:`1 - \sum` is the complement's mass, :math:`D_f(\pi_v\|p_v) \le \varepsilon` as
    read, and the walk reaches the complement.

    Returns
    -------
    (tokens_out, last_accepted): int32 (B, W), the accepted tokens, then the emitted one, then −1;
    and the local index of the last accepted node of each request (0: the root, nothing
    accepted), int64 (B,), whose path is what a KV cache keeps. numpy in, numpy out; tensors on
    their device. W = the deepest node's depth + 1 over the whole batch (a request emits at most
    its own depth + 1 tokens; the rest of its row is −1): the output is dense, 4·B·W bytes, so one
    deep request widens every row (a 32,000-node chain among 255 small trees: 33 MB). Batch requests
    of like depths, or verify a deep one alone, where that matters.

    Cost: the host plan is O(N) (vectorised checks; depths, children and heights in one pass of
    the core where the torch path or a user generator reads them); the core walks each request in
    O(its nodes · V).

    Examples
    --------
    >>> import numpy as np
    >>> from mentored.verify.serving import tree_sample
    >>> p = np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8], [0.6, 0.2, 0.2]])
    >>> out, last = tree_sample([2, 0, 1], [-1, 0, 0], [3], p, budget=0.0, uniforms=[[0.7, 0.5], [0.0, 0.0], [0.0, 0.5]])
    >>> out.tolist(), last.tolist()  # u0 = 0.7 lands on node 2 (token 1): p(0) = 0.5 ≤ 0.7 < 0.8
    ([[1, 0]], [2])
    """
    out, last, accept, _ = _tree(tokens, parents, num_nodes, target_probs, divergence, budget, objective, is_greedy, generators, uniforms,
                                 zeros, threads, validate, normalize, price)
    if return_logprobs:
        N = len(tokens)
        plan = _TreePlan(parents, num_nodes, N, is_greedy, divergence, budget, objective, price)
        return _tree_notes(plan, tokens, target_probs, out, last, accept), last
    return out, last


def _host_numpy(x):
    return np.asarray(x.detach().cpu() if is_tensor(x) else x)


def _tree_notes(plan, tokens, target_probs, out, last, accept) -> "Emitted":
    """log π_v, log p_v and D_f(π_v‖p_v) of each token a tree walk emitted, from the verifier's own masses:
    along the path root → last, node v emitted its accepted child's token (π_v = its mass), and the walk's
    last node its drawn token (π_v = (1 − Σ children's masses)·p_v/(1 − p_v(children)) off the children)."""
    tok, P, acc = _host_numpy(tokens).astype(np.int64), _host_numpy(target_probs).astype(np.float64), _host_numpy(accept).astype(np.float64)
    t_out, lst = _host_numpy(out), _host_numpy(last).astype(np.int64)
    P = P / P.sum(1, keepdims=True)
    kids = [[] for _ in range(len(tok))]
    for i, g in enumerate(plan.gp):
        if g >= 0:
            kids[g].append(i)
    shape = t_out.shape
    logpi, logp, spent = (np.full(shape, np.nan) for _ in range(3))
    terms = {}
    for b in range(plan.B):
        path = [int(plan.starts[b] + lst[b])]
        while plan.gp[path[-1]] >= 0:
            path.append(int(plan.gp[path[-1]]))
        path.reverse()  # root, …, last accepted
        div = plan.divs[0 if plan.which is None else int(plan.which[b])]
        term = terms.setdefault(id(div), _node_term(div))
        for d, v in enumerate(path):
            y = int(t_out[b, d])
            ch = kids[v]
            m = acc[ch] if ch else np.zeros(0)
            ps = P[v, tok[ch]] if ch else np.zeros(0)
            if plan.greedy[b]:
                hot = np.argmax(P[v])
                pi_y, D = float(y == hot), _point_mass_divergence(term, P[v, hot])
            else:
                rest_p, rest_m = max(1.0 - ps.sum(), 0.0), max(1.0 - m.sum(), 0.0)
                if d + 1 < len(path):
                    pi_y = float(acc[path[d + 1]])
                else:
                    pi_y = rest_m * P[v, y] / rest_p if rest_p > 0 else np.nan
                D = float(np.sum(term(m, ps)) + term(rest_m, rest_p)) if ch else 0.0
            logpi[b, d], logp[b, d], spent[b, d] = np.log(pi_y), np.log(P[v, y]), D
    return Emitted(out, logpi, logp, spent)


def _node_term(div):
    """y·f̃(x/y), elementwise, of the divergence (a unit of mass off p costing f̃∞)."""
    from ..backends.host import perspective_terms

    return perspective_terms(div)


def _point_mass_divergence(term, pa: float) -> float:
    """D_f(δ_a‖p) = p_a f̃(1/p_a) + (1 − p_a) f̃(0): a greedy request's verifier."""
    return float(term(1.0, pa) + term(0.0, 1.0 - pa))


def tree_verifier(tokens, parents, num_nodes, target_probs, *, divergence="kl", budget=0.0, objective="length", is_greedy=None,
                  zeros="keep", threads=None, validate=True, normalize=False, price=None):
    r"""The verifier :func:`tree_sample` samples from: for each node :math:`j`, ``accept[j]`` =
    :math:`\pi_{v}(x_j)`, the mass its parent's verifier puts on its token (the probability of moving
    from :math:`v` to :math:`j`; 1 at roots), and ``value[j]`` = :math:`A(j)`, the expected number of
    accepted tokens from :math:`j` (``value`` at a root: the request's expected accepted length).
    Arguments as :func:`tree_sample`; float64 arrays (N,), or tensors on the input's device.

    >>> import numpy as np
    >>> from mentored.verify.serving import tree_verifier
    >>> p = np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8], [0.6, 0.2, 0.2]])
    >>> accept, value = tree_verifier([2, 0, 1], [-1, 0, 0], [3], p, divergence="tv", budget=0.1, objective="acceptance")
    >>> accept.round(6).tolist(), round(float(value[0]), 12)  # p(S) + ε = 0.9, in proportion to p on S
    ([1.0, 0.5625, 0.3375], 0.9)
    """
    no_walk = np.zeros((len(tokens), 2))  # the verifier reads no uniform: none is drawn (no generator advances)
    _, _, accept, value = _tree(tokens, parents, num_nodes, target_probs, divergence, budget, objective, is_greedy, None, no_walk, zeros,
                                threads, validate, normalize, price)
    return accept, value
