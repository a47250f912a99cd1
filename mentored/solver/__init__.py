r"""The solver: the optimum :math:`\pi^\star` of :math:`\mathrm{MD}(f, \varepsilon)` and its proof.

:func:`solve` for batches of rows (each on the backend of its arrays, :mod:`mentored.backends`),
:class:`MentoredPath` for the whole curve of one row, :func:`certify` for a certificate of any
:math:`\pi` (docs/theory.md §4). The solver never imports the decoding side (:mod:`mentored.verify`).
"""

from ._solve import MentoredPath, Solution, solve
from .certificate import Certificate, certify

__all__ = ["solve", "Solution", "MentoredPath", "certify", "Certificate"]
