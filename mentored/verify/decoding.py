r"""The bookkeeping of a speculative decoding loop, shared by the Hugging Face loop
(:func:`mentored.integrations.hf.generate`) and the n-gram demo (:func:`mentored.demo.textlm.speculative_decode`).

Each verification step drafts :math:`k` tokens from :math:`q` and emits the accepted drafts, then one
token from :math:`\pi` (the residual at the first rejection, or the bonus after :math:`k`
acceptances). :class:`Tally` counts the steps as they come; :class:`DecodeStats` is what a loop
returns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DecodeStats", "Tally"]


@dataclass(frozen=True)
class DecodeStats:
    r"""What speculative decoding did, pooled over sequences.

    Attributes
    ----------
    tokens : list of ndarray
        The generated token ids of each sequence (prompt excluded).
    steps : int
        Verification steps = target forward passes (one pass scores the k drafts and the bonus).
    drafted, accepted : int
        Drafts proposed (k per step) and accepted.
    per_position : ndarray (k,)
        Acceptance rate at draft position j among steps that reached j.
    emitted : int
        Tokens the steps emitted: :func:`mentored.integrations.hf.generate` counts exactly the tokens it returns
        (a last step cut short counts only its kept drafts, see :meth:`Tally.step`);
        :func:`mentored.demo.textlm.speculative_decode` counts its last step in full, before truncation
        to ``new_tokens``.
    verified : int
        Drafts that met the acceptance test (up to and including the first rejection).
    """

    tokens: list
    steps: int
    drafted: int
    accepted: int
    per_position: np.ndarray
    emitted: int

    verified: int

    @property
    def acceptance(self) -> float:
        """Accepted drafts / verified drafts (drafts after a rejection are never verified)."""
        return self.accepted / max(self.verified, 1)

    @property
    def mean_accepted(self) -> float:
        """Mean accepted drafts per step (0..k); each step emits one more token than this."""
        return self.accepted / max(self.steps, 1)

    @property
    def passes_per_token(self) -> float:
        """Target forward passes per generated token (1 without speculation)."""
        return self.steps / max(self.emitted, 1)


class Tally:
    """Running counts of verification steps with ``k`` drafts each, for a sequence or a batch."""

    def __init__(self, k: int):
        self.k = k
        self.steps = self.drafted = self.accepted = self.emitted = 0
        self.reached = np.zeros(k)  # steps that verified draft position j
        self.kept = np.zeros(k)  # steps that accepted it

    def step(self, accepted: int, emitted: int) -> None:
        """One step: ``accepted`` drafts accepted (0..k, the first rejection ends them), ``emitted``
        tokens kept (``accepted + 1``, fewer where the sequence ended inside the step).

        A step cut after ``emitted <= accepted`` tokens (all of them accepted drafts) counts only
        those: ``emitted`` drafts verified and accepted, the drafts past the cut neither, so that
        the counts describe the tokens kept (``accepted <= emitted <= accepted + steps``)."""
        verified = min(accepted + 1, self.k)
        if emitted <= accepted:
            accepted = verified = emitted
        self.steps += 1
        self.drafted += self.k
        self.accepted += accepted
        self.reached[:verified] += 1
        self.kept[:accepted] += 1
        self.emitted += emitted

    @classmethod
    def pooled(cls, tallies) -> Tally:
        """The counts of several tallies (rows of a batch) together."""
        tallies = list(tallies)
        out = cls(tallies[0].k if tallies else 0)
        for t in tallies:
            out.steps += t.steps
            out.drafted += t.drafted
            out.accepted += t.accepted
            out.emitted += t.emitted
            out.reached += t.reached
            out.kept += t.kept
        return out

    def fields(self, tokens: list) -> dict:
        """The fields of :class:`DecodeStats` for these counts and the generated ``tokens``."""
        with np.errstate(invalid="ignore"):
            per_position = np.where(self.reached > 0, self.kept / np.maximum(self.reached, 1), np.nan)
        return dict(
            tokens=tokens, steps=self.steps, drafted=self.drafted, accepted=self.accepted, per_position=per_position,
            emitted=self.emitted, verified=int(self.reached.sum()),
        )
