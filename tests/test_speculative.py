"""speculative_step: the emitted law is π, acceptance is Σ min(π, q), vLLM's conventions, torch = numpy."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats

import mentored
from mentored.check.testing import KINDS, budgets_for, instance

DIVS = ("tv", "kl", "hellinger")


def _batch(rng, B, k, V, peaked=1.0):
    p = rng.dirichlet(np.full(V, peaked), size=(B, k + 1))
    q = rng.dirichlet(np.full(V, peaked), size=(B, k))
    draft = np.array([[rng.choice(V, p=q[b, j]) for j in range(k)] for b in range(B)], dtype=np.int64)
    bonus = np.array([[rng.choice(V, p=p[b, k])] for b in range(B)], dtype=np.int64)
    return p, bonus, q, draft


def _lossless(p, bonus, q, draft, u):
    """Leviathan et al.'s rule written out directly from p, with the documented uniforms layout."""
    B, k, V = q.shape
    out = np.full((B, k + 1), -1, dtype=np.int64)
    for b in range(B):
        for j in range(k):
            x = draft[b, j]
            if u[b, j, 0] * q[b, j, x] < p[b, j, x]:
                out[b, j] = x
                continue
            w = np.maximum(p[b, j] - q[b, j], 0.0)
            out[b, j] = int(np.flatnonzero(np.cumsum(w) > u[b, j, 1] * w.sum())[0])
            break
        else:
            out[b, k] = bonus[b, 0]
    return out


@pytest.mark.parametrize("div", DIVS)
def test_emitted_law_is_pi_and_acceptance_is_sum_min(div, rng):
    V, N = 6, 40_000
    p = rng.dirichlet(np.ones(V))
    q = rng.dirichlet(np.ones(V))
    budget = 0.3 * float(mentored.divergence(div)(q, p)) if div != "tv" else 0.5 * float(np.abs(p - q).sum() / 2)
    pi = mentored.solve(p, q, divergence=div, budget=budget).pi
    P = np.broadcast_to(np.stack([p, p]), (N, 2, V))
    Q = np.broadcast_to(q, (N, 1, V))
    draft = rng.choice(V, size=(N, 1), p=q)
    out = mentored.speculative_step(P, np.zeros((N, 1), np.int64), Q, draft, divergence=div, budget=budget, seed=11)
    counts = np.bincount(out[:, 0], minlength=V)
    # chi-square against π (fixed seeds: deterministic; the threshold is loose on purpose)
    assert stats.chisquare(counts, N * pi).pvalue > 1e-4
    accepted = out[:, 1] >= 0  # the bonus column is filled exactly when the draft was accepted
    acc = float(np.sum(np.minimum(pi, q)))
    sd = np.sqrt(acc * (1 - acc) / N)
    assert abs(accepted.mean() - acc) < 5 * sd
    assert acc > 1 - np.abs(p - q).sum() / 2  # the budget buys acceptance


def test_conventions(rng):
    B, k, V = 64, 5, 12
    p, bonus, q, draft = _batch(rng, B, k, V)
    out = mentored.speculative_step(p, bonus, q, draft, divergence="kl", budget=0.05, seed=0)
    assert out.dtype == np.int64 and out.shape == (B, k + 1)
    for b in range(B):
        row = out[b]
        neg = np.flatnonzero(row < 0)
        if neg.size == 0:  # all accepted: drafts then bonus
            assert_array_equal(row[:k], draft[b])
            assert row[k] == bonus[b, 0]
        else:
            j = neg[0] - 1  # the first rejection
            assert j >= 0 and np.all(row[neg[0] :] == -1)
            assert_array_equal(row[:j], draft[b, :j])
            assert 0 <= row[j] < V
    assert np.any(out[:, k] >= 0) and np.any(out[:, k] < 0)


def test_float32_and_zero_drafts(rng):
    B, k, V = 8, 3, 10
    p, bonus, q, draft = _batch(rng, B, k, V)
    out = mentored.speculative_step(p.astype(np.float32), bonus, q.astype(np.float32), draft.astype(np.int32), budget=0.1, seed=1)
    assert out.dtype == np.int64 and out.shape == (B, k + 1)
    out0 = mentored.speculative_step(p[:, :1], bonus, q[:, :0], draft[:, :0], budget=0.1)
    assert_array_equal(out0, bonus)


