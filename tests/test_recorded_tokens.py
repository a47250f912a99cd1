"""The tokens verification emits, held fixed: a recorded set of batches, each verified on given uniforms.

``tests/data/recorded_tokens.npz`` holds the tokens that ``rejection_sample`` (numpy and CPU tensors),
``Verifier`` and ``speculative_step`` returned for these batches when the set was recorded, before the
decision rule moved into the core for every kind of row (dense, token-only, greedy, placeholder,
ragged, per-request divergences, both zeros modes, float32 and float64). A change of the rule, of its
order of operations or of the uniforms it reads shows here as a token that moved.

Record again (only for an intended change of the tokens, said so in its commit)::

    python -P tests/test_recorded_tokens.py --record
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

RECORD = pathlib.Path(__file__).with_name("data") / "recorded_tokens.npz"
DIVS = ("kl", "tv", "reverse_kl", "chi2", "neyman_chi2", "hellinger", "js")


def _rows(rng, T, V, dtype, zeros):
    """T rows summing to 1 in dtype, peaked, with some exact zeros (a top-k mask) when asked."""
    x = rng.random((T, V)) ** rng.uniform(1, 8)
    if zeros:
        x[rng.random((T, V)) < 0.3] = 0.0
        x[np.arange(T), rng.integers(0, V, T)] += 0.1  # no empty row
    x /= x.sum(-1, keepdims=True)
    return x.astype(dtype)


def _batch(seed):
    """One recorded batch: the arguments of rejection_sample, from its seed alone."""
    rng = np.random.default_rng(seed)
    B = int(rng.integers(1, 5))
    n = rng.integers(0, 4, B)
    T, V = int(n.sum()), int(rng.integers(2, 12))
    dtype = (np.float32, np.float64)[seed % 2]
    p = _rows(rng, T, V, dtype, rng.random() < 0.5)
    q = _rows(rng, T, V, dtype, rng.random() < 0.5)
    # drafts: from q mostly, sometimes anywhere (q_x = 0), sometimes the placeholder
    c = np.cumsum(q.astype(np.float64), -1)
    draft = np.minimum((c < rng.random((T, 1)) * c[:, -1:]).sum(-1), V - 1).astype(np.int64)
    anywhere = rng.random(T) < 0.15
    draft[anywhere] = rng.integers(0, V, int(anywhere.sum()))
    draft[rng.random(T) < 0.1] = -1
    bonus = rng.integers(0, V, (B, 1))
    kind = seed % 5
    budget = [0.0, 0.02, 0.3, 2.0, np.inf][int(rng.integers(0, 5))]
    per_request = rng.random() < 0.3
    args = dict(
        draft_token_ids=draft, num_draft_tokens=[int(v) for v in n], draft_probs=None if kind == 4 else q, target_probs=p,
        bonus_token_ids=bonus, divergence=[DIVS[int(i)] for i in rng.integers(0, 7, B)] if per_request else DIVS[seed % 7],
        budget=rng.choice([0.0, 0.05, 0.5, np.inf], B) if per_request else budget,
        is_greedy=rng.random(B) < 0.3 if rng.random() < 0.4 else None, uniforms=rng.random((T, 2)),
        zeros=("keep", "continue")[int(rng.integers(0, 2))],
    )
    return args


def _step_batch(seed):
    """speculative_step's arguments (B, k + 1, V), from a seed."""
    rng = np.random.default_rng(10_000 + seed)
    B, k, V = int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(2, 10))
    dtype = (np.float32, np.float64)[seed % 2]
    p = _rows(rng, B * (k + 1), V, dtype, rng.random() < 0.5).reshape(B, k + 1, V)
    q = _rows(rng, B * k, V, dtype, rng.random() < 0.5).reshape(B, k, V)
    draft = rng.integers(0, V, (B, k))
    bonus = rng.integers(0, V, (B, 1))
    return dict(target_with_bonus_probs=p, bonus_token_ids=bonus, draft_probs=q, draft_token_ids=draft,
                divergence=DIVS[seed % 7], budget=rng.uniform(0, 0.5, (B, k)), uniforms=rng.random((B, k, 2)),
                zeros=("keep", "continue")[seed % 2])


def _numpy(seed):
    from mentored.verify.serving import rejection_sample

    return rejection_sample(**_batch(seed))


