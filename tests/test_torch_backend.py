"""The torch backend as a backend: results in the input's kind, custom divergences compiled to torch,
the extreme rows of the sort keys, and no host synchronisation in the solve."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

import mentored
from mentored.check.testing import budgets_for, instance

torch = pytest.importorskip("torch", reason="torch is optional; the README test command installs it (extra 'test')")
sp = pytest.importorskip("sympy")

from mentored.backends import torch as tb  # noqa: E402

T = sp.symbols("t", positive=True)


def _customs():
    a = sp.Rational(3, 2)
    with pytest.warns(mentored.NumericCheckWarning, match="bisection"):  # sympy does not solve f'(t) = y here
        fake_kl = mentored.Divergence.from_sympy(T * sp.log(T) + (T - 1) ** 2, T, name="kl")  # not the built-in kl
    return [
        fake_kl,
        mentored.Divergence.from_sympy((T - 1) ** 2 / (T + 1), T, name="kl"),  # triangular, also named "kl"
        mentored.Divergence.from_sympy((T**a - 1 - a * (T - 1)) / (a * (a - 1)), T, name="alpha_1.5"),  # f∞ = ∞
        mentored.Divergence.from_sympy(2 * (T - 1) - 4 * (sp.sqrt(T) - 1), T, name="alpha_0.5"),  # f∞ finite
    ]


CUSTOMS = _customs()


def _rows(rng, R=4, V=60):
    p = rng.dirichlet(np.full(V, 0.4), size=R)
    q = rng.dirichlet(np.full(V, 0.4), size=R)
    p[:, :6] = 0.0  # target zeros, some with draft mass
    q[:, 3:9] = 0.0  # draft zeros, three of them where p = 0 too
    q[:, 10] = p[:, 10]  # ties r = 1
    p /= p.sum(1, keepdims=True)
    q /= q.sum(1, keepdims=True)
    return p, q


@pytest.fixture(params=["numpy", "torch_cpu", "torch_device_path", "torch_cuda"])
def backend(request, monkeypatch):
    """(convert, expected device type): numpy arrays, CPU tensors (the core), CPU tensors through the
    device algorithm, CUDA tensors."""
    kind = request.param
    if kind == "numpy":
        return lambda a: a, None
    if kind == "torch_device_path":
        monkeypatch.setattr("mentored.backends.CPU_SOLVER", "torch")  # CPU tensors solved by the torch algorithm
        return torch.from_numpy, "cpu"
    if kind == "torch_cuda":
        if not torch.cuda.is_available():
            pytest.skip("torch.cuda.is_available() is False on this machine: no CUDA device to test on")
        return (lambda a: torch.from_numpy(a).cuda()), "cuda"
    return torch.from_numpy, "cpu"


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_solve_returns_pi_in_the_inputs_kind_dtype_and_device(backend, dtype, rng):
    conv, device = backend
    p, q = _rows(rng)
    p, q = p.astype(dtype), q.astype(dtype)
    ref = mentored.solve(p, q, divergence="js", budget=0.05)
    sol = mentored.solve(conv(p), conv(q), divergence="js", budget=0.05)
    if device is None:
        assert isinstance(sol.pi, np.ndarray) and sol.pi.dtype == dtype
        return
    assert isinstance(sol.pi, torch.Tensor), type(sol.pi)
    assert sol.pi.dtype == {np.float64: torch.float64, np.float32: torch.float32}[dtype]
    assert sol.pi.device.type == device
    tol = 1e-12 if dtype == np.float64 else 1e-6
    assert_allclose(sol.pi.cpu().numpy(), ref.pi, rtol=0, atol=tol)
    for field in ("acceptance", "divergence", "s", "t_lo", "t_hi"):
        assert isinstance(getattr(sol, field), np.ndarray)
        assert_allclose(getattr(sol, field), getattr(ref, field), rtol=1e-9 if dtype == np.float64 else 1e-5, atol=1e-12, err_msg=field)
    one = mentored.solve(conv(p[0]), conv(q[0]), divergence="js", budget=0.05)  # 1-D: float fields, 1-D π
    assert isinstance(one.acceptance, float) and tuple(one.pi.shape) == p[0].shape


def test_check_and_dual_parameters_on_the_device_path(monkeypatch, rng):
    # solve(check=True) certifies a device solve on host copies, at the λ, μ the numpy path reports
    monkeypatch.setattr("mentored.backends.CPU_SOLVER", "torch")
    p, q = _rows(rng)
    ref = mentored.solve(p, q, divergence="kl", budget=0.05)
    got = mentored.solve(torch.from_numpy(p), torch.from_numpy(q), divergence="kl", budget=0.05, check=True)
    assert isinstance(got.pi, torch.Tensor)
    assert_allclose(got.lam, ref.lam, rtol=1e-9)
    assert_allclose(got.mu, ref.mu, rtol=1e-9, atol=1e-12)


def test_cpu_tensors_reach_the_core_without_a_copy(rng):
    p, q = (torch.from_numpy(x) for x in _rows(rng))
    out = torch.empty_like(p)
    sol = mentored.solve(p, q, divergence="kl", budget=0.1, out=out)
    assert sol.pi is out  # written in place through the shared memory
    assert_allclose(out.numpy(), mentored.solve(p.numpy(), q.numpy(), divergence="kl", budget=0.1).pi, rtol=0, atol=0)


def test_acceptance_mode_on_the_device_path(monkeypatch, rng):
    monkeypatch.setattr("mentored.backends.CPU_SOLVER", "torch")
    p, q = _rows(rng)
    for a in (0.5, 0.9):
        ref = mentored.solve(p, q, divergence="hellinger", acceptance=a)
        got = mentored.solve(torch.from_numpy(p), torch.from_numpy(q), divergence="hellinger", acceptance=a)
        assert_allclose(got.pi.numpy(), ref.pi, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="out of reach"):
        mentored.solve(torch.from_numpy(p), torch.from_numpy(q), divergence="kl", acceptance=1.0)


@pytest.mark.parametrize("kind", ["both_truncated", "top_k_target", "truncated_draft", "ties", "disjoint"])
def test_torch_solve_on_rows_with_zeros_and_ties_is_the_core_optimum(kind, rng):
    # p = q = 0 gives 0/0, a NaN whose sign bit is set on x86: its key must sort with the target's zeros
    for _ in range(3):
        p, q = instance(kind, rng, 40)
        for div in mentored.BUILTIN_NAMES:
            budgets = np.array(budgets_for(div, p, q))
            P, Q = np.tile(p, (budgets.size, 1)), np.tile(q, (budgets.size, 1))
            ref = mentored.solve(P, Q, divergence=div, budget=budgets).pi
            got = tb._solve(torch.from_numpy(P), torch.from_numpy(Q), divergence=div, budget=budgets).numpy()
            assert_allclose(got, ref, rtol=0, atol=1e-12, err_msg=f"{kind} {div}")


@pytest.mark.parametrize("div", CUSTOMS, ids=lambda d: d.name)
def test_a_custom_divergence_gives_one_optimum_on_numpy_torch_and_the_exact_certificate(div, rng):
    p, q = _rows(rng, R=3, V=40)
    for budget in (1e-4, 0.05, 0.3):
        ref = mentored.solve(p, q, divergence=div, budget=budget)
        got = tb._solve(torch.from_numpy(p), torch.from_numpy(q), divergence=div, budget=budget).numpy()
        assert_allclose(got, ref.pi, rtol=0, atol=1e-12, err_msg=f"{div.name} {budget}")
        via_solve = mentored.solve(torch.from_numpy(p), torch.from_numpy(q), divergence=div, budget=budget)
        assert_allclose(via_solve.pi.numpy(), ref.pi, rtol=0, atol=1e-12)
        # exact mode needs f* in closed form: sympy finds none for t log t + (t − 1)² (a Lambert W), and
        # exact mode refuses it by design; that one is certified in floating point
        # exact mode by design. Exact mode also judges feasibility without rounding, and a float64 π, the
        # core's as much as torch's, may exceed the budget by what D_f's float evaluation misses (ulps
        # of ε, and ~1e-12 relative at ε = 1e-4 where f(t) − c(t − 1) cancels): the certificate is
        # asked at the budget widened by 1e-9 relative, the float certificate's feasibility tolerance.
        exact = div.conjugate_expr is not None
        wide = budget * (1 + 1e-9)
        for r in range(p.shape[0]):
            cert = mentored.certify(p[r], q[r], got[r], div, wide, lam=float(ref.lam[r]), mu=float(ref.mu[r]), exact=exact)
            assert cert.ok, (div.name, budget, r, cert)


def test_a_custom_named_kl_is_not_the_builtin(rng):
    fake = CUSTOMS[0]
    assert tb._torch_forms(fake) is not tb._torch_forms("kl")
    assert tb._torch_forms(mentored.divergence("kl")) is tb._torch_forms("kl")
    p, q = _rows(rng, R=2, V=30)
    a = tb._solve(torch.from_numpy(p), torch.from_numpy(q), divergence=fake, budget=0.05)
    b = tb._solve(torch.from_numpy(p), torch.from_numpy(q), divergence="kl", budget=0.05)
    assert (a - b).abs().max() > 1e-4


def test_custom_forms_match_the_numpy_generator():
    t = torch.tensor([0.0, 1e-300, 1e-8, 0.3, 1 - 1e-9, 1.0, 1 + 1e-5, 2.0, 1e8, 1e300], dtype=torch.float64)
    for div in CUSTOMS:
        forms = tb._torch_forms(div)
        assert_allclose(forms.f_tilde(t).numpy(), div.f_tilde(t.numpy()), rtol=1e-13, atol=1e-300, err_msg=div.name)
        assert forms.f_inf_tilde == div.f_inf - div.tilt


LOGCOSH = sp.log(sp.cosh(T - 1))  # f∞ = 1; cosh(t − 1) overflows past t ≈ 711
SLOW = 60.0  # s: sympy takes ~2 s on log cosh quietly; these tests check answers, not the time limit
TINY = (T - 1) ** 2 / 10**200  # (t − 1)² overflows past t ≈ 1.3e154, where f itself is ≤ 1e108
P3, Q3 = np.array([0.49995, 0.49995, 1e-4]), np.array([0.5, 0.0, 0.5])
A_LOGCOSH = 0.872586518017585  # A*(0.5) of log cosh on (P3, Q3), tests/test_symbolic.py (40-digit arithmetic)


def _term(f, x, y):
    """y·f̃(x/y) in 40-digit arithmetic, c = f'(1)."""
    import mpmath

    fn, c = sp.lambdify(T, f, modules="mpmath"), float(sp.diff(f, T).subs(T, 1))
    with mpmath.workdps(40):
        x, y = mpmath.mpf(float(x)), mpmath.mpf(float(y))
        return float(y * (fn(x / y) - c * (x / y - 1)))