@pytest.mark.parametrize("peaked", [0.1, 1.0])
def test_budget_zero_is_lossless_decision_for_decision(peaked, rng):
    B, k, V = 200, 4, 16
    p, bonus, q, draft = _batch(rng, B, k, V, peaked)
    u = rng.random((B, k, 2))
    want = _lossless(p, bonus, q, draft, u)
    for div in mentored.BUILTIN_NAMES:
        out = mentored.speculative_step(p, bonus, q, draft, divergence=div, budget=0.0, uniforms=u)
        assert_array_equal(out, want)


def test_a_budget_accepts_more_on_average(rng):
    B, k, V = 400, 4, 16
    p, bonus, q, draft = _batch(rng, B, k, V)
    u = rng.random((B, k, 2))
    accepted = [np.sum(mentored.speculative_step(p, bonus, q, draft, divergence="tv", budget=b, uniforms=u)[:, :k] == draft) for b in (0.0, 0.1, 1.0)]
    # same uniforms: the acceptance test u q_x < π_x only gets easier as π moves toward q on drafted tokens
    assert accepted[0] < accepted[1] < accepted[2]
    assert accepted[2] == B * k  # budget ≥ TV: π = q accepts every draft


@pytest.mark.parametrize(
    "change, error, match",
    [
        (lambda a: {**a, "draft_probs": a["draft_probs"][:, :, :-1]}, ValueError, "target_with_bonus_probs must have shape"),
        (lambda a: {**a, "target_with_bonus_probs": a["target_with_bonus_probs"][:, :-1]}, ValueError, r"\(B, k \+ 1, V\)"),
        (lambda a: {**a, "draft_token_ids": a["draft_token_ids"][:, :-1]}, ValueError, "draft_token_ids must have shape"),
        (lambda a: {**a, "bonus_token_ids": a["bonus_token_ids"][:, 0]}, ValueError, "bonus_token_ids must have shape"),
        (lambda a: {**a, "draft_token_ids": a["draft_token_ids"] + 100}, ValueError, r"must lie in \[0, V\)"),
        (lambda a: {**a, "draft_token_ids": a["draft_token_ids"].astype(float)}, TypeError, "integer token ids"),
        (lambda a: {**a, "draft_probs": a["draft_probs"].astype(np.float16)}, TypeError, "half precision"),
        (lambda a: {**a, "draft_probs": a["draft_probs"][0]}, ValueError, r"draft_probs must have shape \(B, k, V\)"),
        (lambda a: {**a, "uniforms": np.zeros((2, 3, 1))}, ValueError, "uniforms must have shape"),
        (lambda a: {**a, "uniforms": np.ones((2, 3, 2))}, ValueError, r"uniforms must lie in \[0, 1\)"),
        (lambda a: {**a, "budget": -1.0}, ValueError, "budget must be nonnegative"),
        (lambda a: {**a, "budget": np.zeros(5)}, ValueError, "budget must broadcast"),
        (lambda a: {**a, "draft_probs": 2 * a["draft_probs"]}, ValueError, "rows must sum to 1"),
    ],
)
def test_bad_input_is_refused_clearly(change, error, match, rng):
    p, bonus, q, draft = _batch(rng, 2, 3, 5)
    args = dict(target_with_bonus_probs=p, bonus_token_ids=bonus, draft_probs=q, draft_token_ids=draft, budget=0.1)
    with pytest.raises(error, match=match):
        mentored.speculative_step(**change(args))


def _bad_rows(rng):
    """(name of the refused input, message, p, q): one bad row each, the messages of the row checks."""
    p, bonus, q, draft = _batch(rng, 2, 3, 5)
    cases = []
    x = q.copy()
    x[1, 2, 0] = np.nan
    cases.append(("draft_probs", r"draft_probs contains NaN or infinite entries \(row \(b, j\) = \(1, 2\)\)", p, x))
    x = p.copy()
    x[0, 3, 1] = -0.1  # the bonus position's row: never solved, checked all the same
    cases.append(("target", r"target_with_bonus_probs has negative entries \(row \(b, j\) = \(0, 3\)\)", x, q))
    x = p.copy()
    x[1, 0] *= 1.01
    cases.append(("target", r"target_with_bonus_probs rows must sum to 1 \(relative tolerance 1e-06 for float64\); "
                  r"row \(b, j\) = \(1, 0\) sums to 1\.01", x, q))
    x = q.copy().astype(np.float32)
    x[0, 1] = 0.0
    cases.append(("draft", r"draft_probs rows must sum to 1 \(relative tolerance 0\.001 for float32\); row \(b, j\) = \(0, 1\) sums to 0\.0",
                  p.astype(np.float32), x))
    return bonus, draft, cases


