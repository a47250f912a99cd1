r"""Analyses built on the solver: peer lossy verification rules and the frontier audit
(:mod:`.rules`), and the boosting view of :math:`\pi` as one round with the drafter as weak learner
(:mod:`.quality`)."""

__all__: list[str] = []