@pytest.mark.parametrize("code", ["program", "printed"])
@pytest.mark.parametrize("f", [LOGCOSH, TINY, (T - 1) ** 2 / (T + 1)], ids=["logcosh", "tiny", "triangular"])
def test_custom_forms_where_the_printed_form_overflows(f, code, monkeypatch, host_reads):
    # f̃ and the term y·f̃(x/y) to a few ulps wherever they are finite: the printed form overflows on
    # the way (cosh 719, (5e169)²), x/y passes DBL_MAX (y subnormal), or f̃(x/y) does while the term does
    # not. "program": the core's program in torch, nothing read back; "printed": a generator without a
    # program, printed by sympy, whose overflowing points are evaluated on the host.
    if code == "printed":
        monkeypatch.setattr(tb, "_program_ops", lambda info: None)
    div = mentored.Divergence.from_sympy(f, T, timeout=SLOW)
    forms = tb._torch_forms(div)
    t = np.array([0.0, 1e-300, 0.5, 1.0, 2.0, 720.0, 1e3, 1e10, 1e155, 5e169, 1e250, 1e300])
    x = np.array([1e-5, 0.3, 1.0, 0.3, 1.0, 0.5, 1e-3])
    y = np.array([1e-320, 1e-310, 1e-300, 1e-170, 1e-100, 0.3, 1e-3])
    with host_reads() as mode:
        got_f = forms.f_tilde(torch.from_numpy(t))
        got_term = forms.perspective(torch.from_numpy(x), torch.from_numpy(y))
    assert code == "printed" or mode.reads == []
    assert_allclose(got_f.numpy(), div.f_tilde(t), rtol=1e-14, atol=0)
    assert_allclose(got_term.numpy(), [_term(f, a, b) for a, b in zip(x, y)], rtol=1e-14, atol=0)