@pytest.mark.parametrize("path", ["core", "custom"])
def test_a_step_checks_its_rows_once_with_the_same_messages(rng, monkeypatch, path):
    # Built-ins: the rows are checked in the core's own pass as it reads them (row_stats is never
    # called); custom divergences: in Python before π is solved. The same error either way.
    import sympy

    t = sympy.Symbol("t", positive=True)
    div = "kl" if path == "core" else mentored.Divergence.from_sympy(t * sympy.log(t), t, name="kl_custom")
    if path == "core":
        monkeypatch.setattr(mentored._core, "row_stats", None)
    bonus, draft, cases = _bad_rows(rng)
    for _, match, p, q in cases:
        with pytest.raises(ValueError, match=match):
            mentored.speculative_step(p, bonus, q, draft, divergence=div, budget=0.1, seed=0)


def test_no_drafts_gives_the_bonus_and_still_checks_its_row():
    # k = 0: each request emits its bonus token; its target row, never solved, is checked all the same.
    p = np.full((3, 1, 4), 0.25)
    q, draft, bonus = np.zeros((3, 0, 4)), np.zeros((3, 0), dtype=np.int64), np.array([[1], [2], [3]])
    assert mentored.speculative_step(p, bonus, q, draft, divergence="kl", budget=0.1, seed=0).tolist() == [[1], [2], [3]]
    p[1, 0, 0] = np.nan
    with pytest.raises(ValueError, match=r"target_with_bonus_probs contains NaN .*\(b, j\) = \(1, 0\)"):
        mentored.speculative_step(p, bonus, q, draft, divergence="kl", budget=0.1, seed=0)


def test_core_refuses_bad_ids_and_shapes():
    # π given (divergence None): the decision call alone
    pi = np.full((2, 2), 0.5)
    kw = dict(uniforms=np.zeros(2), budgets=np.zeros(1), divergences=[None], pi=pi[:1], extra=1)
    assert mentored._core.verify(pi, pi[:1], np.array([5]), [1], np.array([0]), **kw)[1:4] == (0, 1, 0)
    assert mentored._core.verify(pi, pi[:1], np.array([1]), [1], np.array([0]), **kw)[1:4] == (-1, 0, -1)
    kw["uniforms"] = np.zeros(4)
    with pytest.raises(ValueError, match="uniforms"):
        mentored._core.verify(pi, pi[:1], np.array([0]), [1], np.array([0]), **kw)
    kw["uniforms"] = np.zeros(2)
    with pytest.raises(TypeError, match="pi must be"):
        mentored._core.verify(pi, pi[:1], np.array([0]), [1], np.array([0]), **{**kw, "pi": None})


def _two_calls(p, bonus, q, draft, u, div, budget, zeros):
    """speculative_step in two calls: every position's π in Python, then the core's decision call
    with π given."""
    from mentored.backends.host import solve_pi

    B, k, V = q.shape
    eps = np.broadcast_to(np.asarray(budget, dtype=np.float64), (B, k)).ravel()
    pi = solve_pi(np.ascontiguousarray(p[:, :k]).reshape(B * k, V), q.reshape(B * k, V), mentored.divergence(div), eps, None, zeros)
    pi = np.ascontiguousarray(pi, dtype=q.dtype)
    out, bad, *_ = mentored._core.verify(
        np.ascontiguousarray(p).reshape(B * (k + 1), V), q.reshape(B * k, V), draft.reshape(-1), [k] * B, bonus.reshape(B), u.reshape(-1),
        np.zeros(1), [None], pi=pi, extra=1,
    )
    assert bad == -1
    return out


