"""Command line: ``python -m mentored {demo, solve, frontier, certify}``.

demo       speculative decoding of held-out text with small n-gram models, lossless and mentored
           (``--quick``: the acceptance-against-budget table on one LLM-like row)
solve      optimal verifiers for target/draft rows read from .npy files
frontier   optimal acceptance against budget for chosen divergences, with a plot
certify    check a given π (.npy) against MD(f, ε): feasibility and a duality gap
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from . import BUILTIN_NAMES, MentoredPath


class _Bar:
    """A plain progress bar on stderr (no dependency)."""

    def __init__(self, total: int, label: str = "", width: int = 30):
        self.total, self.label, self.width, self.done = max(total, 1), label, width, 0
        self._draw()

    def update(self, n: int = 1, label: str | None = None) -> None:
        self.done = min(self.done + n, self.total)
        if label is not None:
            self.label = label
        self._draw()

    def _draw(self) -> None:
        filled = int(self.width * self.done / self.total)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] {100 * self.done // self.total:3d}% {self.label:<28}")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()


def quick(args) -> int:
    """Acceptance against budget, for every built-in divergence, on LLM-like rows."""
    from .testing import llm_like

    rng = np.random.default_rng(args.seed)
    p, q = llm_like(rng, args.vocab)
    start = time.perf_counter()
    path = MentoredPath(p, q)
    budgets = np.array([0.0, 0.01, 0.05, 0.1, 0.5])
    rows = {name: path.frontier(budgets, name) for name in BUILTIN_NAMES}
    elapsed = time.perf_counter() - start
    print(f"Mentored decoding on one LLM-like row (vocabulary {args.vocab}, softmax of Gaussian logits;")
    print(f"the drafter's logits are the target's plus noise). TV(p, q) = {path.tv:.4f}.")
    print(f"Lossless speculative sampling accepts 1 - TV = {1 - path.tv:.4f} of drafted tokens.\n")
    print("optimal acceptance A*(eps) = max sum min(pi, q) subject to D_f(pi || p) <= eps")
    print(f"{'divergence':>12} " + " ".join(f"{'eps=' + format(b, 'g'):>10}" for b in budgets))
    for name, acc in rows.items():
        print(f"{name:>12} " + " ".join(f"{a:10.4f}" for a in acc))
    print(f"\n({len(BUILTIN_NAMES) * len(budgets)} optimal distributions in {1e3 * elapsed:.1f} ms, sorting included.)")
    return 0


# (divergence, budget) settings of the text demo; budget 0 is lossless speculative sampling.
DEMO_SETTINGS = (("kl", 0.0), ("kl", 0.05), ("kl", 0.2), ("kl", 1.0), ("tv", 0.1), ("tv", 0.3), ("hellinger", 0.05), ("js", 0.05))


def demo(args) -> int:
    """Speculative decoding of held-out text: lossless against mentored at several budgets."""
    if args.quick:
        return quick(args)
    from . import solve
    from .textlm import demo_models, speculative_decode

    t0 = time.perf_counter()
    sys.stderr.write("training the drafter (bigram) and the target (6-gram) on Python's own documentation...\n")
    m = demo_models(args.seed)
    tok = m.tokenizer
    t_train = time.perf_counter() - t0
    stride = max(1, (m.test.size - args.prompt_len) // args.prompts)
    prompts = [m.test[i * stride : i * stride + args.prompt_len] for i in range(args.prompts)]
    n_eval = min(args.eval_tokens, m.test.size)
    ids = m.test[:n_eval]
    bar = _Bar(len(DEMO_SETTINGS) * args.prompts * args.new_tokens + 2 * n_eval, "held-out probabilities")
    P = m.target.probs_along(ids)
    bar.update(n_eval)
    Q = m.drafter.probs_along(ids)
    bar.update(n_eval, "decoding")
    rows = []
    for div, budget in DEMO_SETTINGS:
        bar.update(0, f"decoding {div} eps={budget:g}")
        st = speculative_decode(
            m.drafter, m.target, prompts, new_tokens=args.new_tokens, k=args.k, divergence=div, budget=budget, seed=args.seed,
            progress=lambda n: bar.update(min(n, args.new_tokens)),
        )
        pi = solve(P, Q, divergence=div, budget=budget).pi
        nll = lambda x: float(-np.mean(np.log2(x[np.arange(n_eval), ids])))  # noqa: E731
        rows.append((div, budget, st, nll(pi), nll(P), nll(Q)))
        last = st
    bar.update(bar.total, "done")
    bar.close()
    elapsed = time.perf_counter() - t0

    print(f"Speculative decoding of Python's documentation, character level (vocabulary {tok.V}).")
    print(f"drafter q: {m.drafter.order}-gram, target p: {m.target.order}-gram (interpolated Kneser-Ney), trained on")
    print(f"{m.train.size:,} characters of pydoc topics and stdlib docstrings; {args.prompts} held-out prompts of {args.prompt_len}")
    print(f"characters, {args.new_tokens} new characters each, k = {args.k} drafts per target pass.")
    print(f"log-loss: bits per character on {n_eval:,} held-out characters. eps = 0 is lossless speculative sampling.\n")
    head = f"{'divergence':>10} {'eps':>6} {'accept':>7} {'acc.len':>7} {'passes/tok':>10} {'bits(pi)':>9} {'bits(p)':>8} {'bits(q)':>8}"
    print(head)
    for div, budget, st, b_pi, b_p, b_q in rows:
        name = "lossless" if budget == 0 else div
        print(
            f"{name:>10} {budget:6g} {st.acceptance:7.3f} {st.mean_accepted:7.3f} {st.passes_per_token:10.3f} "
            f"{b_pi:9.4f} {b_p:8.4f} {b_q:8.4f}"
        )
    print("\naccept: accepted / verified drafts; acc.len: accepted drafts per target pass (each pass emits one")
    print("more token); passes/tok: target forward passes per generated character (1 without speculation).")
    print(f"\nSample ({DEMO_SETTINGS[-1][0]} eps={DEMO_SETTINGS[-1][1]:g}): {tok.decode(prompts[0])[-40:]!r} -> {tok.decode(last.tokens[0])[:60]!r}")
    print(f"\n(training {t_train:.1f} s; total {elapsed:.1f} s)")
    return 0


def _load_pair(args):
    p = np.load(args.target)
    q = np.load(args.draft)
    return p, q


def _emit(args, records: list[dict], columns: list[str]) -> None:
    if args.json:
        print(json.dumps(records if len(records) != 1 else records[0], indent=2))
        return
    print(" ".join(f"{c:>12}" for c in columns))
    for r in records:
        print(" ".join(f"{r[c]:12d}" if isinstance(r[c], int) else f"{r[c]:12.6g}" for c in columns))


def _budget_or_acceptance(args):
    if (args.budget is None) == (args.acceptance is None):
        raise SystemExit("give exactly one of --budget and --acceptance")
    return ({"budget": args.budget} if args.budget is not None else {"acceptance": args.acceptance})


def cmd_solve(args) -> int:
    """Optimal verifiers for rows of target and draft (.npy, shape (n,) or (B, n))."""
    from . import solve

    p, q = _load_pair(args)
    sol = solve(p, q, divergence=args.divergence, **_budget_or_acceptance(args), normalize=args.normalize)
    pi = np.atleast_2d(sol.pi)
    P, Q = np.atleast_2d(p).astype(np.float64), np.atleast_2d(q).astype(np.float64)
    fields = ("acceptance", "divergence", "s", "t_lo", "t_hi", "lam", "mu")
    vals = {f: np.atleast_1d(getattr(sol, f)) for f in fields}
    records = []
    for r in range(pi.shape[0]):
        rec = {"row": r, "lossless": float(np.minimum(P[r] / P[r].sum(), Q[r] / Q[r].sum()).sum())}
        rec.update({f: float(vals[f][r]) for f in fields})
        records.append(rec)
    if args.out:
        np.save(args.out, sol.pi)
    _emit(args, records, ["row", "lossless", "acceptance", "divergence", "s", "t_lo", "t_hi"])
    return 0


def cmd_frontier(args) -> int:
    """Optimal acceptance against budget, averaged over rows, for each divergence; writes a plot."""
    from . import solve

    p, q = _load_pair(args)
    P, Q = np.atleast_2d(p), np.atleast_2d(q)
    budgets = np.asarray(args.budgets if args.budgets else np.r_[0.0, np.geomspace(1e-4, 1.0, 25)], dtype=np.float64)
    table = {}
    for div in args.divergences:
        table[div] = [float(np.mean(solve(P, Q, divergence=div, budget=b, normalize=args.normalize).acceptance)) for b in budgets]
    if args.json:
        print(json.dumps({"budgets": budgets.tolist(), "acceptance": table}, indent=2))
    else:
        print(f"{'eps':>10} " + " ".join(f"{d:>11}" for d in table))
        for i, b in enumerate(budgets):
            print(f"{b:10.4g} " + " ".join(f"{table[d][i]:11.6f}" for d in table))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for d, acc in table.items():
            ax.plot(budgets, acc, marker=".", label=d)
        ax.set_xscale("symlog", linthresh=max(float(budgets[budgets > 0].min()) if np.any(budgets > 0) else 1e-4, 1e-12))
        ax.set_xlabel("budget ε  (D_f(π‖p) ≤ ε)")
        ax.set_ylabel("optimal acceptance Σ min(π, q)")
        ax.set_title(f"mentored frontier ({P.shape[0]} row{'s' if P.shape[0] > 1 else ''})")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        plt.close(fig)
        if not args.json:
            print(f"\nplot written to {args.plot}")
    return 0


def cmd_certify(args) -> int:
    """Certify each row of π against MD(f, ε); exit status 1 if any row fails."""
    from . import certify

    p, q = _load_pair(args)
    pi = np.load(args.pi)
    P, Q, PI = (np.atleast_2d(x).astype(np.float64) for x in (p, q, pi))
    if not (P.shape == Q.shape == PI.shape):
        raise SystemExit(f"target, draft and pi must have one shape, got {P.shape}, {Q.shape}, {PI.shape}")
    records = []
    for r in range(P.shape[0]):
        c = certify(P[r], Q[r], PI[r], args.divergence, args.budget, exact=args.exact, tol=args.tol)
        records.append(
            {"row": r, "ok": int(bool(c.ok)), "acceptance": float(c.acceptance), "dual_bound": float(c.dual_bound), "gap": float(c.gap),
             "budget_residual": float(c.budget_residual), "simplex_residual": float(c.simplex_residual)}
        )
    _emit(args, records, ["row", "ok", "acceptance", "dual_bound", "gap", "budget_residual", "simplex_residual"])
    return 0 if all(r["ok"] for r in records) else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mentored", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="speculative decoding of held-out text, lossless and mentored")
    d.add_argument("--quick", action="store_true", help="only the acceptance-against-budget table on one LLM-like row")
    d.add_argument("--vocab", type=int, default=32000, help="(--quick) vocabulary size")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--prompts", type=int, default=24)
    d.add_argument("--prompt-len", type=int, default=64)
    d.add_argument("--new-tokens", type=int, default=128)
    d.add_argument("--k", type=int, default=4, help="drafts per target pass")
    d.add_argument("--eval-tokens", type=int, default=20000, help="held-out characters for the log-loss")
    d.set_defaults(run=demo)

    def pair(sp):
        sp.add_argument("target", help=".npy file, target rows p, shape (n,) or (B, n)")
        sp.add_argument("draft", help=".npy file, drafter rows q, same shape")
        sp.add_argument("--normalize", action="store_true", help="renormalise rows that do not sum to 1")
        sp.add_argument("--json", action="store_true", help="print JSON instead of a table")

    s = sub.add_parser("solve", help="optimal verifiers for rows read from .npy files")
    pair(s)
    s.add_argument("--divergence", default="kl", choices=BUILTIN_NAMES)
    s.add_argument("--budget", type=float)
    s.add_argument("--acceptance", type=float)
    s.add_argument("--out", help="write π to this .npy file")
    s.set_defaults(run=cmd_solve)

    f = sub.add_parser("frontier", help="optimal acceptance against budget, with a plot")
    pair(f)
    f.add_argument("--divergences", nargs="+", default=["tv", "kl", "hellinger"], choices=BUILTIN_NAMES)
    f.add_argument("--budgets", nargs="+", type=float, help="default: 0 and 25 log-spaced values in [1e-4, 1]")
    f.add_argument("--plot", default="frontier.png", help="output image (empty string: no plot)")
    f.set_defaults(run=cmd_frontier)

    c = sub.add_parser("certify", help="check a given π against MD(f, ε)")
    pair(c)
    c.add_argument("pi", help=".npy file, the π to check, same shape")
    c.add_argument("--divergence", default="kl", choices=BUILTIN_NAMES)
    c.add_argument("--budget", type=float, required=True)
    c.add_argument("--tol", type=float, default=1e-7, help="accepted duality gap")
    c.add_argument("--exact", action="store_true", help="exact rational / interval arithmetic")
    c.set_defaults(run=cmd_certify)

    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, TypeError, OSError) as exc:
        parser.exit(2, f"python -m mentored {args.command}: error: {exc}\n")


if __name__ == "__main__":
    sys.exit(main())