@pytest.mark.parametrize("printed", [False, True], ids=["program", "printed"])
def test_a_max_generator_compiles_for_torch(printed, rng, monkeypatch):
    # Max and Min reach torch as torch.maximum/minimum, from the core's program or, for a generator
    # whose code has no program, from sympy's torch printing (which knows neither by itself)
    if printed:
        monkeypatch.setattr(tb, "_program_ops", lambda info: None)
    div = mentored.Divergence.from_sympy(sp.Max((T - 1) ** 2, 4 * (T - 1) ** 2 - 3 * (T - 1)), T, name="max")
    forms = tb._torch_forms(div)
    t = np.array([0.0, 1e-8, 0.5, 1.0, 1.5, 2.0, 2.5, 1e8, 1e200])
    assert_allclose(forms.f_tilde(torch.from_numpy(t)).numpy(), div.f_tilde(t), rtol=1e-14, atol=0)
    p, q = _rows(rng, R=3, V=40)
    for budget in (0.01, 0.3):
        ref = mentored.solve(p, q, divergence=div, budget=budget)
        got = tb._solve(torch.from_numpy(p), torch.from_numpy(q), divergence=div, budget=budget).numpy()
        assert_allclose(got, ref.pi, rtol=0, atol=1e-12)


def test_the_programs_extended_range_is_40_digit_arithmetic():
    # The core's program run by torch in extended range, against mpmath on a grid of t over 600
    # decades: to 1e-13 wherever f(t) is a normal double, however far its printed form's
    # intermediate values pass DBL_MAX or underflow (e^t, t^t, 2^u + 3^u, (t² + 1)^½ at t = 1e300).
    import mpmath
    from types import SimpleNamespace

    from mentored.divergences.program import source, translate

    names = {int(v): k for k, v in mentored._core.Op.__members__.items()}
    exprs = [LOGCOSH, TINY, sp.sqrt(T**2 + 1), T ** sp.Rational(5, 2), T ** sp.Rational(1, 3) * 10**100, sp.log(1 + sp.exp(T)),
             sp.asinh(T**2), sp.Max(T**2, 3 * T) / 10**250, sp.Min(T**3, T**2), sp.Piecewise((T**2, T < 5), (T**3, True)),
             10**-300 / T**3, (T - 1) ** 4, T ** sp.Float(2.7), T + sp.exp(-(T**2)), sp.tanh(T) * T**2, sp.log(T) ** 2,
             T**T / 10**300, (sp.exp(T) - T) / 10**300, sp.cosh(sp.sqrt(T)), 2**T, sp.log(2 ** (T / 10**10) + 3 ** (T / 10**10)), sp.Abs(T - 3) ** 3]
    t = np.concatenate([np.geomspace(1e-300, 1e300, 601), np.linspace(1.0, 2000.0, 97)])
    for f in exprs:
        code, name, namespace = source(SimpleNamespace(expr=f, t=T))
        ops, values = translate(code, name, namespace)
        got = tb._w_value(tb._prog_wide([names[o] for o in ops], values, tb._w_of(torch.from_numpy(t)))).numpy()
        fn = sp.lambdify(T, f, modules="mpmath")
        with mpmath.workdps(40):
            want = np.array([float(fn(mpmath.mpf(float(x)))) for x in t])
        normal = np.isfinite(want) & (np.abs(want) >= 2.3e-308)
        assert_allclose(got[normal], want[normal], rtol=1e-13, atol=0, err_msg=str(f))