@pytest.mark.parametrize("zeros", ["keep", "continue"])
@pytest.mark.parametrize("div", ["tv", "kl", "js", "reverse_kl", "neyman_chi2"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_one_call_equals_pi_then_step(div, zeros, dtype, rng):
    # Rows with target zeros and budgets up to inf: zeros="keep" re-solves rows whose optimum
    # continued onto {p = 0} (f∞ < ∞), in the core now as in solve_pi.
    B, k, V = 6, 3, 40
    for budget in (0.0, 0.05, 0.5, np.inf, rng.uniform(0, 1, (B, k))):
        p, bonus, q, draft = _batch(rng, B, k, V, peaked=0.3)
        p[:, :, :8] = 0
        p /= p.sum(-1, keepdims=True)
        p, q = p.astype(dtype), q.astype(dtype)
        u = rng.random((B, k, 2))
        got = mentored.speculative_step(p, bonus, q, draft, divergence=div, budget=budget, uniforms=u, zeros=zeros)
        assert_array_equal(got, _two_calls(p, bonus, q, draft, u, div, budget, zeros))


def test_one_crossing_for_builtin_divergences(one_core_call, rng):
    p, bonus, q, draft = _batch(rng, 3, 4, 30)
    calls = one_core_call()
    for zeros in ("keep", "continue"):
        mentored.speculative_step(p, bonus, q, draft, divergence="js", budget=0.3, seed=0, zeros=zeros)
    assert calls == ["verify"] * 2


def test_custom_divergence_keeps_the_python_path(rng):
    import sympy

    t = sympy.Symbol("t", positive=True)
    custom = mentored.Divergence.from_sympy(t * sympy.log(t), t, name="kl_custom")
    p, bonus, q, draft = _batch(rng, 4, 3, 20)
    u = rng.random((4, 3, 2))
    got = mentored.speculative_step(p, bonus, q, draft, divergence=custom, budget=0.2, uniforms=u)
    assert_array_equal(got, _two_calls(p, bonus, q, draft, u, custom, 0.2, "continue"))


def test_verify_statuses_name_request_and_position():
    V = 4
    p = np.full((5, V), 0.25)
    q = p.copy()
    q[2] = [0.7, 0.1, 0.1, 0.1]  # request 1 drafts token 0 there: rejected at u0 = 0.999
    u = np.full((5, 2), 0.999)
    u[0] = 0.0
    kl = int(mentored.divergence("kl").compiled)
    kw = dict(num_draft=[2, 3], bonus=np.array([0, 1]), u=u, eps=np.array([0.1]))

    def run(p=p, q=q, draft=np.array([0, 1, 0, 3, 2]), extra=0, **rtol):
        out, bad, status, pos, stats = mentored._core.verify(
            p, q, draft, kw["num_draft"], kw["bonus"], kw["u"], kw["eps"], [kl], keep=True, extra=extra, threads=1, int32=True, **rtol
        )
        return out, (bad, status, pos), stats

    out, err, _ = run()
    assert err == (-1, 0, -1) and out.dtype == np.int32 and out.shape == (2, 4)
    assert run(draft=np.array([0, 1, 0, 9, 2]))[1] == (1, 1, 1)  # an id outside [0, V)
    assert run(draft=np.array([0, 1, 0, -1, 2]))[1] == (1, 1, 1)  # the placeholder too
    kw["bonus"] = np.array([0, 4])
    assert run()[1] == (1, 5, 3)  # a bonus id outside [0, V), at column n_b
    kw["bonus"] = np.array([0, 1])
    bad = q.copy()
    bad[4, 1] = np.nan  # after request 1's first rejection, at position 0: not solved, checked all the same
    assert run()[0][1, 0] != 0 and np.all(run()[0][1, 1:] == -1)  # position 0 rejected
    assert run(q=bad)[1] == (1, 3, 2)
    np.testing.assert_array_equal(run(q=bad)[2][:3], [1.0, 0.25, 0.25])  # the rows' numbers: target fine,
    assert np.isnan(run(q=bad)[2][3])  # the draft's sum NaN
    zero = p.copy()
    zero[3] = 0.0
    assert run(p=zero)[1] == (1, 2, 1)
    # Sums within rtol of 1 (per side; inf, the default: not checked), solved rows and unread ones alike
    off = p.copy()
    off[1] *= 1.01
    assert run(p=off)[1] == (-1, 0, -1)
    assert run(p=off, rtol_p=1e-6, rtol_q=1e-6)[1] == (0, 6, 1)
    assert run(p=off, rtol_p=0.02)[1] == (-1, 0, -1)
    off_late = q.copy()
    off_late[4] *= 1.01  # request 1, position 2: after its rejection, read only to be checked
    assert run(q=off_late, rtol_q=1e-6)[1] == (1, 6, 2)
    # extra = 1: each request's bonus-position row of p, never solved, is checked too
    with_bonus = np.insert(p, [2, 5], 0.25, axis=0)
    assert run(p=with_bonus, extra=1)[1] == (-1, 0, -1)
    with_bonus[2, 0] = np.nan  # request 0 accepts both drafts, then meets its bonus row
    assert run(p=with_bonus, extra=1)[1] == (0, 3, 2)
    with pytest.raises(TypeError):  # float32 and float64 rows: never widened behind the caller's back
        mentored._core.verify(p.astype(np.float32), q, np.zeros(5, dtype=np.int64), [2, 3], kw["bonus"], u, kw["eps"], [kl])
    with pytest.raises(ValueError, match="sum to the number of draft rows"):
        mentored._core.verify(p, q, np.zeros(5, dtype=np.int64), [2, 2], kw["bonus"], u, kw["eps"], [kl])


# ---- torch -------------------------------------------------------------------------------------

torch = pytest.importorskip("torch", reason="torch is optional; the README test command installs it (extra 'test')")
from mentored.backends import torch as torch_backend  # noqa: E402


@pytest.mark.parametrize("kind", KINDS)
def test_torch_solve_matches_core(kind, rng):
    for _ in range(2):
        p, q = instance(kind, rng, 40)
        for div in mentored.BUILTIN_NAMES:
            budgets = np.array(budgets_for(div, p, q))
            ref = mentored.solve(np.tile(p, (budgets.size, 1)), np.tile(q, (budgets.size, 1)), divergence=div, budget=budgets).pi
            rows = torch.tensor(p).expand(budgets.size, -1), torch.tensor(q).expand(budgets.size, -1)
            got = torch_backend._solve(*rows, divergence=div, budget=budgets)
            assert_allclose(got.numpy(), ref, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("div", DIVS)
def test_torch_and_numpy_agree_given_uniforms(div, dtype, rng):
    B, k, V = 50, 4, 20
    p, bonus, q, draft = _batch(rng, B, k, V, 0.3)
    p, q = p.astype(dtype), q.astype(dtype)
    u = rng.random((B, k, 2))
    for budget in (0.0, 0.02, 0.2):
        ref = mentored.speculative_step(p, bonus, q, draft, divergence=div, budget=budget, uniforms=u)
        got = mentored.speculative_step(
            torch.tensor(p), torch.tensor(bonus), torch.tensor(q), torch.tensor(draft), divergence=div, budget=budget, uniforms=torch.tensor(u)
        )
        assert isinstance(got, torch.Tensor) and got.dtype == torch.int64 and got.device == torch.tensor(p).device
        assert_array_equal(got.numpy(), ref)


def test_torch_seeded_and_bad_input(rng):
    p, bonus, q, draft = (torch.tensor(x) for x in _batch(rng, 4, 3, 8))
    a = mentored.speculative_step(p, bonus, q, draft, budget=0.1, seed=3)
    b = mentored.speculative_step(p, bonus, q, draft, budget=0.1, seed=3)
    assert torch.equal(a, b) and a.shape == (4, 4)
    with pytest.raises(ValueError, match="draft_token_ids must have shape"):
        mentored.speculative_step(p, bonus, q, draft[:, :2], budget=0.1)
    with pytest.raises(TypeError, match="integer token ids"):
        mentored.speculative_step(p, bonus, q, draft.double(), budget=0.1)


def test_cpu_tensors_are_verified_by_the_core(one_core_call, rng):
    # CPU tensors take the numpy path's one core call (no torch solve), with the uniforms a seed
    # draws on the tensors' device, and come back as a tensor.
    torch = pytest.importorskip("torch", reason="torch tensors need torch (pip install torch)")
    p, bonus, q, draft = _batch(rng, 3, 4, 30)
    u = rng.random((3, 4, 2))
    want = mentored.speculative_step(p, bonus, q, draft, divergence="hellinger", budget=0.2, uniforms=u)
    calls = one_core_call(refuse=("mentored.backends.torch._solve", "mentored.backends.torch._verify"))
    T = torch.from_numpy
    got = mentored.speculative_step(T(p), T(bonus), T(q), T(draft), divergence="hellinger", budget=0.2, uniforms=T(u))
    assert isinstance(got, torch.Tensor) and got.dtype == torch.int64
    assert_array_equal(got.numpy(), want)
    seeded = [mentored.speculative_step(T(p), T(bonus), T(q), T(draft), divergence="hellinger", budget=0.2, seed=7) for _ in range(2)]
    assert_array_equal(seeded[0].numpy(), seeded[1].numpy())
    assert calls == ["verify"] * 3
