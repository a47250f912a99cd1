"""Adversarial input: every answer exact or refused in time, and the same on any machine.

The rows and generators are here as they were reported; each test failed (or hung) on
the code before the fix, as noted per test. Derandomised: fixed rows, fixed seeds.
"""

from __future__ import annotations

import gc
import importlib.util
import math
import signal
import subprocess
import sys
import re
import textwrap
import threading
import time
import warnings
import weakref
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
from numpy.testing import assert_allclose

import mentored
from mentored.divergences import symbolic
from mentored.check.oracle import OracleDisagreementWarning, OracleResult, OracleSkippedWarning
from mentored.divergences.symbolic import DEFAULT_TIMEOUT, NumericCheckWarning, SymbolicTimeoutError

T = sp.Symbol("t", positive=True)
t = T
inf = math.inf
ROOT = Path(__file__).resolve().parents[1]
MARGIN = 3.0  # seconds past the limit tolerated on a loaded machine (the limit itself is the contract)
SLOW = 60.0  # s: for tests of what the analysis finds rather than of its limit (some take 1-3 s quietly)


def from_sympy(f, **kw):
    """from_sympy, timed from when an analysis process is ready (the limit's contract); the
    NumericCheckWarning allowed (the numeric fallback is part of the contract)."""
    symbolic._release(symbolic._acquire())
    start = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumericCheckWarning)
        try:
            return mentored.Divergence.from_sympy(f, T, **kw)
        finally:
            limit = kw.get("timeout", DEFAULT_TIMEOUT)
            assert limit is None or time.monotonic() - start <= limit + MARGIN


# ---------------------------------------------------------------------------------------------
# valid convex generators, refused with sympy's internal errors or never returning.
# Before: TypeError "_eval_nseries() missing ... 'cdir'", ValueError quoting nseries, "Invalid
# comparison of non-real zoo", "not finite ... at t = 714.496", and three runs killed after 900 s.

CONVEX = {
    # expression: (f0, f∞, tilt = midpoint of f'(1−), f'(1+))
    "Max(t - 1, 0)": (sp.Max(t - 1, 0), 0.0, 1.0, 0.5),
    "Max(t - 1, 0) + Max(1 - t, 0)/2": (sp.Max(t - 1, 0) + sp.Max(1 - t, 0) / 2, 0.5, 1.0, 0.25),
    "Piecewise": (sp.Piecewise((t * sp.log(t), t >= 1), ((t - 1) ** 2 / 2 + (t - 1), True)), -0.5, inf, 1.0),
    "cosh(t - 1) - 1": (sp.cosh(t - 1) - 1, math.cosh(1.0) - 1, inf, 0.0),
    "Abs(t - 2) + t - 2": (sp.Abs(t - 2) + t - 2, 0.0, 2.0, 0.0),
    "(t - 1)*Heaviside(t - 1)": ((t - 1) * sp.Heaviside(t - 1), 0.0, 1.0, 0.5),
}
ROWS = [([0.5, 0.3, 0.2], [0.2, 0.3, 0.5]), ([0.6, 0.3, 0.1, 0.0], [0.1, 0.2, 0.3, 0.4]), ([0.25, 0.25, 0.5], [0.7, 0.2, 0.1])]


@pytest.mark.parametrize("key", list(CONVEX))
def test_nonsmooth_and_overflowing_convex_generators_are_accepted_and_solve(key):
    f, f0, f_inf, tilt = CONVEX[key]
    d = from_sympy(f)  # within the default limit: symbolic, or numeric on a slow machine
    assert_allclose([d.f0, d.f_inf, d.tilt], [f0, f_inf, tilt], rtol=1e-12)
    assert from_sympy(f, timeout=None).convexity_check == "symbolic"  # sympy decides it, given the time
    # f' is a subgradient everywhere: f(s) ≥ f(x) + f'(x)(s − x) on a grid through the kinks.
    x = np.array([0.3, 0.5, 1.0, 1.5, 2.0, 3.0, 7.0])
    fx, gx = d.f(x), d.fprime(x)
    assert np.all(d.f(x[:, None]) - (fx + gx * (x[:, None] - x)) >= -1e-12)
    for p, q in ROWS:
        for budget in (0.01, 0.2):
            sol = mentored.solve(p, q, divergence=d, budget=budget)
            assert float(d(sol.pi, np.array(p))) <= budget * (1 + 1e-9) + 1e-12
            cert = mentored.certify(p, q, sol.pi, d, budget, lam=sol.lam, mu=sol.mu, tol=1e-6)
            if not cert.ok:  # a non-binding budget with f∞ = ∞ and q off p's support: λ → 0+ is searched
                cert = mentored.certify(p, q, sol.pi, d, budget, lam=inf, mu=math.nan, tol=1e-6)
            assert cert.ok