def test_an_overflowing_generator_reaches_the_cores_optimum_on_the_torch_path(monkeypatch):
    from mentored.verify.serving import rejection_sample

    monkeypatch.setattr("mentored.backends.CPU_SOLVER", "torch")  # CPU tensors solved by the torch algorithm
    div = mentored.Divergence.from_sympy(LOGCOSH, T, name="logcosh", timeout=SLOW)
    assert mentored.solve(P3, Q3, divergence=div, budget=0.5).acceptance == pytest.approx(A_LOGCOSH, abs=1e-9)
    sol = mentored.solve(torch.from_numpy(P3), torch.from_numpy(Q3), divergence=div, budget=0.5)
    assert isinstance(sol.pi, torch.Tensor) and sol.acceptance == pytest.approx(A_LOGCOSH, abs=1e-9)
    pi = tb._solve(torch.from_numpy(P3[None]), torch.from_numpy(Q3[None]), divergence=div, budget=0.5)[0].numpy()
    assert np.minimum(pi, Q3).sum() == pytest.approx(A_LOGCOSH, abs=1e-9)
    # The drafter's token 2 is accepted with probability π_2/q_2 = (A* − 0.5)/0.5.
    ratio = (A_LOGCOSH - 0.5) / 0.5
    for u0, accepted in ((ratio - 1e-3, True), (ratio + 1e-3, False)):
        out = rejection_sample(torch.tensor([2]), [1], torch.from_numpy(Q3[None]), torch.from_numpy(P3[None]), torch.tensor([[0]]),
                               divergence=div, budget=0.5, uniforms=torch.tensor([[u0, 0.5]], dtype=torch.float64))
        assert isinstance(out, torch.Tensor) and (int(out[0, 0]) == 2) == accepted


