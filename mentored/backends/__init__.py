r"""Where a computation runs: the backend seam.

Each public entry point (:func:`mentored.solve`, :func:`mentored.speculative_step`,
:func:`mentored.verify.serving.rejection_sample`) asks :func:`get_backend` once, for its array arguments,
and hands the call to what it returns:

- the **host** backend (:mod:`mentored.backends.host`): numpy arrays and CPU tensors, computed by the
  compiled core on zero-copy views, one core call per entry point;
- the **torch device** backend (:mod:`mentored.backends.torch`): tensors on another device (CUDA),
  computed by torch there.

A backend is anything with the methods of :class:`Backend`. Answers come back in the input's kind
(a numpy array for numpy input, a tensor on the input's device for tensors). torch is imported only
when a tensor is given. A new backend (JAX, Triton) is one module with these methods and one line in
:func:`get_backend`.
"""

from __future__ import annotations

from .host import HOST, HostBackend
from .protocol import Backend, Solved

__all__ = ["Backend", "Solved", "get_backend", "is_tensor", "CPU_SOLVER"]

# Who computes CPU tensors: "core" (the host backend: the compiled core on zero-copy numpy views)
# or "torch" (the device algorithm, on the CPU: for comparisons and benchmarks). On CPU a torch sort
# of 64 × 131072 ratios alone costs several times a whole lossless verification step
# (benchmarks/torch_lossless.py); the core's bucketed solve does not sort.
CPU_SOLVER = "core"


def is_tensor(x) -> bool:
    """Whether ``x`` is a torch object, without importing torch."""
    return x is not None and type(x).__module__.startswith("torch")


def get_backend(*arrays) -> Backend:
    """The backend for a call's arrays (None entries ignored): host for numpy input, and for CPU
    tensors while :data:`CPU_SOLVER` is ``"core"``; the torch device backend otherwise."""
    tensors = [x for x in arrays if is_tensor(x)]
    if not tensors:
        return HOST
    from .torch import CPU_VIEWS, TorchBackend, device_of

    device = device_of(tensors)
    if device is None and CPU_SOLVER == "core":
        return HostBackend(CPU_VIEWS)
    return TorchBackend(device if device is not None else tensors[0].device)