def test_generators_that_hung_return_in_time_in_a_fresh_process():
    # The three generators that never returned (each run killed after 900 s), in a subprocess with a
    # hard limit, so that a hang fails this test instead of hanging the suite.
    code = textwrap.dedent(
        """
        import time, warnings, sympy as sp, mentored
        from mentored.divergences import symbolic
        t = sp.Symbol("t", positive=True)
        warnings.simplefilter("ignore")
        symbolic._release(symbolic._acquire())  # the limit counts from a ready analysis process
        for f in (sp.Abs(t - 2) + t - 2, (t - 1)*sp.Heaviside(t - 1), (t - 1)**2 - sp.exp(-10**8*t) + sp.exp(-10**8)):
            start = time.monotonic()
            try:
                mentored.Divergence.from_sympy(f, t)
                out = "accepted"
            except ValueError as exc:
                out = "refused: " + str(exc)
            print(round(time.monotonic() - start, 2), out)
        """
    )
    run = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    assert [line.split(" ", 1)[1].split(":")[0] for line in lines] == ["accepted", "accepted", "refused"]
    assert all(float(line.split(" ", 1)[0]) <= DEFAULT_TIMEOUT + MARGIN for line in lines)


# ---------------------------------------------------------------------------------------------
# non-convex generators refused quickly, naming the property and where.


def test_nonconvex_exp_generator_is_refused_quickly_with_the_place():
    # Before: hung in _nonnegative (killed after 900 s).
    with pytest.raises(ValueError, match=r"not convex.*t = ") as err:
        from_sympy((t - 1) ** 2 - sp.exp(-(10**8) * t) + sp.exp(-(10**8)))
    assert not isinstance(err.value, SymbolicTimeoutError)


def test_nonconvexity_outside_the_old_grid_is_found():
    # Before: accepted with a NumericCheckWarning, f∞ = −inf, and solve answered treating it as +inf.
    with pytest.raises(ValueError, match="not convex"):
        from_sympy((t - 1) ** 2 - (t - 1) ** 4 / 10**30)


def test_f_inf_minus_infinity_is_refused_as_nonconvex():
    # Non-convex only beyond t ≈ 1e350, past any float grid: f∞ = −∞ alone proves it (a convex f with
    # f(1) = 0 has (f(t) − f(1))/(t − 1) nondecreasing, so f∞ ≥ f'(1+) > −∞).
    with pytest.raises(ValueError, match="not convex.*f∞"):
        from_sympy((t - 1) ** 2 - (t - 1) ** 4 / sp.Integer(10) ** 700)


@pytest.mark.parametrize(
    "f, where",
    [
        (sp.log(t) ** 2, "t = "),  # concave beyond e
        ((t - 1) ** 2 - 3 * sp.Max(t - 2, 0), "t = |slope"),  # concave kink at 2
        (sp.Piecewise(((t - 1) ** 2, t >= sp.Rational(1, 2)), ((t - 3) ** 2, True)), "t = 0.5|1/2"),  # a jump
        (sp.Abs(t - 1) - sp.Abs(t - 3) + 2, "t = |slope"),
    ],
)
def test_nonconvex_nonsmooth_generators_are_refused(f, where):
    with pytest.raises(ValueError, match="not convex") as err:
        from_sympy(f)
    assert any(w in str(err.value) for w in where.split("|"))


# ---------------------------------------------------------------------------------------------
# from_sympy((t − 1)**4) leaked a ComplexWarning; f(1) = Float(1e-301) was accepted.


def test_quartic_leaks_no_complex_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d = mentored.Divergence.from_sympy((t - 1) ** 4, T)
    # Only the note that f* is found by bisection (sympy's roots of 4(t − 1)³ = y are not all real).
    assert [str(w.message) for w in caught if not issubclass(w.category, NumericCheckWarning)] == []
    assert all("bisection" in str(w.message) for w in caught)
    assert d.convexity_check == "symbolic" and d.f_inf == inf


