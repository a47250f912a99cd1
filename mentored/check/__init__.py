r"""What checks the solver, written apart from it: input checks (:mod:`.inputs`), the Lagrange dual
and certificates (:mod:`.duality`), exact rational arithmetic (:mod:`.exact`), the convex-program
oracle (:mod:`.oracle`), the numpy reference (:mod:`.reference`) and test rows (:mod:`.testing`).

This layer imports only the divergences: nothing here calls the solver it checks.
"""

__all__: list[str] = []
