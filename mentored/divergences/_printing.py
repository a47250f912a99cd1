"""How a sympy generator is printed as numpy code, shared by the analysis (:mod:`.symbolic`) and the
core's expression program (:mod:`.program`), which translates that very code."""

from __future__ import annotations

import numpy as np
import sympy as sp

__all__ = ["SERIES_RADIUS", "NP_MAX", "NP_MIN", "NP_FUNCS"]

SERIES_RADIUS = 1e-3  # |t − 1| below which the tilted f is summed from its Taylor series

# Max/Min as plain calls: sympy's code printer would rewrite them first (seconds, for nested ones).
NP_MAX, NP_MIN = sp.Function("mentored_max"), sp.Function("mentored_min")
NP_FUNCS = {
    "mentored_max": lambda *a: np.maximum.reduce(np.broadcast_arrays(*a)),
    "mentored_min": lambda *a: np.minimum.reduce(np.broadcast_arrays(*a)),
}
