r"""mentored: the optimal lossy verifier for speculative decoding, exact and proved.

Given a target distribution :math:`p` and a drafter :math:`q`, mentored decoding picks the output
distribution

.. math::

    \pi^\star \in \arg\max_{\pi \in \Delta_n} \sum_i \min(\pi_i, q_i)
    \quad \text{s.t.} \quad D_f(\pi \| p) \le \varepsilon,

which speculative sampling then emits exactly, accepting a draft with probability
:math:`\sum_i \min(\pi_i, q_i)` [1]_. Theory: ``docs/theory.md``; proofs: ``proofs/README.md``.

The top level holds the solver and its certificate. The rest is one attribute away and loaded on
first use, so that ``import mentored`` needs neither sympy, cvxpy, torch nor transformers:
``mentored.rules`` (peer lossy rules and the frontier audit), ``mentored.quality`` (the boosting
view), ``mentored.serving`` (vLLM's rejection-sampler layout), ``mentored.symbolic`` (divergences from sympy), ``mentored.oracle`` (the convex program),
``mentored.reference`` (the numpy reference), ``mentored.hf`` (Hugging Face loop),
``mentored.torch_backend``, ``mentored.textlm`` (the demo's text models), ``mentored.decoding``
(the statistics of a decoding loop), ``mentored.testing``; ``mentored.exact`` (exact arithmetic for
certificates) comes with the certificate.

References
----------
.. [1] V. Tran-Thien and R. Nock, "Mentored Decoding: Faster Inference meets Boosting",
   arXiv:2609.30474, 2026.
"""

import importlib as _importlib
import os as _os


def _require_core():
    """Import the compiled core, or say why it is missing and what to do."""
    import importlib.util

    if importlib.util.find_spec(f"{__name__}._core") is not None:
        return  # present: any failure to load it is its own, clearer error
    raise ImportError(
        f"mentored's compiled core (mentored._core) is not in {_os.path.dirname(__file__)}. "
        "This is a source folder, not an installed package: Python looks in the current directory "
        "first, so `python -m mentored` or `import mentored` in a clone's root finds the uncompiled "
        "sources. Fix: use the `mentored` command that `pip install .` puts on your PATH, or run "
        "Python from another folder (or as `python -P`, which leaves the current directory out); to "
        "work on the sources in place, `pip install --no-build-isolation -e .`."
    )


_require_core()

from ._solve import MentoredPath, Solution, solve  # noqa: E402
from .certificate import Certificate, certify  # noqa: E402
from .divergences import BUILTIN_NAMES, Divergence, NumericCheckWarning, divergence  # noqa: E402
from .speculative import speculative_step  # noqa: E402

__all__ = [
    "solve",
    "Solution",
    "MentoredPath",
    "Divergence",
    "divergence",
    "BUILTIN_NAMES",
    "certify",
    "Certificate",
    "NumericCheckWarning",
    "speculative_step",
]
__version__ = "0.1.0"

# Submodules reachable as attributes, imported on first access (PEP 562).
_SUBMODULES = ("rules", "quality", "serving", "symbolic", "oracle", "reference", "hf", "torch_backend", "textlm", "decoding", "testing")


def __getattr__(name):
    if name in _SUBMODULES:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES))
