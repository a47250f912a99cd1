r"""Tree speculation with Hugging Face causal language models: :func:`generate_tree`.

Each round the drafter :math:`q` expands a full tree of ``depth`` levels below the last accepted
token (the root): every node's children are the ``width`` tokens the drafter ranks first after the
node's path. The target :math:`p` scores every node in one forward pass, which gives each node
:math:`v` its law :math:`p_v` (the root's row: the law of the first new token; a leaf's: of its
bonus), and :func:`mentored.serving.tree_sample` walks the tree with the verifier
:math:`\pi_v` of each node (docs/serving.md, "Draft trees"; docs/theory.md §9): every emitted token
has law :math:`\pi_v` at its node, within :math:`\varepsilon` of :math:`p_v` in :math:`D_f`, and
``budget=0`` emits exactly the target's law. The drafter's probabilities never enter the verifier
(the children are its deterministic top-``width`` picks), so temperature, top-k and top-p act on
the target alone; the warpers keep the order of the logits, so the children are the warped
drafter's top tokens wherever it has ``width`` of them.

**Tree attention.** A tree pass feeds, per row, the tokens of its sequence the cache lacks, then
tree nodes, with an explicit 4D additive mask ``(B, 1, fed, cached + fed)``: a sequence token sees
its row's earlier tokens (the causal mask, padding masked), a tree node sees its row's whole
sequence, its ancestors and itself, never a sibling or a cousin; its position id is the length of
its path (the sequence's last position plus its depth), as if it had been appended alone.
transformers passes a 4D mask through unchanged, to eager and SDPA attention alike (GPT-2's and
Llama's; the additive form, 0 or the dtype's lowest value, serves both).

**Caches.** The drafter expands level by level: one pass feeds what its cache lacks of each row's
sequence and gives the root's children, then one pass per level feeds that level's nodes (the
leaves are never fed): ``depth`` drafter passes a round. The target's one pass feeds what its cache
lacks and all the ``width + … + width**depth`` nodes. After the walk each row's cache keeps only
the accepted path (the other tree columns are masked, then gathered away by the per-row crop of
:mod:`mentored.integrations.hf`, which drops finished rows): keys and values carry their positions,
so a kept node's columns are what feeding the path as a chain would have cached.
"""

from __future__ import annotations

import time

import numpy as np

try:
    import torch
except ImportError as exc:
    raise ImportError("mentored.integrations.trees needs torch and transformers: pip install torch transformers") from exc

from ..check.inputs import per_row, priced_values
from ..verify.serving import tree_sample
from .hf import _Batched, _check_call, _pad_id, _Rounds, sampling_probs

__all__ = ["generate_tree", "draft_tree", "full_tree"]

OBJECTIVES = ("length", "acceptance")
# Tensors on these devices are verified by the compiled core, in one call for the batch (numpy
# views, no copy); elsewhere tree_sample runs in torch on the device.
_CORE_DEVICES = ("cpu",)


def full_tree(width: int, depth: int) -> np.ndarray:
    """``parents`` of the full ``width``-ary tree of ``depth`` levels below its root, breadth first
    (the layout :func:`mentored.serving.tree_sample` takes): node 0 is the root, and the children of
    the ``j``-th node of level ``d - 1`` are the ``j``-th run of ``width`` nodes of level ``d``.

    >>> full_tree(2, 2).tolist()
    [-1, 0, 0, 1, 1, 2, 2]
    """
    if width < 1 or depth < 1:
        raise ValueError(f"a draft tree needs width >= 1 and depth >= 1, got width={width}, depth={depth}")
    parents, level = [-1], [0]
    for _ in range(depth):
        first = len(parents)
        parents += [v for v in level for _ in range(width)]
        level = list(range(first, len(parents)))
    return np.asarray(parents, dtype=np.int64)


