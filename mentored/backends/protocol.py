"""What a backend is (:class:`Backend`) and what its solve returns (:class:`Solved`)."""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

__all__ = ["Backend", "Solved"]


class Solved(NamedTuple):
    """A backend's solve, which the solver's face (:func:`mentored.solve`) turns into a
    :class:`~mentored.Solution` and, for ``check=True``, certifies: backends compute arrays, they do
    not build answers.

    ``res`` holds the core's per-row columns (s, t_lo, t_hi, acceptance, D, s_max[, λ, μ]) as numpy;
    ``binding`` which rows' budgets bind; ``squeeze`` whether the input was 1-D; ``check`` the host
    rows and what they were solved for, ``(p2, q2, values, by_budget)``, when ``check=True``."""

    divergence: Any
    pi: Any  # in the input's kind
    res: Any
    binding: Any
    squeeze: bool
    check: tuple | None


class Backend(Protocol):
    """What an entry point asks of a backend: its array namespace, the conversions to host memory and
    back to the input's kind, and the computations, each with the entry point's arguments
    after its own checks (``plan``: serving's layout of the call, or of the batch of trees)."""

    name: str
    xp: Any  # the array namespace: numpy, or torch

    def to_host(self, x, name: str = "input") -> Any: ...

    def like(self, out) -> Any: ...

    def solve(self, target, draft, *, divergence, budget, acceptance, threads, normalize, check, out, price=None) -> Solved: ...

    def step(self, target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids, *, divergence, budget, seed, uniforms,
             threads, zeros, normalize, block=False) -> Any: ...

    def verify(self, plan, draft_token_ids, draft_probs, target_probs, bonus_token_ids, *, generators, uniforms, zeros, threads,
               validate, normalize, logits=False, notes=False) -> Any: ...

    def tree(self, plan, tokens, target_probs, *, generators, uniforms, zeros, threads, validate, normalize) -> tuple: ...

    def onehot(self, p_x, budget, divergence, zeros) -> Any: ...