class _HostSync(RuntimeError):
    pass


@pytest.mark.parametrize("div", ["kl", "reverse_kl", "tv", CUSTOMS[1]], ids=str)
def test_the_solve_reads_nothing_back_to_the_host(div, rng, monkeypatch):
    p, q = (torch.from_numpy(x) for x in _rows(rng))
    eps = torch.full((p.shape[0],), 0.05, dtype=torch.float64)
    forms = tb._torch_forms(div)  # compiling a custom divergence is host work, done once before

    def refuse(*args, **kwargs):
        raise _HostSync("a value was read back to the host")

    monkeypatch.setattr(tb, "_host_reads", lambda x: False)  # the device's code, on these CPU tensors
    for name in ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero", "numpy", "cpu"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    monkeypatch.setattr(torch, "nonzero", refuse)
    tb.solve_rows(p, q, forms, eps, "continue")
    tb.solve_point(p, q, forms, eps, "keep")
    with pytest.raises(_HostSync):  # the trap works
        bool(eps.sum() > 0)


def test_speculative_step_returns_tokens_in_the_inputs_kind_and_device(backend, rng):
    conv, device = backend
    B, k, V = 3, 4, 40
    p = rng.dirichlet(np.ones(V), (B, k + 1))
    q = rng.dirichlet(np.ones(V), (B, k))
    draft = np.array([[rng.choice(V, p=q[b, j]) for j in range(k)] for b in range(B)])
    bonus = rng.integers(0, V, (B, 1))
    u = rng.random((B, k, 2))
    want = mentored.speculative_step(p, bonus, q, draft, divergence="js", budget=0.2, uniforms=u)
    ids = (lambda a: a) if device is None else (lambda a: conv(np.ascontiguousarray(a)))
    got = mentored.speculative_step(conv(p), ids(bonus), conv(q), ids(draft), divergence="js", budget=0.2, uniforms=conv(u))
    if device is None:
        assert isinstance(got, np.ndarray) and got.dtype == np.int64
    else:
        assert isinstance(got, torch.Tensor) and got.dtype == torch.int64 and got.device.type == device
        got = got.cpu().numpy()
    np.testing.assert_array_equal(got, want)