class _Tree:
    """A round's tree, the same for every row: parents, depths, the nodes of each level, and
    ``seen[i, j]``: node ``j`` is node ``i`` or one of its ancestors (what ``i`` attends to)."""

    def __init__(self, width: int, depth: int):
        self.parents = full_tree(width, depth)
        self.size = N = self.parents.size
        self.depths = np.zeros(N, dtype=np.int64)
        self.seen = np.eye(N, dtype=bool)
        for i in range(1, N):  # parents come first (breadth-first order)
            self.depths[i] = self.depths[self.parents[i]] + 1
            self.seen[i] |= self.seen[self.parents[i]]
        self.levels = [np.flatnonzero(self.depths == d) for d in range(depth + 1)]

    def path(self, v: int) -> list[int]:
        """The nodes from the root's child down to ``v`` (empty at the root)."""
        out = []
        while v > 0:
            out.append(v)
            v = int(self.parents[v])
        return out[::-1]


class _TreeLM(_Batched):
    """:class:`mentored.integrations.hf._Batched` with tree passes: ``col[v]`` is the cache column of
    tree node ``v`` in this round (−1 where not fed), ``start`` the first column after the rows'
    sequences (every column before it belongs to a row's sequence or is masked)."""

    def __init__(self, model, name: str, use_cache: bool, tree: _Tree):
        super().__init__(model, name, use_cache)
        self.tree = tree
        self.dtype = next(model.parameters()).dtype

    def begin(self) -> None:
        """A new round: no tree node fed yet."""
        self.col = np.full(self.tree.size, -1, dtype=np.int64)
        self.fed: list[int] = []
        self.start = None

    def tree_pass(self, seqs: list, tokens: torch.Tensor, nodes) -> tuple:
        """Feed each row what its cache lacks of ``seqs[b]`` (all of it without a cache), then the tree
        nodes ``nodes`` (tokens ``tokens[:, nodes]``); without a cache the nodes fed earlier this
        round are fed again before them. Returns the logits after each row's sequence (B, V), or
        None when nothing of it was fed, and the logits of ``nodes`` (B, len(nodes), V)."""
        nodes = [int(v) for v in nodes]
        B = len(seqs)
        chunks = [s[c:] for s, c in zip(seqs, self.cached)] if self.use_cache else list(seqs)
        feed = nodes if self.use_cache else self.fed + nodes
        lengths = [int(c.numel()) for c in chunks]
        m, n = max(lengths), len(feed)
        if m and min(lengths) == 0:
            raise RuntimeError(f"internal error: some rows of the {self.name} model have sequence tokens to feed and others none")
        old = self.mask if self.use_cache else torch.zeros((B, 0), dtype=torch.int64, device=self.device)
        C0 = old.shape[1]
        if m:
            self.start = C0 + m
        self.col[feed] = C0 + m + np.arange(n)
        ids = torch.zeros((B, m + n), dtype=torch.int64, device=self.device)
        fmask = torch.zeros((B, m + n), dtype=torch.int64, device=self.device)
        pos = torch.zeros((B, m + n), dtype=torch.int64, device=self.device)
        depth = torch.as_tensor(self.tree.depths[feed], device=self.device)
        for b, c in enumerate(chunks):
            first = self.cached[b] if self.use_cache else 0
            ids[b, m - lengths[b] : m] = c
            fmask[b, m - lengths[b] : m] = 1
            pos[b, m - lengths[b] : m] = torch.arange(first, first + lengths[b], device=self.device)
            pos[b, m:] = int(seqs[b].numel()) - 1 + depth  # a node's position: its path's length after the sequence
        ids[:, m:] = tokens[:, feed]
        fmask[:, m:] = 1
        K = C0 + m + n
        # Which columns each fed column sees, the same for every row (rows are right-aligned); the
        # row's own padding and masked columns are taken out by `valid` below.
        sees = np.zeros((m + n, K), dtype=bool)
        sees[:m] = np.arange(K)[None, :] <= (C0 + np.arange(m))[:, None]  # causal over the sequences
        sees[m:, : self.start] = True  # a node sees its row's whole sequence
        fed = np.flatnonzero(self.col >= 0)
        sees[np.ix_(np.arange(m, m + n), self.col[fed])] = self.tree.seen[np.ix_(feed, fed)]  # and its ancestors and itself
        valid = torch.cat([old, fmask], dim=1).bool()
        allowed = valid[:, None, :] & torch.as_tensor(sees, device=self.device)[None]
        mask4 = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device).masked_fill_(~allowed, torch.finfo(self.dtype).min)
        kwargs = {self.keyword: self.cache} if self.use_cache else {}
        out = self.model(input_ids=ids, attention_mask=mask4[:, None], position_ids=pos, use_cache=self.use_cache, **kwargs)
        if self.use_cache:
            self.mask = valid.to(torch.int64)
            self.cached = [c + k for c, k in zip(self.cached, lengths)]
            if self.cache.get_seq_length() != K:
                raise RuntimeError(f"internal error: the {self.name} cache holds {self.cache.get_seq_length()} columns, expected {K}")
        self.fed += nodes
        logits = out.logits
        return (logits[:, m - 1] if m else None), logits[:, K - C0 - len(nodes) :]

    def keep_path(self, b: int, path: list[int]) -> None:
        """Row ``b`` keeps its sequence and, of this round's tree, the fed nodes of ``path`` (the
        accepted nodes, root excluded, in depth order), which become the next tokens of its sequence."""
        if not self.use_cache:
            return
        kept = [v for v in path if self.col[v] >= 0]
        if kept != path[: len(kept)]:
            raise RuntimeError(f"internal error: the {self.name} cache holds a node of the path but not its parent")
        dropped = [v for v in self.fed if v not in kept]
        self.mask[b, torch.as_tensor(self.col[dropped], dtype=torch.int64, device=self.device)] = 0
        self.cached[b] += len(kept)