def test_f_at_1_must_be_exactly_zero():
    with pytest.raises(ValueError, match=r"f\(1\) = 0 fails"):
        from_sympy((t - 1) ** 2 + sp.Float(1e-301))
    with pytest.raises(ValueError, match=r"f\(1\) = 0 fails"):
        from_sympy((t - 1) ** 4 + sp.Float(1e-301))


# ---------------------------------------------------------------------------------------------
# The time limit: the analysis runs in a process of its own, killed when the limit passes; nothing
# in it reads the clock, so the limit refuses and never changes an answer, in any thread.

# Convex (t^n, n ≥ 1), but sympy's exact evaluation of t**(10**7) at a rational point does not end.
STUCK = t ** 10**7 - 1 - 10**7 * (t - 1)


def _caller_state():
    return signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL), sys.getprofile(), sys.gettrace()


@pytest.mark.parametrize("in_thread", [False, True], ids=["main-thread", "worker-thread"])
def test_a_generator_stuck_in_sympy_is_refused_in_time_in_any_thread(in_thread):
    # Before: refused in 5.0 s on the main thread, no answer after 400 s in a worker thread (an exact
    # rational power inside the package's own check, which no profile hook could interrupt).
    out = {}

    def work():
        before = _caller_state()
        start = time.monotonic()
        try:
            mentored.Divergence.from_sympy(STUCK, T, timeout=1.0)
        except SymbolicTimeoutError as exc:
            out["error"] = exc
        out["wall"] = time.monotonic() - start
        out["state"] = (before, _caller_state())

    if in_thread:
        th = threading.Thread(target=work, daemon=True)
        th.start()
        th.join(60)
        assert not th.is_alive()
    else:
        work()
    assert isinstance(out.get("error"), SymbolicTimeoutError)
    assert re.search(r"time limit of 1 s \(it was checking that f is finite", str(out["error"]))
    assert out["wall"] <= 1.0 + MARGIN + symbolic._START_LIMIT  # the limit, and a fresh process's start
    before, after = out["state"]
    assert before == after  # no handler, timer or hook was set in the caller
    # The next analysis gets a fresh process and its answer.
    assert from_sympy((t - 1) ** 2).convexity_check == "symbolic"


def test_no_internal_exception_reaches_the_callers_code(monkeypatch):
    # Before: the timer's internal exception was raised into whatever frame ran when it fired, a
    # weakref.finalize callback or a gc callback among them (printed as ignored; an error under
    # pytest). Here a gc callback that is slow and collections that are frequent, while an analysis
    # is refused for time and another succeeds: nothing unraisable, no signal, no hook.
    def slow_callback(phase, info):
        end = time.monotonic() + 0.002
        while time.monotonic() < end:
            pass

    ignored = []
    monkeypatch.setattr(sys, "unraisablehook", ignored.append)
    monkeypatch.setattr(symbolic, "_FACTS", {})
    finalized = []
    gc.callbacks.append(slow_callback)
    before = _caller_state()
    try:
        for k in range(200):  # garbage with finalizers, collected while the caller waits
            weakref.finalize(type("Garbage", (), {})(), finalized.append, k)
        with pytest.raises(SymbolicTimeoutError):
            mentored.Divergence.from_sympy(STUCK, T, timeout=0.5)
        assert mentored.Divergence.from_sympy((t - 1) ** 2 / (t + 1), T, timeout=None).convexity_check == "symbolic"
        gc.collect()
    finally:
        gc.callbacks.remove(slow_callback)
    assert ignored == [] and _caller_state() == before
    assert sorted(finalized) == list(range(200))


def _facts(d):
    info = d.symbolic
    return (
        info.expr, info.fprime_expr, info.fsecond_expr, info.conjugate_expr, info.fprime_inv_expr, info.convexity_check,
        info.f0, info.f_inf, info.f_at_inf, info.fprime0, info.f2_at_1, info.tilt, info.conjugate_at_end, info.series,
    )


def test_the_same_generator_gives_the_same_divergence_idle_and_busy(monkeypatch):
    # Before: the README's triangular generator had conjugate_expr None at load ≈ 6 (3/3, no warning)
    # and its closed form at load 2.4: each symbolic step had a share of the clock. Here the analysis
    # runs in a fresh process each time, once on a quiet machine and once with three processes
    # spinning on the two cores.
    def fresh_analysis():
        monkeypatch.setattr(symbolic, "_FACTS", {})  # nothing remembered from an earlier analysis
        symbolic._stop_idle()  # and a new analysis process, cold
        # a limit that the busy analysis cannot reach: what is compared is what it finds
        return _facts(mentored.Divergence.from_sympy((t - 1) ** 2 / (t + 1), T, name="triangular", timeout=SLOW))

    idle = fresh_analysis()
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
    try:
        time.sleep(0.5)
        busy = fresh_analysis()
    finally:
        for s in spin:
            s.kill()
            s.wait()
    assert idle[3] is not None and idle[3] == busy[3]  # the conjugate's closed form, both times
    assert idle == busy


