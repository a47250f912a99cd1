"""Bad input gets a clear error that names the problem; nothing crashes or answers silently."""

from __future__ import annotations

import numpy as np
import pytest

import mentored

P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.2, 0.3, 0.5])


@pytest.mark.parametrize(
    "target, draft, error, message",
    [
        ([0.5, np.nan, 0.5], Q, ValueError, "target contains NaN"),
        (P, [0.2, np.inf, 0.5], ValueError, "draft contains NaN or infinite"),
        ([0.6, -0.1, 0.5], Q, ValueError, "target has negative"),
        (P, [0.2, 0.3, 0.4, 0.1], ValueError, "same shape"),
        (np.ones((2, 3)) / 3, np.ones((3, 3)) / 3, ValueError, "same shape"),
        ([], [], ValueError, "empty"),
        (np.ones((2, 0)), np.ones((2, 0)), ValueError, "empty"),
        (np.ones((2, 2, 2)) / 2, np.ones((2, 2, 2)) / 2, ValueError, r"shape \(n,\) or \(B, n\)"),
        ([0.5, 0.3, 0.3], Q, ValueError, "target rows must sum to 1"),
        (P, [0.0, 0.0, 0.0], ValueError, "draft has all-zero rows: 0"),
        (np.array([[0.5, 0.5], [0.0, 0.0]]), np.full((2, 2), 0.5), ValueError, "target has all-zero rows: 1"),
        (["a", "b", "c"], Q, TypeError, "target must hold real numbers"),
        (P, [1 + 1j, 0, 0], TypeError, "draft must hold real numbers"),
        (P, [[0.5, 0.5], [1.0]], TypeError, "draft is not an array of numbers"),
        (P.astype(np.float16), Q, TypeError, "dtype float16; cast it to float32"),
        (np.array([True, False]), np.array([False, True]), TypeError, "real numbers"),
    ],
)
def test_bad_distributions(target, draft, error, message):
    with pytest.raises(error, match=message):
        mentored.solve(target, draft, budget=0.1)


def test_float32_rows_get_a_looser_sum_tolerance():
    p = np.array([0.5, 0.3, 0.2005], dtype=np.float32)  # off by 5e-4: fine for float32
    mentored.solve(p, Q.astype(np.float32), budget=0.1)
    with pytest.raises(ValueError, match="relative tolerance 1e-06 for float64"):
        mentored.solve(p.astype(np.float64), Q, budget=0.1)


def test_normalize_renormalises_instead_of_refusing():
    sol = mentored.solve([5.0, 3.0, 2.0], [2.0, 3.0, 5.0], divergence="tv", budget=0.1, normalize=True)
    np.testing.assert_allclose(sol.pi, [0.4, 0.3, 0.3], rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="all-zero"):
        mentored.solve([0.0, 0.0], [1.0, 0.0], budget=0.1, normalize=True)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(budget=-0.1), ValueError, "budget must be nonnegative"),
        (dict(budget=np.nan), ValueError, "budget is NaN"),
        (dict(budget=[0.1, 0.2]), ValueError, r"one value per row \(1\)"),
        (dict(budget="big"), TypeError, "budget must be a number"),
        (dict(), ValueError, "exactly one of budget=, acceptance= and price="),
        (dict(budget=0.1, acceptance=0.9), ValueError, "exactly one"),
        (dict(acceptance=1.5), ValueError, "acceptance must be at most 1"),
        (dict(acceptance=-0.5), ValueError, "acceptance must be nonnegative"),
        (dict(budget=0.1, divergence="wasserstein"), ValueError, "unknown divergence 'wasserstein'; the built-ins are tv, kl"),
        (dict(budget=0.1, divergence=3), TypeError, "divergence must be a name"),
        (dict(budget=0.1, threads=0), ValueError, "threads must be a positive integer"),
        (dict(budget=0.1, threads=1.5), ValueError, "threads must be a positive integer"),
        (dict(budget=0.1, out=[0.0, 0.0]), TypeError, "out must be a numpy array"),
        (dict(budget=0.1, out=np.empty(5)), ValueError, r"out must have the target's shape \(3,\)"),
        (dict(budget=0.1, out=np.empty(3, np.float32)), ValueError, "out needs target, draft and out of one dtype"),
        (dict(budget=0.1, out=np.empty(6)[::2]), ValueError, "out must be a writeable C-contiguous array"),
    ],
)
def test_bad_parameters(kwargs, error, message):
    with pytest.raises(error, match=message):
        mentored.solve(P, Q, **kwargs)


