"""Quality study: when mentored decoding beats the target in log-loss (docs/theory.md §6).

    python benchmarks/quality_study.py [--out benchmarks/quality] [--rows 300] [--seed 0] [--no-text]
    python benchmarks/quality_study.py --figure-only     # redraw the figures from --out's results.json

Part 1, synthetic truths. A truth d = softmax(z), z ~ N(0, 2²) over n = 50 tokens; the target
p = softmax(z + σ_A ξ_A) and the drafter q = softmax(z + σ_B ξ_B) err independently (ξ ~ N(0, 1)).
For each (σ_A, σ_B) it measures the log-loss gain E_d[log π − log p] against the kl budget, the
quality-optimal point (mentored.analysis.quality.quality_optimal_budget), and how often the edge
d(U) − p(U) predicts the sign of the gain at a small budget.

Part 2, approximation error. Median relative error of the small-budget formulas of docs/theory.md §6
(A − (1 − TV), D_f at the exact s, gain) against the exact curve, for the seven divergences at
ε = 1e-2 … 1e-6, on the σ_A = σ_B = 1 rows.

Part 3, real text. The demo models (mentored.demo.textlm.demo_models: a 6-gram target, a bigram drafter,
characters of Python's bundled docs): held-out log-loss of π, p and q across budgets; per bucket of
target entropy (cut on the validation split) the validation edge against the test gain; a gate that
mentors only in buckets with a positive validation edge, at the validation-best budget.

Writes synthetic_gain.png, edge_sign.png, approximation.png, text_logloss.png, text_edge.png and
results.json (the numbers the figures plot) and prints the tables quoted in docs/quality.md.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import mentored
from mentored.analysis import quality as Q
from mentored.demo.plotting import divergence_color, save_figure

SOURCE = "benchmarks/quality_study.py"  # recorded in each figure (mentored.demo.plotting.save_figure)

DIVS = mentored.BUILTIN_NAMES  # tv, kl, reverse_kl, chi2, neyman_chi2, hellinger, js
SIGMAS_A = (0.5, 1.0)
SIGMAS_B = (0.25, 0.5, 1.0, 2.0)
N = 50
KL_BUDGETS = np.geomspace(1e-5, 3.0, 40)
APPROX_EPS = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6)
APPROX_MARKERS = {"kl": "o", "reverse_kl": "s", "chi2": "^", "neyman_chi2": "v", "hellinger": "D", "js": "P"}
EDGE_SIGN = (1.0, (0.5, 2.0))  # σ_A and the σ_B whose rows edge_sign.png plots


def softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def synthetic_rows(rng, rows, sigma_a, sigma_b, n=N, copy=False):
    """(p, q, d); ``copy``: the drafter is a noisier copy of the target (q = softmax(z + σ_A ξ_A + σ_B ξ_B))."""
    z = rng.normal(0.0, 2.0, size=(rows, n))
    d = softmax(z)
    za = z + sigma_a * rng.normal(size=(rows, n))
    p = softmax(za)
    q = softmax((za if copy else z) + sigma_b * rng.normal(size=(rows, n)))
    return p, q, d


def gains_vs_budget(p, q, d, div, budgets):
    """(len(budgets), rows): the gain of every row at every budget (one batched solve per budget)."""
    return np.array([Q.log_loss_gain(p, q, d, divergence=div, budget=b) for b in budgets])


# ------------------------------------------------------------------------------------------------
# Part 1


def part_synthetic(rng, rows):
    print("\n== Part 1: synthetic truths (n = 50; d = softmax(z), p, q = softmax(z + σ ξ)) ==")
    head = (
        f"{'drafter':>7} {'σ_A':>4} {'σ_B':>5} | {'edge':>7} {'P(edge>0)':>9} | {'gain@ε=1e-3':>11} {'P(gain>0)':>9} "
        f"{'sign agrees':>11} | {'best gain':>9} {'best ε_kl':>9} {'ΔA at best':>10} | {'gain π=q':>8}"
    )
    print(head)
    print("-" * len(head))
    curves, scatter = {}, {}
    for copy, sa, sb in [(False, a, b) for a in SIGMAS_A for b in SIGMAS_B] + [(True, 1.0, b) for b in SIGMAS_B]:
        if True:
            p, q, d = synthetic_rows(rng, rows, sa, sb, copy=copy)
            e = Q.edge(p, q, d)
            g_small = Q.log_loss_gain(p, q, d, divergence="kl", budget=1e-3)
            g = gains_vs_budget(p, q, d, "kl", KL_BUDGETS)
            best = [Q.quality_optimal_budget(p[r], q[r], d[r], divergence="kl") for r in range(rows)]
            g_best = np.array([b.gain for b in best])
            eps_best = np.array([b.budget for b in best])
            d_acc = np.array([b.acceptance for b in best]) - (1 - 0.5 * np.abs(p - q).sum(axis=1))
            g_q = np.sum(d * (np.log(q) - np.log(p)), axis=1)
            agree = np.mean(np.sign(e) == np.sign(g_small))
            curves[(copy, sa, sb)] = g.mean(axis=1)
            scatter[(copy, sa, sb)] = (e, g_small)
            print(
                f"{'copy' if copy else 'indep':>7} {sa:4.2f} {sb:5.2f} | {e.mean():7.4f} {np.mean(e > 0):9.2f} | {g_small.mean():11.5f} "
                f"{np.mean(g_small > 0):9.2f} {agree:11.3f} | {g_best.mean():9.4f} {np.median(eps_best):9.4f} "
                f"{d_acc.mean():10.4f} | {g_q.mean():8.4f}"
            )
    print("edge, gains: means over rows (nats); best = quality_optimal_budget per row (median ε_kl); "
          "ΔA = acceptance gained over lossless there; gain π=q = E_d[log q − log p];\n"
          "indep: q = softmax(z + σ_B ξ_B) errs independently of p; copy: q = softmax(z + σ_A ξ_A + σ_B ξ_B) is a noisier copy of p")
    return curves, scatter


def plot_synthetic(curves, scatter, out):
    import matplotlib.pyplot as plt

    panels = [(False, sa, f"independent drafter, target noise σ_A = {sa}") for sa in SIGMAS_A]
    panels.append((True, 1.0, "drafter = noisier copy of the target (σ_A = 1)"))
    fig, ax = plt.subplots(1, len(panels), figsize=(15, 4), sharey=True)
    for k, (copy, sa, title) in enumerate(panels):
        for sb in SIGMAS_B:
            # dashed: the copy drafters' σ_B = 1 and 2 curves coincide until they leave the axes
            ax[k].semilogx(KL_BUDGETS, curves[(copy, sa, sb)], "--" if sb == SIGMAS_B[-1] else "-", label=f"σ_B = {sb}")
        ax[k].axhline(0, color="k", lw=0.8)
        ax[k].set_title(title, fontsize=9)
        ax[k].set_xlabel("kl budget ε")
    ax[0].set_ylabel("mean log-loss gain E_d[log π − log p] (nats)")
    ax[0].legend(title="drafter noise")
    ax[2].set_ylim(-0.3, 0.45)
    fig.suptitle("Synthetic truths: mentoring helps when the drafter errs differently from the target, not when it is a degraded copy")
    fig.tight_layout()
    save_figure(fig, os.path.join(out, "synthetic_gain.png"), source=SOURCE)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    for (copy, sa, sb), (e, g) in scatter.items():
        if sa == EDGE_SIGN[0] and sb in EDGE_SIGN[1]:
            ax.scatter(e, g, s=6, alpha=0.5, label=f"{'copy' if copy else 'independent'}, σ_B = {sb}")
    ax.axhline(0, color="k", lw=0.8)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel("edge d(U) − p(U)")
    ax.set_ylabel("gain at kl budget 1e-3 (nats)")
    ax.set_title(f"σ_A = {EDGE_SIGN[0]:g}: the edge predicts the sign\nof the small-budget gain")
    ax.legend(markerscale=3)
    fig.tight_layout()
    save_figure(fig, os.path.join(out, "edge_sign.png"), source=SOURCE)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------
# Part 2


def part_approximation(rng, rows):
    print("\n== Part 2: small-budget approximations vs the exact curve (σ_A = σ_B = 1, n = 50) ==")
    print("median over rows of |approx − exact| / |exact| for A − (1 − TV) (= error of s), D_f(π(s)), gain")
    p, q, d = synthetic_rows(rng, rows, 1.0, 1.0)
    table = {}
    head = f"{'divergence':>12} {'f″(1)':>6} {'quantity':>12} " + " ".join(f"{e:>9.0e}" for e in APPROX_EPS) + "  ratio/decade"
    print(head)
    print("-" * len(head))
    lossless = 1 - 0.5 * np.abs(p - q).sum(axis=1)
    for div in DIVS:
        if div == "tv":
            sols = [mentored.solve(p, q, divergence="tv", budget=e) for e in APPROX_EPS]
            err = [np.median(np.abs((s.acceptance - lossless) - e) / e) for s, e in zip(sols, APPROX_EPS)]
            print(f"{div:>12} {'—':>6} {'A−(1−TV)':>12} " + " ".join(f"{x:9.1e}" for x in err) + "  exact: A = 1 − TV + ε")
            table[div] = {"A": err}
            continue
        rel = {"A": [], "D": [], "gain": []}
        for e in APPROX_EPS:
            sb = Q.small_budget(p, q, e, divergence=div, truth=d)
            rel["A"].append(np.median(np.abs(sb.s - sb.s_exact) / sb.s_exact))
            rel["D"].append(np.median(np.abs(sb.divergence - sb.divergence_exact) / sb.divergence_exact))
            rel["gain"].append(np.median(np.abs(sb.gain - sb.gain_exact) / np.abs(sb.gain_exact)))
        table[div] = rel
        f2 = mentored.divergence(div).f2_at_1
        for name, label in (("A", "A−(1−TV)"), ("D", "D_f"), ("gain", "gain")):
            v = rel[name]
            slope = (v[-2] / v[-1]) if v[-1] > 0 else float("nan")
            print(f"{div if name == 'A' else '':>12} {f2 if name == 'A' else '':>6} {label:>12} "
                  + " ".join(f"{x:9.1e}" for x in v) + f"  {slope:8.2f}")
    print("ratio/decade: error at ε = 1e-5 over error at 1e-6; O(√ε) predicts √10 ≈ 3.16 (chi2: exact before "
          "the first ratio breakpoint, so only rounding remains)")
    return table


def plot_approximation(table, out):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(13, 4))
    eps = np.array(APPROX_EPS)
    for k, (name, label) in enumerate((("A", "A − (1 − TV)  (i.e. s)"), ("D", "D_f at exact s"), ("gain", "log-loss gain"))):
        for div, rel in table.items():
            if name in rel and div != "tv":
                # the smooth divergences' errors nearly coincide: open markers of different shapes keep each visible
                ax[k].loglog(eps, np.maximum(rel[name], 1e-17), marker=APPROX_MARKERS[div], ms=6, mfc="none", lw=1,
                             color=divergence_color(div), label=div)
        ax[k].loglog(eps, 0.5 * np.sqrt(eps / eps[0]) * 0.1, "k--", lw=0.8, label="∝ √ε")
        ax[k].set_title(f"relative error: {label}")
        ax[k].set_xlabel("budget ε")
    ax[0].legend(fontsize=7)
    fig.suptitle("Small-budget approximations (docs/theory.md §6): error O(√ε); chi2 exact below the first breakpoint; tv exactly linear")
    fig.tight_layout()
    save_figure(fig, os.path.join(out, "approximation.png"), source=SOURCE)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------
# Part 3


TEXT_BUDGETS = np.array([0.0, 1e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0])
TEXT_DIVS = ("tv", "kl", "reverse_kl", "hellinger", "js", "chi2", "neyman_chi2")
BUCKETS = 10


def entropy(p):
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.sum(np.where(p > 0, p * np.log(p), 0.0), axis=1)


def text_data(seed):
    from mentored.demo.textlm import demo_models

    m = demo_models(seed)
    split = {}
    for name, ids in (("valid", m.valid), ("test", m.test)):
        # position 0 has no context; both models give laws for every later position
        p = m.target.probs_along(ids)[1:]
        q = m.drafter.probs_along(ids)[1:]
        split[name] = (p, q, ids[1:])
    return m, split


def part_text(seed):
    print("\n== Part 3: real text — demo models (target 6-gram, drafter bigram, characters) ==")
    t0 = time.time()
    m, split = text_data(seed)
    (pv, qv, yv), (pt, qt, yt) = split["valid"], split["test"]
    rows = np.arange(yt.size)
    nll_p = -np.mean(np.log(pt[rows, yt]))
    nll_q = -np.mean(np.log(qt[rows, yt]))
    print(f"V = {m.tokenizer.V}; valid {yv.size} chars, test {yt.size} chars (models + laws in {time.time() - t0:.1f} s)")
    print(f"held-out log-loss (nats/char): target p {nll_p:.4f}, drafter q {nll_q:.4f}; "
          f"lossless acceptance 1 − TV = {1 - 0.5 * np.abs(pt - qt).sum(axis=1).mean():.4f}")
    print(f"edge d(U) − p(U), mean over positions: valid {Q.edge(pv, qv, yv).mean():+.5f}, test {Q.edge(pt, qt, yt).mean():+.5f}")

    # Log-loss of π across budgets, all divergences.
    head = f"{'divergence':>12} | " + " ".join(f"{b:>8g}" for b in TEXT_BUDGETS) + "   (test log-loss gain, nats/char ×1e3; acceptance)"
    print(head)
    print("-" * len(head))
    logloss, accept = {}, {}
    for div in TEXT_DIVS:
        gains, accs = [], []
        for b in TEXT_BUDGETS:
            sol = mentored.solve(pt, qt, divergence=div, budget=b)
            gains.append(np.mean(Q.log_loss_gain(pt, qt, yt, solution=sol)))
            accs.append(np.mean(sol.acceptance))
        logloss[div] = nll_p - np.array(gains)
        accept[div] = np.array(accs)
        print(f"{div:>12} | " + " ".join(f"{1e3 * g:+8.3f}" for g in gains))
        print(f"{'':>12} | " + " ".join(f"{a:8.4f}" for a in accs))

    # Buckets of target entropy: the validation edge against the test gain.
    cuts = np.quantile(entropy(pv), np.linspace(0, 1, BUCKETS + 1)[1:-1])
    bv, bt = np.digitize(entropy(pv), cuts), np.digitize(entropy(pt), cuts)
    ev = Q.edge(pv, qv, yv)
    print("\nPer bucket of target entropy H(p) (deciles cut on valid): validation edge vs test gain (kl)")
    bud = TEXT_BUDGETS[1:]
    sol_t = {b: Q.log_loss_gain(pt, qt, yt, divergence="kl", budget=b) for b in bud}
    sol_v = {b: Q.log_loss_gain(pv, qv, yv, divergence="kl", budget=b) for b in bud}
    head = f"{'bucket':>6} {'H range':>13} {'edge_val':>9} {'edge_test':>9} | " + " ".join(f"{b:>8g}" for b in bud) + "   (test gain ×1e3)"
    print(head)
    print("-" * len(head))
    edges, tgains = [], []
    agree = {b: 0 for b in bud}
    for k in range(BUCKETS):
        mv, mt = bv == k, bt == k
        e_val, e_test = ev[mv].mean(), Q.edge(pt[mt], qt[mt], yt[mt]).mean()
        g = [sol_t[b][mt].mean() for b in bud]
        for b, gb in zip(bud, g):
            agree[b] += np.sign(gb) == np.sign(e_val)
        edges.append(e_val)
        tgains.append(g)
        lo = -np.inf if k == 0 else cuts[k - 1]
        hi = np.inf if k == BUCKETS - 1 else cuts[k]
        print(f"{k:6d} {lo:6.2f}–{hi:<6.2f} {e_val:+9.4f} {e_test:+9.4f} | " + " ".join(f"{1e3 * x:+8.3f}" for x in g))
    print("sign(validation edge) = sign(test gain), buckets out of " + str(BUCKETS) + ": "
          + ", ".join(f"ε={b:g}: {agree[b]}" for b in bud))

    # A gate from validation only: mentor in buckets with a positive validation edge, at the budget
    # that maximises the bucket's validation gain; elsewhere verify losslessly (π = p).
    gate_gain = np.zeros(yt.size)
    chosen = []
    for k in range(BUCKETS):
        mv, mt = bv == k, bt == k
        if edges[k] <= 0:
            chosen.append(0.0)
            continue
        vg = [sol_v[b][mv].mean() for b in bud]
        b = bud[int(np.argmax(vg))] if max(vg) > 0 else 0.0
        chosen.append(b)
        if b > 0:
            gate_gain[mt] = sol_t[b][mt]
    print(f"gate (validation-chosen kl budget per bucket: {', '.join(f'{c:g}' for c in chosen)}): "
          f"test gain {1e3 * gate_gain.mean():+.3f} ×1e-3 nats/char "
          f"(log-loss {nll_p - gate_gain.mean():.4f} vs target {nll_p:.4f})")
    return dict(nll_p=nll_p, nll_q=nll_q, logloss=logloss, accept=accept, edges=np.array(edges),
                tgains=np.array(tgains), bud=bud)


def plot_text(res, out):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(12, 4.2))
    x = np.where(TEXT_BUDGETS > 0, TEXT_BUDGETS, 3e-5)
    for div, ll in res["logloss"].items():
        ax[0].semilogx(x, ll, marker="o", ms=3, color=divergence_color(div), label=f"π ({div})")
        ax[1].plot(res["accept"][div], ll, marker="o", ms=3, color=divergence_color(div), label=div)
    for a in ax:
        a.axhline(res["nll_p"], color="k", ls="--", lw=1, label="target p")
    ax[0].axhline(res["nll_q"], color="gray", ls=":", lw=1, label="drafter q")
    ax[0].set_xlabel("budget ε (0 plotted at 3e-5)")
    ax[0].set_ylabel("held-out log-loss (nats/char)")
    ax[0].legend(fontsize=7)
    ax[1].set_xlabel("mean acceptance")
    ax[1].set_title("log-loss against speed")
    fig.suptitle("Demo models on held-out text: mentoring the 6-gram by the bigram lowers log-loss at small budgets, not at large ones")
    fig.tight_layout()
    save_figure(fig, os.path.join(out, "text_logloss.png"), source=SOURCE)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    shown = res["bud"][:5]
    for j, b in enumerate(shown):  # budgets in order: a sequential colour map
        ax.scatter(res["edges"], res["tgains"][:, j], s=14, color=plt.cm.viridis(j / max(len(shown) - 1, 1)), label=f"kl ε = {b:g}")
    ax.axhline(0, color="k", lw=0.8)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel("validation edge, per entropy bucket")
    ax.set_ylabel("test gain (nats/char)")
    ax.set_yscale("symlog", linthresh=1e-4)
    top = float(np.max(res["tgains"][:, : len(shown)]))
    if top > 0:
        ax.set_ylim(top=3 * top)  # symlog's autoscale leaves no room above the highest points
    ax.set_title("Demo models: each bucket of target entropy,\nits validation edge and its test gain")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, os.path.join(out, "text_edge.png"), source=SOURCE)
    plt.close(fig)


def save_results(path, curves, scatter, table, text):
    """The numbers the figures plot, as JSON: each setting (drafter, σ_A, σ_B) with its mean gain curve
    and, where edge_sign.png plots it, each row's (edge, gain at kl 1e-3); the approximation errors; part 3's curves."""

    def listed(x):
        return np.asarray(x, dtype=float).tolist()

    settings = []
    for (copy, sa, sb), g in curves.items():
        row = dict(copy=copy, sigma_a=sa, sigma_b=sb, mean_gain=listed(g))
        if (copy, sa, sb) in scatter:
            row["edge"], row["gain_small"] = (listed(x) for x in scatter[(copy, sa, sb)])
        settings.append(row)
    out = dict(kl_budgets=listed(KL_BUDGETS), settings=settings, approx_eps=list(APPROX_EPS),
               approximation={div: {k: listed(v) for k, v in rel.items()} for div, rel in table.items()})
    if text is not None:
        out["text"] = dict(budgets=listed(TEXT_BUDGETS), nll_p=float(text["nll_p"]), nll_q=float(text["nll_q"]),
                           logloss={d: listed(v) for d, v in text["logloss"].items()},
                           accept={d: listed(v) for d, v in text["accept"].items()},
                           edges=listed(text["edges"]), tgains=np.asarray(text["tgains"], dtype=float).tolist(), bud=listed(text["bud"]))
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


def load_results(path):
    """(curves, scatter, table, text or None) as the parts return them, from save_results's file."""
    with open(path) as f:
        saved = json.load(f)
    if not np.allclose(saved["kl_budgets"], KL_BUDGETS) or tuple(saved["approx_eps"]) != APPROX_EPS:
        raise SystemExit(f"{path}: written with other budgets than this script's; run the study again (without --figure-only)")
    curves, scatter = {}, {}
    for row in saved["settings"]:
        key = (row["copy"], row["sigma_a"], row["sigma_b"])
        curves[key] = np.array(row["mean_gain"])
        if "edge" in row:
            scatter[key] = (np.array(row["edge"]), np.array(row["gain_small"]))
    table = {div: {k: list(v) for k, v in rel.items()} for div, rel in saved["approximation"].items()}
    text = saved.get("text")
    if text is not None:
        if not np.allclose(text["budgets"], TEXT_BUDGETS):
            raise SystemExit(f"{path}: written with other text budgets than this script's; run the study again (without --figure-only)")
        text = dict(nll_p=text["nll_p"], nll_q=text["nll_q"], logloss={d: np.array(v) for d, v in text["logloss"].items()},
                    accept={d: np.array(v) for d, v in text["accept"].items()}, edges=np.array(text["edges"]),
                    tgains=np.array(text["tgains"]), bud=np.array(text["bud"]))
    return curves, scatter, table, text


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "quality"))
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-text", action="store_true", help="skip part 3 (the demo models)")
    ap.add_argument("--figure-only", action="store_true", help="redraw the figures from --out's results.json (seconds)")
    args = ap.parse_args()
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("this benchmark draws figures, which needs matplotlib: pip install matplotlib") from None

    matplotlib.use("Agg")
    results = os.path.join(args.out, "results.json")
    if args.figure_only:
        curves, scatter, table, text = load_results(results)
    else:
        os.makedirs(args.out, exist_ok=True)
        rng = np.random.default_rng(args.seed)
        t0 = time.time()
        curves, scatter = part_synthetic(rng, args.rows)
        # only the settings edge_sign.png plots keep their rows
        scatter = {key: v for key, v in scatter.items() if key[1] == EDGE_SIGN[0] and key[2] in EDGE_SIGN[1]}
        table = part_approximation(rng, args.rows)
        text = None if args.no_text else part_text(args.seed)
        save_results(results, curves, scatter, table, text)
        print(f"\n{time.time() - t0:.1f} s; results in {results}")
    plot_synthetic(curves, scatter, args.out)
    plot_approximation(table, args.out)
    if text is not None:
        plot_text(text, args.out)
    print(f"figures in {args.out}")


if __name__ == "__main__":
    main()