FLOAT_LITERALS = {
    # float literal form: its integer-literal twin. Before: each refused, "the slope of f decreases
    # near t = 0.5" (sympy evaluated the float coefficients at 15 digits while confirming at 40).
    "0.5*Abs(t - 1)": (sp.Float(0.5) * sp.Abs(t - 1), sp.Abs(t - 1) / 2),
    "(t - 1.0)**2/t": ((t - sp.Float(1.0)) ** 2 / t, (t - 1) ** 2 / t),
    "(t - 1)**2/(t + 1.0)": ((t - 1) ** 2 / (t + sp.Float(1.0)), (t - 1) ** 2 / (t + 1)),
    "t**2.0 - 1 - 2.0*(t - 1)": (t ** sp.Float(2.0) - 1 - sp.Float(2.0) * (t - 1), t**2 - 1 - 2 * (t - 1)),
    "js with 0.5*": (
        sp.Float(0.5) * (t * sp.log(2 * t / (1 + t)) + sp.log(2 / (1 + t))),
        (t * sp.log(2 * t / (1 + t)) + sp.log(2 / (1 + t))) / 2,
    ),
    "(t - 1)**2/(t + 1e-12)": ((t - 1) ** 2 / (t + sp.Float(1e-12)), (t - 1) ** 2 / (t + sp.Rational(1, 10**12))),
}


@pytest.mark.parametrize("key", list(FLOAT_LITERALS))
def test_float_literals_are_read_as_their_decimals(key):
    f, twin = FLOAT_LITERALS[key]
    d, e = from_sympy(f, timeout=SLOW), from_sympy(twin, timeout=SLOW)
    assert d.convexity_check == e.convexity_check == "symbolic"
    assert sp.simplify(d.symbolic.expr - e.symbolic.expr) == 0
    assert _facts(d)[1:] == _facts(e)[1:]
    x = np.array([1e-6, 0.3, 1.0, 2.5, 1e6])
    assert np.array_equal(d.f(x), e.f(x))


def test_a_real_analysis_in_a_worker_thread():
    out = {}

    def work():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NumericCheckWarning)
            out["d"] = mentored.Divergence.from_sympy(sp.Max(t - 1, 0) + sp.Max(1 - t, 0) / 2, T)
            out["e"] = mentored.Divergence.from_sympy((t - 1) ** 2 + sp.sin(t - 1) / 10, T, timeout=SLOW)

    th = threading.Thread(target=work, daemon=True)
    th.start()
    th.join(60)
    assert out["d"].convexity_check == "symbolic" and out["d"].tilt == 0.25
    assert out["e"].convexity_check == "numeric"


def test_a_derivation_that_gives_up_says_so():
    # sympy cannot solve f'(t) = log t + 1 − 1/t = y (a Lambert W): f* by bisection, and a warning.
    with pytest.warns(NumericCheckWarning, match=r"f\* and \(f'\)\^-1 are computed by bisection.*did not solve"):
        d = mentored.Divergence.from_sympy((t - 1) * sp.log(t), T)
    assert d.symbolic.conjugate_expr is None and d.symbolic.conjugate_method == "numeric"
    with pytest.warns(NumericCheckWarning, match="bisection"):  # every time: the facts are kept, and so is what they say
        mentored.Divergence.from_sympy((t - 1) * sp.log(t), T)


def test_timeout_none_and_bad_timeouts():
    d = mentored.Divergence.from_sympy((t - 1) ** 2, T, timeout=None)
    assert d.convexity_check == "symbolic"
    for bad in (0, -1.0, math.nan, True, "5"):
        with pytest.raises(ValueError, match="timeout"):
            mentored.Divergence.from_sympy((t - 1) ** 2, T, timeout=bad)