def test_path_errors():
    with pytest.raises(ValueError, match="one row"):
        mentored.MentoredPath(np.ones((2, 3)) / 3, np.ones((2, 3)) / 3)
    path = mentored.MentoredPath(P, Q)
    with pytest.raises(ValueError, match=r"s must lie in \[0, TV\(p, q\)\]"):
        path.pi(0.5)
    with pytest.raises(ValueError, match="s must lie"):
        path.thresholds(-1e-3)
    with pytest.raises(ValueError, match="budget must be nonnegative"):
        path.frontier([0.1, -1.0])
    with pytest.raises(ValueError, match="unknown divergence"):
        path.solve("nope", 0.1)


def test_the_core_refuses_what_slips_past_python():
    # Validation lives in Python, but the core must not trust its caller either.
    with pytest.raises(ValueError, match="finite and nonnegative"):
        mentored._core.Path(np.array([0.5, np.nan]), np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="sums to zero"):
        mentored._core.Path(np.array([0.0, 0.0]), np.array([0.5, 0.5]))
    pi, res, status, stats = mentored._core.solve(
        np.array([[0.5, -0.5]]), np.array([[0.5, 0.5]]), 1, 0, np.array([0.1]), 1
    )
    assert status[0] == mentored._core.Status.bad_value.value
    np.testing.assert_array_equal(stats, [[0.0, -0.5, 0.5, 1.0, 0.5, 0.5]])  # why: Σ, min and max per side
    with pytest.raises(ValueError, match="one budget, acceptance or price per row"):
        mentored._core.solve(np.array([[0.5, 0.5]]), np.array([[0.5, 0.5]]), 1, 0, np.array([0.1, 0.2]), 1)
    with pytest.raises(ValueError, match="unknown divergence code"):
        mentored._core.solve(np.array([[0.5, 0.5]]), np.array([[0.5, 0.5]]), 99, 0, np.array([0.1]), 1)


def test_numbers_print_as_numbers():
    for budget in (-0.1, np.float64(-0.1), np.array([-0.1])):
        with pytest.raises(ValueError) as exc:
            mentored.solve(P, Q, budget=budget)
        assert str(exc.value) == "budget must be nonnegative (inf allowed), got -0.1"
    with pytest.raises(ValueError, match=r"s must lie in \[0, TV\(p, q\)\] = \[0, 0\.3\d*\], got 0\.5$"):
        mentored.MentoredPath(P, Q).pi(np.float64(0.5))


def test_logits_get_a_hint():
    logits = np.log(P) + 3.0
    with pytest.raises(ValueError, match=r"target has negative entries and rows that do not sum to 1.*softmax\(logits\)"):
        mentored.solve(np.log(P), Q, budget=0.1)
    with pytest.raises(ValueError, match=r"draft has negative entries .*logits"):
        mentored.solve(np.stack([P, P]), np.stack([logits - 5, Q]), budget=0.1)
    # a probability row with one negative entry is not called logits
    with pytest.raises(ValueError) as exc:
        mentored.solve([0.6, -0.1, 0.5], Q, budget=0.1)
    assert "logits" not in str(exc.value)


def test_big_endian_input_is_read():
    want = mentored.solve(P, Q, divergence="kl", budget=0.1)
    for dtype in (">f8", ">f4"):
        got = mentored.solve(P.astype(dtype), Q.astype(dtype), divergence="kl", budget=0.1)
        np.testing.assert_allclose(got.acceptance, want.acceptance, rtol=1e-6)
    path = mentored.MentoredPath(P.astype(">f8"), Q.astype(">f8"))
    np.testing.assert_allclose(path.tv, 0.3, rtol=1e-15)


