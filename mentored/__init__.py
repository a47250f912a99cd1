r"""mentored: the optimal lossy verifier for speculative decoding, exact and proved.

Given a target distribution :math:`p` and a drafter :math:`q`, mentored decoding picks the output
distribution

.. math::

    \pi^\star \in \arg\max_{\pi \in \Delta_n} \sum_i \min(\pi_i, q_i)
    \quad \text{s.t.} \quad D_f(\pi \| p) \le \varepsilon,

which speculative sampling then emits exactly, accepting a draft with probability
:math:`\sum_i \min(\pi_i, q_i)` [1]_. Theory: ``docs/theory.md``; proofs: ``proofs/README.md``.

The top level holds the solver and its certificate. The rest lives in sub-packages, one per layer,
each importing only the layers before it (``tests/test_structure.py`` holds the contract):

- :mod:`mentored.divergences`: the registry of f-divergences, sympy generators
  (:mod:`~mentored.divergences.symbolic`) and their compiled programs;
- :mod:`mentored.check`: input checks, the dual and certificates, exact arithmetic, the cvxpy oracle,
  the numpy reference, test rows;
- :mod:`mentored.backends`: where a computation runs (the compiled core on the host, torch on a device);
- :mod:`mentored.solver`: :func:`solve`, :class:`MentoredPath`, :func:`certify`;
- :mod:`mentored.verify`: the speculative step, vLLM's rejection-sampler layout
  (:mod:`~mentored.verify.serving`), decoding statistics;
- :mod:`mentored.analysis`: peer lossy rules and the frontier audit, the boosting view (quality);
- :mod:`mentored.integrations`: Hugging Face, vLLM, the shipped models' training and tokenizer;
- :mod:`mentored.demo`: the command line and its text models (nothing in the library imports it).

``import mentored`` needs neither sympy, cvxpy, torch nor transformers. The modules' earlier flat
paths (``mentored.serving``, ``mentored.hf``, ``mentored.quality``, …) keep working: each is the moved
module itself, imported on first use, and ``python -m mentored.train`` runs as before.

References
----------
.. [1] V. Tran-Thien and R. Nock, "Mentored Decoding: Faster Inference meets Boosting",
   arXiv:2609.30474, 2026.
"""

import importlib as _importlib
import importlib.abc  # noqa: F401  (_importlib.abc)
import importlib.util  # noqa: F401  (_importlib.util)
import os as _os
import sys as _sys


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

from .divergences import BUILTIN_NAMES, Divergence, NumericCheckWarning, divergence  # noqa: E402
from .solver import Certificate, MentoredPath, Solution, certify, solve  # noqa: E402
from .verify.speculative import speculative_step  # noqa: E402

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

# Flat paths of modules that moved into the sub-packages: `import mentored.serving` gives the module
# object of `mentored.verify.serving` itself (one module, so monkeypatching either path patches both).
_MOVED = {
    "symbolic": "divergences.symbolic", "exact": "check.exact", "oracle": "check.oracle", "reference": "check.reference",
    "testing": "check.testing", "certificate": "solver.certificate", "torch_backend": "backends.torch",
    "speculative": "verify.speculative", "serving": "verify.serving", "decoding": "verify.decoding", "rules": "analysis.rules",
    "quality": "analysis.quality", "hf": "integrations.hf", "vllm_plugin": "integrations.vllm_plugin", "train": "integrations.train",
    "corpus": "integrations.corpus", "textlm": "demo.textlm", "trees": "integrations.trees",
}


class _MovedPath(_importlib.abc.MetaPathFinder, _importlib.abc.Loader):
    """Finds ``mentored.<old>`` for each entry of ``_MOVED`` and loads it as the moved module."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, old = fullname.partition(".")
        if package != __name__ or old not in _MOVED:
            return None
        # The moved file as origin: runpy's __file__ for `python -m mentored.<old>`.
        return _importlib.util.spec_from_loader(fullname, self, origin=_importlib.util.find_spec(f"{__name__}.{_MOVED[old]}").origin)

    def create_module(self, spec):
        module = _importlib.import_module(f"{__name__}.{_MOVED[spec.name.partition('.')[2]]}")
        spec.loader_state = module.__spec__
        return module

    def get_code(self, fullname):  # python -m mentored.<old>
        target = f"{__name__}.{_MOVED[fullname.partition('.')[2]]}"
        return _importlib.util.find_spec(target).loader.get_code(target)

    def exec_module(self, module):
        # The import system stamped the alias's spec on the module; give it back its own.
        module.__spec__ = module.__spec__.loader_state


if not any(isinstance(finder, _MovedPath) for finder in _sys.meta_path):
    _sys.meta_path.append(_MovedPath())


def __getattr__(name):
    if name in _MOVED:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_MOVED))
