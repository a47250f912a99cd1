r"""Where a computation runs: the backend seam.

Each public entry point (:func:`mentored.solve`, :func:`mentored.speculative_step`,
:func:`mentored.serving.rejection_sample`) asks :func:`get_backend` once, for its array arguments,
and hands the call to what it returns:

- the **host** backend (:mod:`mentored.backends.host`): numpy arrays and CPU tensors, computed by the
  compiled core on zero-copy views, one core call per entry point;
- the **torch device** backend (:mod:`mentored.torch_backend`): tensors on another device (CUDA),
  computed by torch there.

A backend is anything with the methods of :class:`Backend`. Answers come back in the input's kind
(a numpy array for numpy input, a tensor on the input's device for tensors). torch is imported only
when a tensor is given. A new backend (JAX, Triton) is one module with these methods and one line in
:func:`get_backend`.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["Backend", "get_backend", "is_tensor", "CPU_SOLVER"]

# Who computes CPU tensors: "core" (the host backend: the compiled core on zero-copy numpy views)
# or "torch" (the device algorithm, on the CPU: for comparisons and benchmarks). On CPU a torch sort
# of 64 × 131072 ratios alone costs several times a whole lossless verification step
# (benchmarks/torch_lossless.py); the core's bucketed solve does not sort.
CPU_SOLVER = "core"


class Backend(Protocol):
    """What an entry point asks of a backend: its array namespace, the conversions to host memory and
    back to the input's kind, and the three computations, each with the entry point's arguments
    after its own checks (``plan``: serving's layout of the call)."""

    name: str
    xp: Any  # the array namespace: numpy, or torch

    def to_host(self, x, name: str = "input") -> Any: ...

    def like(self, out) -> Any: ...

    def solve(self, target, draft, *, divergence, budget, acceptance, threads, normalize, check, out) -> Any: ...

    def step(self, target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, *, divergence, budget, seed, uniforms,
             threads, zeros, normalize) -> Any: ...

    def verify(self, plan, draft_token_ids, draft_probs, target_probs, bonus_token_ids, *, generators, uniforms, zeros, threads,
               validate, normalize) -> Any: ...


def is_tensor(x) -> bool:
    """Whether ``x`` is a torch object, without importing torch."""
    return x is not None and type(x).__module__.startswith("torch")


def get_backend(*arrays) -> Backend:
    """The backend for a call's arrays (None entries ignored): host for numpy input, and for CPU
    tensors while :data:`CPU_SOLVER` is ``"core"``; the torch device backend otherwise."""
    tensors = [x for x in arrays if is_tensor(x)]
    if not tensors:
        from .host import HOST

        return HOST
    from ..torch_backend import backend_for

    return backend_for(tensors, CPU_SOLVER)