def test_torch_backend_never_takes_a_custom_divergence_for_the_builtin_of_its_name():
    torch = pytest.importorskip("torch", reason="the torch backend needs torch (the [torch] extra)")
    sp = pytest.importorskip("sympy")
    t = sp.symbols("t", positive=True)
    from mentored.backends import torch as torch_backend

    fake_kl = mentored.Divergence.from_sympy((t - 1) ** 2 / (t + 1), t, name="kl")  # triangular, named "kl"
    got = torch_backend._solve(torch.tensor(P[None]), torch.tensor(Q[None]), divergence=fake_kl, budget=0.05)
    np.testing.assert_allclose(got.numpy()[0], mentored.solve(P, Q, divergence=fake_kl, budget=0.05).pi, rtol=0, atol=1e-12)
    # the genuine built-in still runs, and agrees with the core
    pi = torch_backend._solve(torch.tensor(P[None]), torch.tensor(Q[None]), divergence="kl", budget=0.05)
    np.testing.assert_allclose(pi.numpy()[0], mentored.solve(P, Q, divergence="kl", budget=0.05).pi, atol=1e-9)


def test_absurd_thread_counts_are_refused_in_words():
    with pytest.raises(ValueError, match="threads must be at most 4096, got 1099511627776"):
        mentored.solve(P, Q, budget=0.1, threads=2**40)


def test_production_core_holds_no_test_hooks_or_dead_members():
    # The keys pass is exposed to the tests by mentored._core_testing; _core.Path keeps what the
    # package reads (its n, d_up and per-code s_max were read by nothing).
    assert not hasattr(mentored._core, "bucket_keys")
    from mentored import _core_testing

    keys = _core_testing.bucket_keys(np.array([0.5, 0.5]), np.array([0.25, 0.75]), True)
    assert keys.dtype == np.uint16 and keys.shape == (2,)
    path = mentored._core.Path(np.array([0.5, 0.5]), np.array([0.25, 0.75]))
    for name in ("n", "d_up", "s_max"):
        assert not hasattr(path, name)


def test_a_core_status_after_validation_is_a_bug_not_bad_input(monkeypatch):
    # Only "unreachable acceptance" can come back for a validated row; anything else is reported as
    # the core's fault, not as a fault of the caller's rows.
    real = mentored._core.solve

    def refuse(*args):
        pi, res, status, stats = real(*args)
        status[:] = mentored._core.Status.bad_value.value
        return pi, res, status, stats

    monkeypatch.setattr(mentored._core, "solve", refuse)
    with pytest.raises(RuntimeError, match="whose entries and sums pass"):
        mentored.solve([0.5, 0.5], [0.25, 0.75], divergence="kl", budget=0.1)


def test_every_entry_point_has_the_one_budget_rule():
    # inf (no bound) taken everywhere; a negative budget refused everywhere with the one message
    from mentored.integrations.hf import mentored_assisted_generation
    from mentored.verify.serving import Verifier, rejection_sample

    p, q = np.array([[0.5, 0.3, 0.2]]), np.array([[0.2, 0.3, 0.5]])
    step = (np.stack([p, p], 1), np.array([[0]]), q[None], np.array([[1]]))
    entries = {
        "solve": lambda b: mentored.solve(p, q, budget=b),
        "speculative_step": lambda b: mentored.speculative_step(*step, budget=b, seed=0),
        "rejection_sample": lambda b: rejection_sample(np.array([1]), [1], q, p, np.array([[0]]), budget=b),
        "Verifier": lambda b: Verifier(3, budget=b),
        "hf assisted generation": lambda b: mentored_assisted_generation(budget=b),
    }
    for name, call in entries.items():
        call(np.inf)
        with pytest.raises(ValueError, match=r"^budget must be nonnegative \(inf allowed\), got -0.5"):
            call(-0.5)
        with pytest.raises(ValueError, match=r"^budget is NaN"):
            call(np.nan)