def _verifier(seed):
    from mentored.verify.serving import Verifier

    a = _batch(seed)
    if a["draft_probs"] is None or not isinstance(a["divergence"], str) or not np.isscalar(a["budget"]):
        return None
    ver = Verifier(a["target_probs"].shape[1], divergence=a["divergence"], budget=float(a["budget"]), zeros=a["zeros"])
    return ver(a["draft_token_ids"], a["num_draft_tokens"], a["draft_probs"], a["target_probs"], a["bonus_token_ids"],
               is_greedy=a["is_greedy"], uniforms=a["uniforms"])


def _tensors(seed):
    import torch

    from mentored.verify.serving import rejection_sample

    a = _batch(seed)
    for key in ("draft_token_ids", "draft_probs", "target_probs", "bonus_token_ids"):
        if a[key] is not None:
            a[key] = torch.from_numpy(np.asarray(a[key]))
    return rejection_sample(**a).numpy()


def _step(seed):
    import mentored

    return mentored.speculative_step(**_step_batch(seed))


def _step_tensors(seed):
    import torch

    import mentored

    a = _step_batch(seed)
    for key in ("target_with_bonus_probs", "bonus_token_ids", "draft_probs", "draft_token_ids"):
        a[key] = torch.from_numpy(np.asarray(a[key]))
    return mentored.speculative_step(**a).numpy()


def _custom(seed):
    """A generator from sympy (solved by the core through its program) and one from callables alone."""
    import sympy as sp

    import mentored
    from mentored.verify.serving import rejection_sample

    t = sp.Symbol("t", positive=True)
    divs = [mentored.Divergence.from_sympy((t - 1) ** 2 / (t + 1), t, name="triangular")]
    hel = mentored.divergence("hellinger")
    divs.append(mentored.Divergence(name="hellinger by hand", f=hel.f, fprime=hel.fprime, f_inf=hel.f_inf, f0=hel.f0))
    a = _batch(seed)
    a["divergence"] = divs[seed % 2]
    if not np.isscalar(a["budget"]):
        a["budget"] = 0.3
    return rejection_sample(**a)


CASES = {
    "numpy": (_numpy, range(400)),
    "verifier": (_verifier, range(400)),
    "tensors": (_tensors, range(0, 400, 4)),
    "step": (_step, range(60)),
    "step_tensors": (_step_tensors, range(0, 60, 3)),
    "custom": (_custom, range(10)),
}


def _key(case, seed):
    return f"{case}/{seed}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_recorded_batches_give_the_recorded_tokens(case):
    if case in ("tensors", "step_tensors"):
        pytest.importorskip("torch", reason="CPU tensors need torch (the [test] extra installs it)")
    record = np.load(RECORD)
    fn, seeds = CASES[case]
    moved = []
    for seed in seeds:
        key = _key(case, seed)
        got = fn(seed)
        if got is None:
            assert key not in record.files
            continue
        if not np.array_equal(np.asarray(got), record[key]):
            moved.append(f"{key}: recorded {record[key].tolist()}, now {np.asarray(got).tolist()}")
    assert not moved, "tokens moved:\n" + "\n".join(moved[:10])


def test_the_record_covers_every_kind_of_row():
    """The recorded batches hold each kind of row and each way a request ends, so that a rule changed
    for any one of them moves recorded tokens."""
    record = np.load(RECORD)
    seen = dict(greedy=0, token_only=0, placeholder=0, per_request=0, keep=0, float32=0, rejected=0, bonus=0)
    for seed in CASES["numpy"][1]:
        a, out = _batch(seed), record[_key("numpy", seed)]
        n = np.asarray(a["num_draft_tokens"])
        seen["greedy"] += a["is_greedy"] is not None and bool(np.any(a["is_greedy"] & (n > 0)))
        seen["token_only"] += a["draft_probs"] is None
        seen["placeholder"] += bool(np.any(a["draft_token_ids"] < 0))
        seen["per_request"] += not isinstance(a["divergence"], str)
        seen["keep"] += a["zeros"] == "keep"
        seen["float32"] += a["target_probs"].dtype == np.float32
        for b in range(n.size):
            emitted = out[b][out[b] >= 0]
            seen["bonus"] += emitted.size == n[b] + 1  # all accepted: the bonus token last
            seen["rejected"] += emitted.size <= n[b]  # a residual (or argmax) token at the first rejection
    assert min(seen.values()) >= 20, seen


if __name__ == "__main__" and "--record" in sys.argv:
    out = {}
    for case, (fn, seeds) in CASES.items():
        for seed in seeds:
            got = fn(seed)
            if got is not None:
                out[_key(case, seed)] = np.asarray(got)
    RECORD.parent.mkdir(exist_ok=True)
    np.savez_compressed(RECORD, **out)
    print(f"recorded {len(out)} batches in {RECORD}")