def test_float32_output_is_rounded_toward_p_as_the_core_rounds(rng):
    # Rounded to nearest, π in float32 overshoots small budgets (the float64 π sits on the budget);
    # rounded toward p, as the core does, the documented guarantee holds, and the tokens are the core's.
    from mentored.check.testing import llm_like

    def tilted(div, pi, p):
        d = mentored.divergence(div)
        pi = pi.astype(np.float64)
        return d(pi, p) - d.tilt * (pi.sum(-1) - 1.0)

    P, Q = (np.array(x, dtype=np.float32) for x in zip(*(llm_like(rng, 2000) for _ in range(6))))
    p64 = P.astype(np.float64) / P.astype(np.float64).sum(1, keepdims=True)
    q64 = Q.astype(np.float64) / Q.astype(np.float64).sum(1, keepdims=True)
    nearest_over = 0
    for div in ("kl", "hellinger"):
        for eps in (1e-9, 1e-6):
            got = tb._solve(torch.from_numpy(P), torch.from_numpy(Q), divergence=div, budget=eps)
            assert got.dtype == torch.float32
            core = mentored.solve(P, Q, divergence=div, budget=eps).pi
            ulps = np.abs(got.numpy().view(np.int32).astype(np.int64) - core.view(np.int32).astype(np.int64))
            assert ulps.max() <= 1
            pi64 = tb._solve(torch.from_numpy(p64), torch.from_numpy(q64), divergence=div, budget=eps).numpy()
            for r in range(len(P)):
                assert tilted(div, got[r].numpy(), p64[r]) <= eps * (1 + 1e-6) + 1e-12, (div, eps, r)
                nearest_over += tilted(div, pi64[r].astype(np.float32), p64[r]) > eps * (1 + 1e-6) + 1e-12
    assert nearest_over > 0  # the rounding the device path used before, on the same rows


def test_float32_rounding_on_denormal_targets_is_the_cores(rng):
    # p_i below FLT_MIN: the general rule of the rounding (the neighbour with the smaller term), as in the core
    for _ in range(6):
        V = 300
        p, q = rng.dirichlet(np.full(V, 0.3)), rng.dirichlet(np.full(V, 0.3))
        tiny = rng.choice(V, 12, replace=False)
        p[tiny] = 10.0 ** rng.uniform(-44, -36, tiny.size)
        P, Q = (x.astype(np.float32)[None] for x in (p / p.sum(), q))
        for div in ("kl", "reverse_kl", "chi2", "neyman_chi2", "js"):
            for eps in (1e-8, 0.1):
                core = mentored.solve(P, Q, divergence=div, budget=eps).pi
                got = tb._solve(torch.from_numpy(P), torch.from_numpy(Q), divergence=div, budget=eps).numpy()
                np.testing.assert_array_equal(got.view(np.int32), core.view(np.int32), err_msg=f"{div} {eps}")


def _zero_heavy_rows(rng, dtype, V=64):
    """One-hot and truncated targets (most p_i = 0) against drafts with mass everywhere, in ``dtype``."""
    P, Q = [], []
    for j in range(4):
        p = np.zeros(V)
        p[rng.integers(V)] = 1.0
        P.append(p)
        Q.append(rng.dirichlet(np.full(V, 0.5)))
    for kind in ("top_k_target", "both_truncated", "top_k_target", "both_truncated"):
        p, _ = instance(kind, rng, V)
        P.append(p)
        Q.append(rng.dirichlet(np.full(V, 0.5)))
    return np.array(P, dtype=dtype), np.array(Q, dtype=dtype)