def _fuzz_module():
    spec = importlib.util.spec_from_file_location("fuzz_sympy", ROOT / "fuzz" / "fuzz_sympy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_slice_of_the_fuzz_returns_or_refuses_in_time():
    # 30 expressions of fuzz/fuzz_sympy.py (seed 18); the full run (2,000) is by hand.
    fuzz = _fuzz_module()
    rng = np.random.default_rng(18)
    outcomes = []
    for _ in range(30):
        f = fuzz.generator(rng)
        try:
            d = from_sympy(f)
            outcomes.append("accepted")
            assert d.f_inf > -inf  # never a convex f with f∞ = −∞
        except ValueError:
            outcomes.append("refused")
    assert "accepted" in outcomes and "refused" in outcomes


# ---------------------------------------------------------------------------------------------
# solve(check=True) raising on correct answers.


def test_check_accepts_the_lossless_optimum_at_budget_zero():
    # Before: RuntimeError "oracle finds acceptance 0.7000014606 > 0.7" (π = p is the only point with
    # D_f = 0, so it is optimal; the oracle's point was feasible only to its solver's tolerance).
    sol = mentored.solve([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], divergence="kl", budget=0.0, check=True)
    assert_allclose(sol.pi, [0.5, 0.3, 0.2], rtol=0, atol=1e-16)


def test_check_at_budget_zero_on_small_rows_for_every_divergence():
    # A sweep (85 small rows at ε = 0) raised for kl 48 times, reverse_kl 49, js 51,
    # hellinger 3, neyman_chi2 3. Warnings are errors in this suite: none may occur either.
    rng = np.random.default_rng(85)
    for _ in range(12):
        n = int(rng.integers(2, 7))
        p, q = rng.dirichlet(np.full(n, 0.7)), rng.dirichlet(np.full(n, 0.7))
        for name in mentored.BUILTIN_NAMES:
            sol = mentored.solve(p, q, divergence=name, budget=0.0, check=True)
            assert_allclose(sol.pi, p, rtol=0, atol=1e-15)


def test_check_accepts_reverse_kl_at_infinite_budget():
    # Before: RuntimeError, the certificate rejecting its own π (D = ∞, budget_residual = ∞ − ∞ = NaN).
    # ε = ∞ admits every π; π = q accepts 1, the supremum of A*(ε) over finite ε (not attained there:
    # f(0) = ∞ keeps π_i > 0 on p's support), and the limit of the optima as ε → ∞.
    sol = mentored.solve([0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5], divergence="reverse_kl", budget=inf, check=True)
    assert_allclose(sol.pi, [0, 0, 0.5, 0.5])
    assert sol.acceptance == 1.0 and sol.divergence == inf


@pytest.mark.parametrize("name", ["kl", "chi2", "reverse_kl", "hellinger"])
def test_check_skips_the_oracle_on_subnormal_rows_with_a_reason(name):
    # Before: cvxpy's ValueError "Problem data contains NaN or Inf" out of solve(check=True).
    with pytest.warns(OracleSkippedWarning, match="subnormal"):
        sol = mentored.solve([0.6, 0.4, 1e-310], [0.5, 0.5, 0.0], divergence=name, budget=0.05, check=True)
    assert abs(sol.pi.sum() - 1.0) <= 1e-15


def test_check_hands_lambda_and_mu_to_certify(monkeypatch):
    # Before: certify(lam=None) solved every row a second time.
    from mentored import _core

    calls = []
    real = _core.solve
    monkeypatch.setattr(_core, "solve", lambda *a, **k: calls.append(1) or real(*a, **k))
    P = np.array([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.3, 0.3, 0.4]])
    Q = np.array([[0.2, 0.3, 0.5], [0.5, 0.25, 0.25], [0.3, 0.4, 0.3]])
    mentored.solve(P, Q, divergence="kl", budget=[0.0, 0.05, 0.3], check=True)
    assert len(calls) == 1


def _fake_oracle(pi, acceptance, divergence):
    def oracle_solve(p, q, div, budget, **kw):
        return OracleResult(
            pi=pi, acceptance=acceptance, value=acceptance, status="optimal", solver="fake", divergence=divergence,
            budget_excess=max(0.0, divergence - budget), simplex_residual=0.0,
        )

    return oracle_solve


