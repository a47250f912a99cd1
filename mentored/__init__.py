r"""mentored: the optimal lossy verifier for speculative decoding, exact and proved.

Given a target distribution :math:`p` and a drafter :math:`q`, mentored decoding picks the output
distribution

.. math::

    \pi^\star \in \arg\max_{\pi \in \Delta_n} \sum_i \min(\pi_i, q_i)
    \quad \text{s.t.} \quad D_f(\pi \| p) \le \varepsilon,

which speculative sampling then emits exactly, accepting a draft with probability
:math:`\sum_i \min(\pi_i, q_i)` [1]_. See ``docs/theory.md`` and ``proofs/README.md``.

References
----------
.. [1] V. Tran-Thien and R. Nock, "Mentored Decoding: Faster Inference meets Boosting",
   arXiv:2609.30474, 2026.
"""

from ._solve import MentoredPath, Solution, solve
from .certificate import Certificate, certify
from .divergences import BUILTIN_NAMES, Divergence, divergence
from .speculative import speculative_step
from .symbolic import NumericCheckWarning

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
