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

from ..check.inputs import check_zeros, per_row, sum_rtol, threads_arg
from ..backends import get_backend, is_tensor
from ..backends.host import core_divergence, given_uniforms, refusal, rescalable
from ..divergences import Divergence, divergence as _divergence
from .. import _core

__all__ = ["PLACEHOLDER_TOKEN_ID", "rejection_sample", "onehot_acceptance", "Verifier"]

PLACEHOLDER_TOKEN_ID = -1




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
        if type(num_draft_tokens) is list and all(type(c) is int for c in num_draft_tokens):
            # vLLM's own form, a list of ints: read without numpy (a few µs a call)
            n, lo, total, K = num_draft_tokens, min(num_draft_tokens, default=0), sum(num_draft_tokens), max(num_draft_tokens, default=0)
            if len(n) != B:
                raise ValueError(f"num_draft_tokens must have one entry per request (B = {B} from bonus_token_ids), got shape ({len(n)},)")
        else:
            n = _host_array("num_draft_tokens", num_draft_tokens, "iu", "integers").astype(np.int64, copy=False)
            if n.ndim != 1 or n.shape[0] != B:
                raise ValueError(f"num_draft_tokens must have one entry per request (B = {B} from bonus_token_ids), got shape {n.shape}")
            lo, total, K = (int(n.min()), int(n.sum()), int(n.max())) if B else (0, 0, 0)
        if lo < 0:
            raise ValueError(f"num_draft_tokens must be nonnegative, got {lo}")
        if total != T:
            raise ValueError(f"num_draft_tokens sums to {total}, but draft_token_ids holds {T} tokens")
        self.B, self.T, self.counts, self.K = B, T, n, K
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
        if type(budget) in (float, int) and budget >= 0:  # one for all, the usual case (NaN fails the test)
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
        if not (isinstance(gen, np.random.Generator) or (is_tensor(gen) and type(gen).__name__ == "Generator")):
            raise TypeError(f"generators[{b}] (request {b}) must be a numpy.random.Generator or torch.Generator, got {type(gen).__name__}")


# ---------------------------------------------------------------- the token-only verifier (§8)


def onehot_acceptance(p_x, budget, divergence="kl", zeros="keep"):
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

    Examples
    --------
    >>> from mentored.verify.serving import onehot_acceptance
    >>> float(onehot_acceptance(0.3, 0.05, divergence="tv"))  # p_x + ε
    0.35
    """
    div = _divergence(divergence)
    check_zeros(zeros)
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

    Returns
    -------
    int32 array or tensor (B, max(num_draft_tokens) + 1), −1 where nothing is emitted.
    """
    check_zeros(zeros)
    B = _bonus_shape(bonus_token_ids)
    T = int(draft_token_ids.shape[0]) if getattr(draft_token_ids, "ndim", 1) == 1 else -1
    plan = _Plan(num_draft_tokens, B, is_greedy, divergence, budget, T)
    _check_generators(generators, B)
    backend = get_backend(target_probs, draft_probs, draft_token_ids, bonus_token_ids)
    return backend.verify(plan, draft_token_ids, draft_probs, target_probs, bonus_token_ids, generators=generators, uniforms=uniforms,
                          zeros=zeros, threads=threads, validate=validate, normalize=normalize, logits=bool(logits))


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
    >>> from mentored.verify.serving import Verifier
    >>> ver = Verifier(3, divergence="tv", budget=0.4, seed=0)
    >>> p = np.array([[0.6, 0.4, 0.0]]); q = np.array([[0.2, 0.8, 0.0]])
    >>> ver(np.array([1]), [1], q, p, np.array([[0]]), uniforms=np.array([[0.9, 0.5]]))
    array([[1, 0]], dtype=int32)
    """

    def __init__(self, vocab_size, *, divergence="kl", budget=0.0, zeros="keep", max_tokens=1024, dtype=np.float32, threads=1, seed=None, validate=False,
                 normalize=False):

        self.V = int(vocab_size)
        self.div = _divergence(divergence)
        if core_divergence(self.div) is None:
            raise ValueError(f"Verifier takes a divergence the core evaluates (a built-in, or one from Divergence.from_sympy "
                             f"with a program); {self.div.name!r} has none: use rejection_sample")
        self.budget = float(per_row(budget, 1, "budget")[0])
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
            u = given_uniforms(uniforms, T)
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
        if self.normalize and rescalable(status, stats, dtypes):
            return self._fallback(draft, num_draft_tokens, draft_probs, target_probs, bonus_token_ids, is_greedy, None, u)
        raise refusal(status, bad, pos, stats, dtypes, target_probs.shape[1], self.div, num_draft_tokens, self.normalize)

    def _fallback(self, draft, n, q, p, bonus, is_greedy, generators, uniforms):
        if uniforms is None and not generators and getattr(draft, "ndim", 0) == 1:
            uniforms = self._draw(draft.shape[0])  # this verifier's stream, seeded or not
        return rejection_sample(
            draft, n, q, p, bonus, divergence=self.div, budget=self.budget, is_greedy=is_greedy, generators=generators,
            uniforms=uniforms, zeros=self.zeros, threads=self.threads or None, normalize=self.normalize,
        )
