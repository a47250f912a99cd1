"""The torch device path: its shape of work (one sort per row, no host synchronisation, O(V) memory
per row) and its answers (the core's π; rejection_sample's decisions) with the torch algorithm itself
solving CPU tensors (mentored.backends.CPU_SOLVER = "torch")."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import mentored

torch = pytest.importorskip("torch", reason="torch is optional; the README test command installs it (extra 'test')")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from mentored.backends import torch as torch_backend  # noqa: E402
from mentored.verify.serving import rejection_sample  # noqa: E402


_VIEWS = {"select", "slice", "unsqueeze", "view", "expand", "as_strided", "t", "transpose", "permute", "squeeze", "alias", "_unsafe_view"}


class _Recorder(TorchDispatchMode):
    """Every aten op run, with the largest number of elements among its outputs."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flat = out if isinstance(out, (tuple, list)) else (out,)
        name = str(func.overloadpacket.__name__)
        # views make no data: count what each op writes
        size = 0 if name in _VIEWS else max((x.numel() for x in flat if isinstance(x, torch.Tensor)), default=0)
        self.ops.append((name, size))
        return out


def _rows(rng, R, V, dtype=np.float64, zeros=True):
    p = rng.dirichlet(np.full(V, 0.3), size=R)
    q = rng.dirichlet(np.full(V, 0.3), size=R)
    if zeros:
        p[:, : V // 10] = 0.0  # target zeros (top-k style)
    p /= p.sum(1, keepdims=True)
    return torch.tensor(p.astype(dtype)), torch.tensor(q.astype(dtype))


@pytest.mark.parametrize("div", ["kl", "tv", "reverse_kl", "js"])
def test_the_solve_syncs_nothing_sorts_once_and_stays_linear_in_memory(div, rng, monkeypatch):
    monkeypatch.setattr(torch_backend, "_host_reads", lambda x: False)  # the device's code, on a CPU
    # one torch thread: the recorder sees the calling thread only, and more threads sort rows on others
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _shape_of_the_solve(div, rng)
    finally:
        torch.set_num_threads(threads)


def _shape_of_the_solve(div, rng):
    R, V = 6, 500
    p, q = _rows(rng, R, V)
    eps = torch.full((R,), 0.05, dtype=torch.float64)
    with _Recorder() as build:
        rows = torch_backend._Rows(p, q, div)
    with _Recorder() as search:
        pt = rows.point(rows.search(eps, "keep"))
    pt.pi(p, q)
    names = [n for n, _ in build.ops + search.ops]
    # .item(), bool(tensor), nonzero and masked_select read values back to the host
    assert not {"_local_scalar_dense", "item", "nonzero", "masked_select", "unique"} & set(names), set(names)
    # each row sorted once: one batched sort on a device, one 1-D sort per row on a CPU (faster there)
    assert names.count("sort") == (1 if p.device.type != "cpu" else R) and "argsort" not in names
    assert sum(size for n, size in build.ops if n == "sort") == R * V
    assert max(size for _, size in build.ops) <= R * (V + 1) * 2  # the (R, V + 1, 2) prefix tables
    assert sum(1 for _, size in build.ops if size >= R * V) < 100  # a fixed number of O(V) passes (js: 80, its series)
    # the search evaluates D in O(log V) per point: nothing it makes is of size V per row
    assert max(size for _, size in search.ops) < R * V / 4


@pytest.mark.parametrize("search", ["cpu", "gpu", "cpu-no-zeros"])
def test_torch_solve_matches_the_core_on_longer_rows(search, rng, monkeypatch):
    # "cpu-no-zeros": rows with no p_i = 0, where a CPU skips the work for them (_Rows.zeros)
    if search == "gpu":  # the wide search a GPU runs, here on the CPU
        monkeypatch.setattr(torch_backend, "_SEARCH", {})
    for dtype in (np.float64, np.float32) if search != "gpu" else (np.float64,):
        p, q = _rows(rng, 8, 2000, dtype, zeros=search != "cpu-no-zeros")
        if search == "cpu-no-zeros":
            assert not torch_backend._Rows(p.double(), q.double(), "kl").zeros
        for div in mentored.BUILTIN_NAMES:
            for budget in (1e-6, 0.02, 0.3) if search != "gpu" else (1e-6, 0.3):
                ref = mentored.solve(p.numpy(), q.numpy(), divergence=div, budget=budget).pi
                got = torch_backend._solve(p, q, divergence=div, budget=budget).numpy()
                assert_allclose(got, ref, rtol=1e-6, atol=1e-9, err_msg=f"{div} {budget} {dtype}")


@pytest.fixture
def torch_solver(monkeypatch):
    monkeypatch.setattr("mentored.backends.CPU_SOLVER", "torch")


def _mixed_batch(rng, V=30):
    n = [3, 0, 4, 2, 1, 4]
    T = sum(n)
    p = rng.dirichlet(np.full(V, 0.5), size=T)
    p[::3, :5] = 0.0
    p /= p.sum(1, keepdims=True)
    q = rng.dirichlet(np.full(V, 0.5), size=T)
    draft = np.array([rng.choice(V, p=q[t]) for t in range(T)])
    draft[4] = -1  # a placeholder
    bonus = rng.integers(0, V, (len(n), 1))
    greedy = np.array([False, False, True, False, False, False])
    return draft, n, q, p, bonus, greedy


@pytest.mark.parametrize("zeros", ["keep", "continue"])
def test_torch_algorithm_decides_as_the_core(torch_solver, zeros, rng):
    for _ in range(3):
        draft, n, q, p, bonus, greedy = _mixed_batch(rng)
        u = rng.random((len(draft), 2))
        for div, budget in [("kl", 0.1), ("tv", 0.3), (["hellinger", "kl", "js", "tv", "reverse_kl", "kl"], [0.2, 0.0, 0.1, 0.4, 0.05, 0.0])]:
            kw = dict(divergence=div, budget=budget, is_greedy=greedy, uniforms=u, zeros=zeros)
            ref = rejection_sample(draft, n, q, p, bonus, **kw)
            got = rejection_sample(*(torch.tensor(x) for x in (draft,)), n, torch.tensor(q), torch.tensor(p), torch.tensor(bonus), **kw)
            assert got.dtype == torch.int32
            assert_array_equal(got.numpy(), ref)


def test_cpu_tensors_go_to_the_core_and_agree(rng):
    draft, n, q, p, bonus, greedy = _mixed_batch(rng)
    u = rng.random((len(draft), 2))
    kw = dict(divergence="js", budget=0.2, is_greedy=greedy, uniforms=u)
    assert mentored.backends.CPU_SOLVER == "core"
    got = rejection_sample(torch.tensor(draft), n, torch.tensor(q, dtype=torch.float32), torch.tensor(p, dtype=torch.float32), torch.tensor(bonus), **kw)
    ref = rejection_sample(draft, n, q.astype(np.float32), p.astype(np.float32), bonus, **kw)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.int32
    assert_array_equal(got.numpy(), ref)
    sp = pytest.importorskip("sympy")
    t = sp.symbols("t", positive=True)
    fake_kl = mentored.Divergence.from_sympy((t - 1) ** 2 / (t + 1), t, name="kl")
    # a custom divergence named like a built-in works on tensors too, as itself (not as the built-in)
    kw = dict(divergence=fake_kl, budget=0.1, uniforms=u)
    got = rejection_sample(torch.tensor(draft), n, torch.tensor(q), torch.tensor(p), torch.tensor(bonus), **kw)
    assert_array_equal(got.numpy(), rejection_sample(draft, n, q, p, bonus, **kw))


def test_inverse_cdf_by_binary_search_is_the_masked_rule(rng):
    w = rng.random((50, 40)) * (rng.random((50, 40)) < 0.3)
    w[0] = 0.0
    u = rng.random(50)
    fb = rng.dirichlet(np.ones(40), size=50)
    # the rule written plainly: the first i with Σ_{l≤i} w_l > u·Σw and w_i > 0 (fb where Σw = 0)
    ref = np.empty(50, dtype=np.int64)
    for r in range(50):
        row = w[r] if w[r].sum() > 0 else fb[r]
        c = np.cumsum(row)
        hit = np.flatnonzero((c > u[r] * c[-1]) & (row > 0))
        ref[r] = hit[0] if hit.size else np.flatnonzero(row > 0)[-1]
    got = torch_backend._inverse_cdf(torch.tensor(w), torch.tensor(u), torch.tensor(fb)).numpy()
    assert_array_equal(got, ref)


def test_rows_sorted_side_by_side_give_the_same_bits(rng):
    # On a CPU the row sorts spread over torch's threads (a pool of Python threads): the answer may
    # not depend on how many.
    p, q = _rows(rng, 5, 3000)
    threads = torch.get_num_threads()
    outs = []
    try:
        for t in (1, 2, 3):
            torch.set_num_threads(t)
            outs.append(torch_backend._solve(p, q, divergence="kl", budget=0.1))
    finally:
        torch.set_num_threads(threads)
    assert torch_backend._POOL["size"] >= 3  # the side-by-side sorts ran
    assert all(torch.equal(outs[0], o) for o in outs[1:])
