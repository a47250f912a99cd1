r"""Verification of drafts: the speculative step (:func:`~.speculative.speculative_step`), vLLM's
rejection-sampler layout (:mod:`.serving`) and the statistics of a decoding loop (:mod:`.decoding`).

The decision rule (accept, first rejection, residual, bonus) is the compiled core's on the host and
the torch backend's on a device (:mod:`mentored.backends`); this layer plans calls to them.
"""

__all__: list[str] = []