@pytest.mark.parametrize("device_code", [False, True], ids=["cpu_code", "device_code"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("div", mentored.BUILTIN_NAMES)
def test_the_targets_zeros_get_no_mass_they_may_not_have(div, dtype, device_code, rng, monkeypatch):
    # D_up = Q_hi − P_hi is read from the upper side's sums: TV − Q0, rounded, fell below 0 and gave
    # p = 0 tokens a share (s − D_up)/Q0 of q at s = 0 (5.6e-17 of mass, D = ∞ under kl).
    if device_code:
        monkeypatch.setattr(tb, "_host_reads", lambda x: False)
    monkeypatch.setattr("mentored.backends.CPU_SOLVER", "torch")  # mentored.solve on CPU tensors: the device's solve too
    P, Q = _zero_heavy_rows(rng, dtype)
    one_hot = np.arange(len(P)) < 4
    refuse_zeros = np.isinf(mentored.divergence(div).f_inf)
    for zeros in ("keep", "continue"):
        for budget in (0.0, 1e-300, 1e-9, 0.05, math.inf):
            got = tb._solve(torch.from_numpy(P), torch.from_numpy(Q), divergence=div, budget=budget, zeros=zeros).numpy()
            where = f"{div} {np.dtype(dtype).name} {zeros} budget {budget}"
            if zeros == "keep" or refuse_zeros:
                assert not got[P == 0].any(), where
                # a one-hot target: nothing may move (the curve ends at s = D_up = 0), π = p exactly
                np.testing.assert_array_equal(got[one_hot], P[one_hot], err_msg=where)
            if budget == 0.0:  # π = p, rounded to the dtype as the core rounds it
                core = mentored.solve(P, Q, divergence=div, budget=0.0).pi
                np.testing.assert_array_equal(got, core, err_msg=where)
                np.testing.assert_array_equal(got[one_hot], P[one_hot], err_msg=where)
                if zeros == "continue":
                    sol = mentored.solve(torch.from_numpy(P), torch.from_numpy(Q), divergence=div, budget=0.0)
                    np.testing.assert_array_equal(sol.pi.numpy(), core, err_msg=f"{where}, mentored.solve")


def test_the_device_path_leaves_its_inputs_alone(rng, monkeypatch):
    monkeypatch.setattr("mentored.backends.CPU_SOLVER", "torch")
    p, q = (torch.from_numpy(x * 1.0000001) for x in _rows(rng))  # float64 rows to be normalised
    before = p.clone(), q.clone()
    mentored.solve(p, q, divergence="kl", budget=0.05)
    mentored.solve(p, q, divergence="kl", budget=0.05, normalize=True)
    assert torch.equal(p, before[0]) and torch.equal(q, before[1])


def test_row_sums_are_correctly_rounded(rng):
    # the sums the device path normalises by: as the core's compensated sums, not a plain sum's ulp off
    from fractions import Fraction

    x = rng.dirichlet(np.full(3000, 0.3), size=40) * np.exp(rng.uniform(-30, 0, (40, 3000)))
    x[::4, ::7] = 0.0
    x[1::4] = x[1::4] ** 4  # entries over some 150 binades
    got = tb._row_sums(torch.from_numpy(x)).numpy()
    exact = np.array([float(sum(map(Fraction, row))) for row in x])  # rounded once, to nearest
    np.testing.assert_array_equal(got, exact)
    plain = torch.from_numpy(x).sum(-1).numpy()
    assert (plain != exact).any()  # the rows do tell a plain sum from a correctly rounded one


def test_every_device_verification_is_one_function(monkeypatch, rng):
    # speculative_step and rejection_sample (dense, token-only, greedy and placeholder drafts) verify
    # on a device by the one torch rule, torch_backend._verify: once per call, with the core's tokens.
    import mentored.verify.serving as serving

    calls = []
    verify = tb._verify
    monkeypatch.setattr(tb, "_verify", lambda *args, **kw: calls.append(1) or verify(*args, **kw))
    monkeypatch.setattr("mentored.backends.CPU_SOLVER", "torch")  # the device algorithm, on CPU tensors
    B, k, V = 3, 4, 30
    p = rng.dirichlet(np.full(V, 0.4), (B, k + 1))
    q = rng.dirichlet(np.full(V, 0.4), (B, k))
    draft = np.array([[rng.choice(V, p=r) for r in rows] for rows in q])
    bonus = rng.integers(0, V, (B, 1))
    u = rng.random((B, k, 2))
    want = mentored.speculative_step(p, bonus, q, draft, divergence="js", budget=0.2, uniforms=u)
    t = torch.from_numpy
    got = mentored.speculative_step(t(p), t(bonus), t(q), t(draft), divergence="js", budget=0.2, uniforms=t(u))
    np.testing.assert_array_equal(got.numpy(), want)
    assert len(calls) == 1
    n, ids = [k, 0, 2], np.concatenate([draft[0], draft[2, :2]])
    P, Q, U = (np.concatenate([x[0, :k], x[2, :2]]) for x in (p, q, u))
    held = ids.copy()
    held[1] = -1  # a placeholder
    greedy = np.array([True, False, True])
    for ids_, dq, is_greedy in ((ids, Q, None), (ids, None, None), (ids, Q, greedy), (held, Q, None), (held, None, greedy)):
        kw = {"divergence": "kl", "budget": 0.3, "is_greedy": is_greedy, "uniforms": U}
        want = serving.rejection_sample(ids_, n, dq, P, bonus, **kw)
        calls.clear()
        got = serving.rejection_sample(t(ids_), n, None if dq is None else t(dq), t(P), t(bonus), **kw)
        np.testing.assert_array_equal(got.numpy(), want)
        assert len(calls) == 1


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("budget", [0.0, 0.3])
def test_huge_logits_give_the_cores_decisions_on_the_device_path(monkeypatch, rng, dense, budget):
    """Logits at float32's extremes (all 3e38; ±3e38 beside −inf): the device path's p_x (from the
    logit and the row's log-sum-exp, token-only drafts) and its rows equal the core's softmax, so every
    decision and token equals the numpy path's on the same uniforms."""
    import mentored.verify.serving as serving

    big = 3e38
    V = 8
    rows = [
        np.full(V, big),
        np.array([big, -big, -np.inf, big, 0.0, -big, big, -np.inf]),
        np.array([-big, -big, -np.inf, -big, -big, -big, -big, -big]),
        np.array([big, big, -np.inf, -np.inf, -np.inf, -np.inf, -np.inf, -np.inf]),
        np.array([-np.inf, 1.0, -big, big / 2, big / 2, -np.inf, 0.0, 2.0]),
    ]
    logits = np.array([rows[i % len(rows)] for i in range(40)], dtype=np.float32)
    T = logits.shape[0]
    n = [4] * (T // 4)
    draft = rng.integers(0, V, T)
    q = rng.dirichlet(np.ones(V), T).astype(np.float32) if dense else None
    bonus = rng.integers(0, V, (len(n), 1))
    u = rng.random((T, 2))
    kw = dict(divergence="kl", budget=budget, uniforms=u, logits=True)
    want = serving.rejection_sample(draft, n, q, logits, bonus, **kw)
    monkeypatch.setattr("mentored.backends.CPU_SOLVER", "torch")  # the device algorithm, on CPU tensors
    t = torch.from_numpy
    for validate in (True, False):
        got = serving.rejection_sample(t(draft), n, None if q is None else t(q), t(logits), t(bonus), validate=validate, **kw)
        np.testing.assert_array_equal(got.numpy(), want)