def _check(target_model, draft_model, input_ids, attention_mask, width, depth, temperature, top_k, top_p, extra=0, pad_token_id=None):
    """The checks of a tree call: (device, input_ids as (B, L), each row's prompt tokens, V).
    ``extra`` new tokens must fit in the models' positions after the longest prompt, with the tree;
    the prompts are checked as :func:`mentored.integrations.hf.generate` checks them (ids within
    the vocabulary, no left padding without ``attention_mask``)."""
    for name, value in (("width", width), ("depth", depth)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an integer of at least 1, got {value!r}")
    device, ids, prompts, V = _check_call(target_model, draft_model, input_ids, attention_mask, temperature, top_k, top_p,
                                          extra + depth, f"{extra} new tokens + the depth {depth}", pad_token_id)
    if width > V:
        raise ValueError(f"width {width} exceeds the vocabulary ({V} tokens): siblings carry distinct tokens")
    return device, ids, prompts, V


def _grow(draft_lm: _TreeLM, target_lm: _TreeLM, seqs: list, width: int, V: int) -> tuple:
    """Draft the tree after each row's sequence, level by level, and score it in one target pass:
    the nodes' tokens (B, N) (node 0: the sequence's last token), the target's logits at every node
    (B, N, V) (node 0's row: after the sequence), and the time drafting ended."""
    tree, B = draft_lm.tree, len(seqs)
    tokens = torch.zeros((B, tree.size), dtype=torch.int64, device=draft_lm.device)
    tokens[:, 0] = torch.stack([s[-1] for s in seqs])
    draft_lm.begin()
    target_lm.begin()
    logits, _ = draft_lm.tree_pass(seqs, tokens, [])
    logits = logits[:, None]
    for d in range(1, len(tree.levels)):
        tokens[:, tree.levels[d]] = torch.topk(logits[..., :V], width, dim=-1).indices.reshape(B, -1)
        if d < len(tree.levels) - 1:  # the leaves' children are not drafted
            _, logits = draft_lm.tree_pass(seqs, tokens, tree.levels[d])
    drafted = time.perf_counter()
    root, nodes = target_lm.tree_pass(seqs, tokens, range(1, tree.size))
    return tokens, torch.cat([root[:, None], nodes], dim=1)[..., :V], drafted


@torch.no_grad()
def draft_tree(target_model, draft_model, input_ids, attention_mask=None, *, width: int = 2, depth: int = 3, temperature: float = 1.0,
               top_k: int | None = None, top_p: float | None = None):
    """The tree :func:`generate_tree` verifies in its first round, for each prompt of a batch:
    ``(tokens, parents, target_probs)`` with ``tokens`` (B, N) the nodes' tokens (node 0: the
    prompt's last), ``parents`` (N,) of :func:`full_tree` and ``target_probs`` (B, N, V) float64,
    the target's warped law after each node's path: ``tokens[b]``, ``parents`` and
    ``target_probs[b]`` are one request of :func:`mentored.serving.tree_verifier` (whose value at
    the root is the round's expected number of accepted tokens) and :func:`mentored.serving.tree_sample`."""
    device, _, prompts, V = _check(target_model, draft_model, input_ids, attention_mask, width, depth, temperature, top_k, top_p)
    tree = _Tree(int(width), int(depth))
    target_lm, draft_lm = _TreeLM(target_model, "target", False, tree), _TreeLM(draft_model, "draft", False, tree)
    for lm in (target_lm, draft_lm):
        lm.start(len(prompts))
    tokens, logits, _ = _grow(draft_lm, target_lm, prompts, int(width), V)
    return tokens, tree.parents.copy(), sampling_probs(logits, temperature=temperature, top_k=top_k, top_p=top_p)


@torch.no_grad()
def generate_tree(
    target_model,
    draft_model,
    input_ids,
    attention_mask=None,
    *,
    width: int = 2,
    depth: int = 3,
    divergence="kl",
    budget=None,
    objective: str = "length",
    max_new_tokens: int = 32,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
    seed: int | None = None,
    use_cache: bool = True,
    price=None,
):
    r"""Generate up to ``max_new_tokens`` tokens after each prompt of a batch with mentored tree speculation.

    Each round drafts the full tree of ``width`` children a node, ``depth`` levels deep
    (``width + … + width**depth`` nodes: :func:`full_tree`), scores it with one target pass and
    emits the accepted path and one more token: at a node :math:`v` with children tokens
    :math:`S_v`, the verifier :math:`\pi_v` maximises the objective subject to
    :math:`D_f(\pi_v \| p_v) \le \varepsilon` (:func:`mentored.serving.tree_sample`), and
    ``width=1`` is a chain of ``depth`` greedy drafts verified token by token.

    Parameters
    ----------
    target_model, draft_model, input_ids, attention_mask, divergence, budget, max_new_tokens, eos_token_id, pad_token_id :
        As :func:`mentored.integrations.hf.generate`: a batch of left-padded prompts whose rows
        finish independently, the same vocabulary, one budget or one per row (0.1 when not given). Prompt ids outside
        ``[0, V)`` are refused, and so is a batch whose rows start with the pad token when
        ``attention_mask`` is None (it looks left-padded: pass the mask).
    price : float, or one per row, optional
        Instead of a budget, a price :math:`\lambda \ge 0` (``inf``: lossless; per row NaN: the row
        uses its budget): each node's :math:`\pi_v` maximises the objective minus
        :math:`\lambda D_f(\pi_v\|p_v)` (docs/theory.md §4, "Budgets by price";
        :func:`mentored.serving.tree_sample` with ``price=``). Built-in divergences; verified on the
        host (the C++ core), on a device too. A row with both a price and a budget other than 0 is
        refused.
    width, depth : int
        Children per node (the drafter's top ``width``) and levels below the root.
    objective : {"length", "acceptance"}
        ``"length"`` maximises the expected number of accepted tokens of the round;
        ``"acceptance"`` is the set verifier (the most mass on each node's children).
    temperature, top_k, top_p :
        Warp the target's law (:func:`mentored.integrations.hf.sampling_probs`), with its zeros kept
        (``zeros="keep"``: no filtered token is emitted); under ``top_k=1`` the output is the
        target's greedy decoding at every budget.
    seed : int, optional
        Seeds the two uniforms of each node (one generator for the batch). Drafting is deterministic.
    use_cache : bool
        ``False`` recomputes every sequence and tree each pass (the same tokens for the same seed).

    Returns
    -------
    sequences : LongTensor (B, L + T)
        The prompts, then each row's new tokens, padded on the right with ``pad_token_id``.
    stats : :class:`mentored.integrations.hf.GenerateStats`
        As :func:`mentored.integrations.hf.generate` with draft positions read as depths: ``steps``
        target passes, ``accepted`` tree nodes accepted, ``per_position[d]`` the acceptance at depth
        ``d + 1`` among rounds that reached it, ``drafted`` the tree nodes scored
        (``width + … + width**depth`` a round); ``emitted / steps`` tokens per target pass;
        ``logprobs``, ``target_logprobs``, ``spent`` per row: the law of each returned token (log π of
        its node's verifier, log p, :math:`D_f(\pi_v\|p_v)`; docs/theory.md §11).
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    device, ids_in, prompts, V = _check(target_model, draft_model, input_ids, attention_mask, width, depth, temperature, top_k, top_p,
                                        extra=max_new_tokens, pad_token_id=pad_token_id)
    B = ids_in.shape[0]
    budgets = per_row(0.1 if budget is None else budget, B, "budget", unit="row")
    prices = None  # per row: its price, NaN where it uses its budget
    if price is not None:
        given = np.zeros(B) if budget is None else budgets
        lam = price.reshape(-1) if np.ndim(price) == 2 and np.shape(price)[1:] == (1,) else price
        vals, priced = priced_values(given, lam, B, unit="row")
        prices = np.where(priced, vals, np.nan)
        budgets = np.where(priced, 0.0, budgets)
    pad_token_id = _pad_id(target_model, pad_token_id, eos_token_id)
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed) if seed is not None else int(torch.seed()) % (2**63))

    tree = _Tree(int(width), int(depth))
    N = tree.size
    target_lm, draft_lm = _TreeLM(target_model, "target", use_cache, tree), _TreeLM(draft_model, "draft", use_cache, tree)
    target_lm.start(B)
    draft_lm.start(B)
    rounds = _Rounds(prompts, depth, max_new_tokens, eos_token_id)
    seqs = rounds.seqs
    while rounds.active:
        active = rounds.active
        work = [seqs[b] for b in active]
        A = len(active)
        t0 = time.perf_counter()
        tokens, logits, t1 = _grow(draft_lm, target_lm, work, width, V)
        p = sampling_probs(logits, temperature=temperature, top_k=top_k, top_p=top_p)
        t2 = time.perf_counter()
        u = torch.rand((A * N, 2), generator=gen, device=device, dtype=torch.float64)
        parents, kw = np.tile(tree.parents, A), dict(divergence=divergence, budget=budgets[active], objective=objective, zeros="keep")
        if prices is not None:
            kw["price"] = prices[active]
        if device.type in _CORE_DEVICES or prices is not None:  # a price is solved by the core, on the host
            emitted, last = tree_sample(tokens.reshape(-1).cpu().numpy(), parents, [N] * A, p.reshape(A * N, V).cpu().numpy(),
                                        uniforms=u.cpu().numpy(), return_logprobs=True, **kw)
            res, last = torch.from_numpy(emitted.tokens), torch.from_numpy(last)
        else:
            emitted, last = tree_sample(tokens.reshape(-1), parents, [N] * A, p.reshape(A * N, V), uniforms=u, return_logprobs=True, **kw)
            res = emitted.tokens
        notes = (emitted.logprobs, emitted.target_logprobs, emitted.spent)
        t3 = time.perf_counter()
        still = []
        for i, b in enumerate(active):
            row = res[i].to(torch.int64)
            new = row[row >= 0].to(device)
            path = tree.path(int(last[i]))
            n_acc = len(path)
            if new.numel() != n_acc + 1 or not torch.equal(new[:n_acc], tokens[i, path]):
                raise RuntimeError("internal error: the emitted tokens are not the accepted path's")
            target_lm.keep_path(i, path)
            draft_lm.keep_path(i, path)
            if rounds.emit(b, new, n_acc, [x[i][: n_acc + 1] for x in notes]):
                still.append(i)
        rounds.close(still, (target_lm, draft_lm), t0, t1, t2, t3)
    return rounds.result(ids_in, pad_token_id, drafted_per_step=N - 1)  # drafted: the tree's nodes a round, not `depth`
