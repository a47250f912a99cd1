"""Shared fixtures and the hypothesis profiles; the instance generators live in mentored.check.testing."""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest
from hypothesis import settings

# Hypothesis profiles (individual @settings(...) override only the keys they set):
# - "ci", the default, used by the test command (tests/run.sh): derandomised, the same examples on
#   every run and machine (derandomize=True also leaves the example database out);
# - "random", for local runs that look for new failures, a fresh seed each run:
#       HYPOTHESIS_PROFILE=random python -P -m pytest tests
#   (hypothesis's own option `--hypothesis-profile random` selects it too). Whatever such a run
#   finds goes into the test as an @example(...), so that the derandomised runs keep checking it;
#   print_blob=True prints the @reproduce_failure line that replays it.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("random", derandomize=False, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def rng(request):
    # A seed per test, stable across runs and processes, independent of test order.
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def one_core_call(monkeypatch):
    """``one_core_call(refuse=(...))``: record every crossing into the compiled core (each call of a
    function of ``mentored._core``, by name, in order) and make each Python function named in
    ``refuse`` (``"module.attr"``) fail the test if reached. Returns the list of names."""
    import importlib

    import mentored

    calls = []

    def counted(name, fn):
        def call(*args, **kwargs):
            calls.append(name)
            return fn(*args, **kwargs)

        return call

    def refused(*args, **kwargs):
        raise AssertionError("the computation left the one core call")

    def arm(refuse=()):
        for name in dir(mentored._core):
            fn = getattr(mentored._core, name)
            if type(fn).__name__ == "builtin_function_or_method":  # functions, not the enums or classes
                monkeypatch.setattr(mentored._core, name, counted(name, fn))
        for name in refuse:
            owner, attr = name.rsplit(".", 1)
            monkeypatch.setattr(importlib.import_module(owner), attr, refused)
        return calls

    return arm


@pytest.fixture(scope="module")
def torch_one_thread():
    """torch on one thread for a test module (``pytestmark = pytest.mark.usefixtures(...)``): the small
    models run fastest so, and more threads only contend (badly, on a busy machine)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)



@pytest.fixture(scope="session")
def host_reads():
    """A torch function mode that records every call that, on a device, would copy a tensor's values
    to the host and wait for it: ``with host_reads() as mode: ...``, then ``mode.reads``. (``.to(device)``
    is not among them: the code moves to its inputs' device, in the tests the CPU.)"""
    torch = pytest.importorskip("torch")

    class HostReads(torch.overrides.TorchFunctionMode):
        READS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.cpu, torch.Tensor.__bool__, torch.Tensor.__int__,
                 torch.Tensor.__float__, torch.Tensor.__index__, torch.Tensor.nonzero, torch.nonzero, torch.Tensor.__array__}

        def __init__(self):
            super().__init__()
            self.reads = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in self.READS:
                self.reads.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    return HostReads


@pytest.fixture(scope="session")
def custom_divergence():
    """``Divergence.from_sympy`` for the tests' custom generators. Sympy solves f'(t) = y for each of
    them but Jeffreys' (t − 1) log t (a Lambert W), whose conjugate is then found by bisection, and a
    NumericCheckWarning says so: expected there, an error anywhere else. The analysis may take 60 s
    (the triangular one takes ~1 s quietly): the tests using it check answers, not the time limit."""
    import sympy as sp

    import mentored

    def build(f, t, name=None):
        if f == (t - 1) * sp.log(t):
            with pytest.warns(mentored.NumericCheckWarning, match=r"f\* and \(f'\)\^-1 are computed by bisection"):
                return mentored.Divergence.from_sympy(f, t, name=name, timeout=60.0)
        return mentored.Divergence.from_sympy(f, t, name=name, timeout=60.0)

    return build