def test_an_oracle_disagreement_within_its_tolerance_is_a_warning(monkeypatch):
    # At a tiny budget the frontier is steep (A* ~ √ε): a point 5e-9 over budget, within the oracle's
    # feasibility tolerance, accepts ~1e-4 more. That is the oracle's own error, not the solver's.
    import mentored.check.oracle as oracle

    p, q, budget = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5], 1e-12
    over = mentored.solve(p, q, divergence="kl", budget=budget + 5e-9)
    monkeypatch.setattr(oracle, "oracle_solve", _fake_oracle(over.pi, over.acceptance, over.divergence))
    with pytest.warns(OracleDisagreementWarning, match="within the oracle's own tolerance"):
        mentored.solve(p, q, divergence="kl", budget=budget, check=True)


def test_an_oracle_disagreement_beyond_its_tolerance_is_an_error_unless_proved(monkeypatch):
    import mentored.check.oracle as oracle

    p, q, budget = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5], 0.05
    # A lying oracle: π = q (acceptance 1) claimed at divergence ε. Nothing its tolerance explains.
    monkeypatch.setattr(oracle, "oracle_solve", _fake_oracle(np.array(q), 1.0, budget))
    # chi2 at a budget slightly inside the active one: the exact (rational) certificate proves the solver's π.
    with pytest.warns(OracleDisagreementWarning, match="exact certificate proves"):
        mentored.solve(p, q, divergence="chi2", budget=budget, check=True)
    # A custom generator without a closed-form conjugate has no exact certificate: the error stands.
    wiggle = from_sympy((t - 1) ** 2 + sp.sin(t - 1) / 10)
    with pytest.warns(OracleSkippedWarning):  # sin has no cvxpy form: the real oracle would skip
        mentored.solve(p, q, divergence=wiggle, budget=budget, check=True)
    monkeypatch.setattr("mentored.solver._solve._oracle_form_missing", lambda div: None)
    with pytest.raises(RuntimeError, match="no exact certificate"):
        mentored.solve(p, q, divergence=wiggle, budget=budget, check=True)


@pytest.mark.parametrize("key", ["Max(t - 1, 0)", "Max(t - 1, 0) + Max(1 - t, 0)/2", "cosh(t - 1) - 1", "Abs(t - 2) + t - 2"])
def test_check_on_nonsmooth_generators_agrees_with_the_oracle(key):
    d = from_sympy(CONVEX[key][0])
    for p, q in ROWS:
        for budget in (0.0, 0.01, 0.2, inf):
            mentored.solve(p, q, divergence=d, budget=budget, check=True)


def test_check_states_why_the_oracle_is_skipped_for_a_generator_it_cannot_state():
    d = from_sympy(CONVEX["Piecewise"][0])
    with pytest.warns(OracleSkippedWarning, match="no convex form"):
        mentored.solve(*ROWS[0], divergence=d, budget=0.05, check=True)


# ---------------------------------------------------------------------------------------------
# λ = ∞, μ = NaN at budget 0; ε = ∞; ratios past DBL_MAX.


def test_certify_exact_takes_the_solvers_dual_at_budget_zero():
    # Before: OverflowError "cannot convert Infinity to integer ratio".
    p, q = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]
    sol = mentored.solve(p, q, divergence="kl", budget=0.0)
    assert sol.lam == inf and math.isnan(sol.mu)
    for exact in (False, True):
        cert = mentored.certify(p, q, sol.pi, "kl", 0.0, lam=sol.lam, mu=sol.mu, exact=exact)
        assert cert.ok and math.isfinite(cert.lam)


def test_certify_at_infinite_budget():
    p, q = [0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5]
    for exact in (False, True):
        cert = mentored.certify(p, q, q, "reverse_kl", inf, lam=0.0, mu=0.0, exact=exact)
        assert cert.ok and cert.budget_residual == 0.0 and cert.divergence == inf
        assert not mentored.certify(p, q, [0.5, 0.5, 0, 0], "reverse_kl", inf, lam=0.0, mu=0.0, exact=exact).ok


def test_float_dual_bound_stays_finite_when_a_ratio_overflows():
    # q_i/p_i = 0.5/1e-310 overflows; the dual bound was +inf for every dual point.
    p, q = np.array([0.6, 0.4, 1e-310]), np.array([1e-310, 0.5, 0.5])
    from mentored.solver.certificate import dual_bound

    g = dual_bound(p, q, "kl", 0.05, 0.01, 0.5)
    assert math.isfinite(g) and g >= 0.5
    with np.errstate(over="raise", invalid="raise"):
        cert = mentored.certify(p, q, [0.6 - 1e-5, 0.4, 1e-5], "kl", 0.05, lam=0.01, mu=0.5)
    assert math.isfinite(cert.dual_bound)
