#!/usr/bin/env python3
"""Per-divergence facts for the seven built-in f-divergences of `mentored`.

For each f (generator of D_f(pi||p) = sum p f(pi/p) + f_inf * sum_{p=0} pi):
  * f(1) = 0, and the second-order expansion at t = 1 (f'(1), f''(1));
  * the closed form of f' used by the solver (lambda, mu), its limits
    f'(0+) and f'(inf) = f_inf (f_inf bounds every subgradient: the
    hypothesis `Hfinf` of Optimality.v);
  * f_inf = lim f(t)/t and f(0) = lim_{t->0+} f(t) (table of docs/theory.md);
  * convexity: f'' >= 0 on (0, inf), proved with z3 (tv: Jensen with z3);
  * f(t) - f'(1)(t - 1) >= 0 (the shifted generator of Monotone.v);
  * the convex conjugate f*(y) = sup_{t >= 0} (y t - f(t)) and its domain:
    symbolically (stationarity + value, or boundary maximiser) and
    numerically against a dense supremum; outside the domain the sup is
    shown to be unbounded.

The generators f are the package's own (its registry, mentored/divergences.py); sympy, z3, numpy
and mpmath check the facts.  Exit status is non-zero on any
failure.
"""
import sys

import numpy as np
import sympy as sp
import z3

import mentored

t = sp.Symbol("t", positive=True)
y = sp.Symbol("y", real=True)
h = sp.Symbol("h", real=True)
LOG2 = sp.log(2)
HALF = sp.Rational(1, 2)

FAILURES = []


def check(cond, msg):
    if cond:
        print("  ok   ", msg)
    else:
        print("  FAIL ", msg)
        FAILURES.append(msg)


def simp_eq(a, b):
    d = sp.simplify(sp.expand_log(sp.simplify(a - b), force=True))
    return d == 0


# The claims of the per-divergence table of proofs/README.md about each built-in's f, which is taken
# from the package itself (mentored.divergence(name).builtin.source, the registry's definition):
# name: f' (closed form; for tv a subgradient selection away from 1),
#       f_inf, f(0), f'(1) or None, f''(1) or None,
#       conjugate pieces [(condition on y, stationary t*(y) or None for a
#       boundary maximiser at t=0, closed form)], domain upper bound y_max,
#       whether y_max itself is in the domain (and the value there)
DIVS = {
    "tv": dict(
        fp=None,
        finf=HALF, f0=HALF, fp1=None, f2_1=None,
        ymax=HALF, ymax_in=True,
        fstar=lambda yy: sp.Max(yy, -HALF),
    ),
    "kl": dict(
        fp=sp.log(t) + 1,
        finf=sp.oo, f0=sp.Integer(0), fp1=1, f2_1=1,
        ymax=sp.oo, ymax_in=False,
        fstar=lambda yy: sp.exp(yy - 1),
        tstar=sp.exp(y - 1),
    ),
    "reverse_kl": dict(
        fp=-1 / t,
        finf=sp.Integer(0), f0=sp.oo, fp1=-1, f2_1=1,
        ymax=sp.Integer(0), ymax_in=False,
        fstar=lambda yy: -1 - sp.log(-yy),
        tstar=-1 / y,
    ),
    "chi2": dict(
        fp=2 * (t - 1),
        finf=sp.oo, f0=sp.Integer(1), fp1=0, f2_1=2,
        ymax=sp.oo, ymax_in=False,
        fstar=lambda yy: sp.Piecewise((-1, yy < -2), (yy + yy**2 / 4, True)),
        tstar=1 + y / 2, tstar_valid=lambda yy: yy >= -2,
    ),
    "neyman_chi2": dict(
        fp=1 - 1 / t**2,
        finf=sp.Integer(1), f0=sp.oo, fp1=0, f2_1=2,
        ymax=sp.Integer(1), ymax_in=True, yval_at_max=sp.Integer(2),
        fstar=lambda yy: 2 - 2 * sp.sqrt(1 - yy),
        tstar=1 / sp.sqrt(1 - y),
    ),
    "hellinger": dict(
        fp=1 - 1 / sp.sqrt(t),
        finf=sp.Integer(1), f0=sp.Integer(1), fp1=0, f2_1=HALF,
        ymax=sp.Integer(1), ymax_in=False,
        fstar=lambda yy: yy / (1 - yy),
        tstar=1 / (1 - y) ** 2,
    ),
    "js": dict(
        fp=HALF * sp.log(2 * t / (1 + t)),
        finf=HALF * LOG2, f0=HALF * LOG2, fp1=0, f2_1=sp.Rational(1, 4),
        ymax=HALF * LOG2, ymax_in=False,
        fstar=lambda yy: -HALF * sp.log(2 - sp.exp(2 * yy)),
        tstar=sp.exp(2 * y) / (2 - sp.exp(2 * y)),
    ),
}

# f'' as rational functions of u where t = u**2 (u > 0), for z3
F2_IN_U = {
    "kl": lambda u: 1 / (u * u),
    "reverse_kl": lambda u: 1 / (u * u * u * u),
    "chi2": lambda u: z3.RealVal(2),
    "neyman_chi2": lambda u: 2 / (u * u * u * u * u * u),
    "hellinger": lambda u: 1 / (2 * u * u * u),
    "js": lambda u: 1 / (2 * u * u * (1 + u * u)),
}


def z3_valid(claim, *hyps):
    s = z3.Solver()
    s.set("timeout", 20000)
    s.add(*hyps)
    s.add(z3.Not(claim))
    return s.check() == z3.unsat


def f_numeric(name, tt):
    """numpy evaluation of the package's f on an array tt >= 0 (f(0) by its limit)."""
    return mentored.divergence(name).f(np.asarray(tt, dtype=float))


def numeric_sup(name, yv, tmax=1e6):
    """sup_{0 <= t <= tmax} (y t - f(t)) on a dense grid, refined twice."""
    grid = np.concatenate([
        [0.0],
        np.logspace(-12, np.log10(tmax), 400001),
        np.linspace(0, 50, 200001),
    ])
    grid = np.unique(grid)
    vals = yv * grid - f_numeric(name, grid)
    k = int(np.nanargmax(vals))
    best = vals[k]
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    for _ in range(3):
        g2 = np.linspace(lo, hi, 20001)
        v2 = yv * g2 - f_numeric(name, g2)
        k2 = int(np.nanargmax(v2))
        best = max(best, v2[k2])
        step = (hi - lo) / 20000
        lo, hi = max(g2[k2] - step, 0.0), g2[k2] + step
    return best


def check_divergence(name, d):
    print(f"[{name}]")
    f = d["f"]
    # f(1) = 0
    check(sp.simplify(f.subs(t, 1)) == 0, f"{name}: f(1) = 0")
    # f_inf and f(0)
    finf = sp.limit(f / t, t, sp.oo)
    check(sp.simplify(finf - d["finf"]) == 0 if d["finf"] != sp.oo else finf == sp.oo,
          f"{name}: f_inf = {d['finf']} (got {finf})")
    f0 = sp.limit(f, t, 0, "+")
    check(sp.simplify(f0 - d["f0"]) == 0 if d["f0"] != sp.oo else f0 == sp.oo,
          f"{name}: f(0) = {d['f0']} (got {f0})")

    if name == "tv":
        # one-sided derivatives and subdifferential at 1
        fl = sp.limit((f.subs(t, 1 + h) - f.subs(t, 1)) / h, h, 0, "-")
        fr = sp.limit((f.subs(t, 1 + h) - f.subs(t, 1)) / h, h, 0, "+")
        check(fl == -HALF and fr == HALF,
              "tv: f'(1-) = -1/2, f'(1+) = 1/2 (subdifferential [-1/2, 1/2]; f''(1) undefined)")
        # convexity via Jensen, by z3
        a, b, lm = z3.Reals("a b lm")
        ftv = lambda x: z3.If(x >= 1, (x - 1) / 2, (1 - x) / 2)
        check(z3_valid(ftv(lm * a + (1 - lm) * b) <= lm * ftv(a) + (1 - lm) * ftv(b),
                       a >= 0, b >= 0, lm >= 0, lm <= 1),
              "tv: convex on [0, inf) (z3, Jensen)")
        # subgradient selection: sign(t-1)/2 with any value of [-1/2,1/2] at 1
        x0, yy, g = z3.Reals("x0 yy g")
        sel = z3.If(x0 > 1, z3.RealVal(0.5), z3.If(x0 < 1, z3.RealVal(-0.5), g))
        check(z3_valid(ftv(yy) >= ftv(x0) + sel * (yy - x0),
                       x0 >= 0, yy >= 0, g >= -0.5, g <= 0.5),
              "tv: supporting lines f(y) >= f(x) + g(x)(y - x) with g = sign(x-1)/2 (any g in [-1/2,1/2] at 1)")
        check(z3_valid(sel <= 0.5, g >= -0.5, g <= 0.5),
              "tv: every subgradient <= f_inf = 1/2")
        check(z3_valid(ftv(yy) >= 0, yy >= 0), "tv: f >= 0 = f(1) (minimum at 1)")
    else:
        fp = sp.diff(f, t)
        check(simp_eq(fp, d["fp"]), f"{name}: f'(t) = {d['fp']}")
        f2 = sp.simplify(sp.diff(f, t, 2))
        check(sp.simplify(f2.subs(t, 1) - d["f2_1"]) == 0,
              f"{name}: f''(1) = {d['f2_1']}")
        check(sp.simplify(fp.subs(t, 1) - d["fp1"]) == 0, f"{name}: f'(1) = {d['fp1']}")
        ser = sp.series(f.subs(t, 1 + h), h, 0, 3).removeO()
        expect = d["fp1"] * h + sp.Rational(1, 2) * d["f2_1"] * h**2
        check(sp.simplify(ser - expect) == 0,
              f"{name}: f(1+h) = {d['fp1']} h + {sp.Rational(1, 2) * d['f2_1']} h^2 + O(h^3)")
        # f'' >= 0 on (0, inf): symbolic form, then z3 on the rational form in u = sqrt t
        u = sp.Symbol("u", positive=True)
        uz = z3.Real("u")
        f2u = F2_IN_U[name](uz)
        f2u_sym = F2_IN_U[name](u) if name != "chi2" else sp.Integer(2)
        check(sp.simplify(f2.subs(t, u**2) - f2u_sym) == 0,
              f"{name}: f''(t) = {sp.simplify(f2)}")
        check(z3_valid(f2u >= 0, uz > 0), f"{name}: f'' >= 0 on (0, inf) (z3)")
        tt = np.logspace(-6, 6, 2001)
        f2n = sp.lambdify(t, f2, "numpy")(tt) * np.ones_like(tt)
        check(bool(np.all(f2n >= 0)), f"{name}: f'' >= 0 on a log grid (numeric)")
        # limits of f': f'(inf) = f_inf bounds every subgradient
        lim_inf = sp.limit(fp, t, sp.oo)
        check((lim_inf == d["finf"]) or sp.simplify(lim_inf - d["finf"]) == 0,
              f"{name}: lim f'(t) as t->inf = f_inf = {d['finf']}")
        # f'' >= 0 makes f' nondecreasing, so f' <= lim f' = f_inf everywhere
        # shifted generator f(t) - f'(1)(t-1) >= 0 (minimum 0 at t = 1)
        ft = f - d["fp1"] * (t - 1)
        ftn = sp.lambdify(t, ft, "numpy")(tt)
        check(bool(np.all(ftn >= -1e-12)) and sp.simplify(sp.diff(ft, t).subs(t, 1)) == 0,
              f"{name}: f(t) - f'(1)(t-1) >= 0, stationary at 1 (convex => global min)")

    # ---------------- convex conjugate ----------------
    fstar = d["fstar"]
    if name == "tv":
        # on y <= 1/2, y t - f(t) is piecewise linear with slopes y+1/2 on
        # [0,1] and y-1/2 on [1,inf): maximiser t=1 (value y) when
        # y >= -1/2, t=0 (value -1/2) when y < -1/2; y > 1/2: unbounded.
        yz, tz = z3.Reals("yz tz")
        ftv = lambda x: z3.If(x >= 1, (x - 1) / 2, (1 - x) / 2)
        fs = z3.If(yz >= -0.5, yz, z3.RealVal(-0.5))
        check(z3_valid(yz * tz - ftv(tz) <= fs, tz >= 0, yz <= 0.5),
              "tv: y t - f(t) <= max(y, -1/2) for y <= 1/2, t >= 0 (z3)")
        check(z3_valid(z3.Or(yz * 1 - ftv(z3.RealVal(1)) == fs, yz * 0 - ftv(z3.RealVal(0)) == fs),
                       yz <= 0.5),
              "tv: the bound is attained (t = 1 or t = 0)")
    else:
        ts = d["tstar"]
        valid = d.get("tstar_valid", lambda yy: True)
        # stationarity f'(t*) = y and value y t* - f(t*) = f*(y), on the
        # part of the domain where t* >= 0 is the maximiser (concavity of
        # y t - f(t) makes a stationary point the global maximiser)
        fp = sp.diff(f, t)
        yv_samples = [sp.Rational(k, 7) for k in range(-40, 8)]
        ok_stat, ok_val = True, True
        ysym = sp.Symbol("ysym", real=True)
        for yv in yv_samples:
            if d["ymax"] != sp.oo and (yv >= d["ymax"]):
                continue
            if not valid(yv):
                continue
            tv_ = ts.subs(y, yv)
            if not (sp.N(tv_) >= 0):
                ok_stat = False
                continue
            st = sp.N(fp.subs(t, tv_) - yv, 30)
            val = sp.N(yv * tv_ - f.subs(t, tv_) - fstar(yv), 30)
            ok_stat &= abs(st) < 1e-25
            ok_val &= abs(val) < 1e-25
        check(ok_stat, f"{name}: f'(t*(y)) = y at the stationary point t*(y) = {ts}")
        check(ok_val, f"{name}: y t* - f(t*) = f*(y) (closed form)")
        # symbolic identity, parametrised by the maximiser t > 0: with
        # y = f'(t), the stationary point formula returns t and
        # f*(f'(t)) = t f'(t) - f(t).  As t ranges over (0, inf), f'(t)
        # sweeps the open interval (f'(0+), f_inf): the interior of the
        # domain where the maximiser is interior.
        yt = fp
        e1 = sp.simplify(sp.expand_log(sp.simplify(ts.subs(y, yt) - t), force=True))
        e2 = sp.simplify(sp.expand_log(sp.simplify(fstar(yt) - (t * yt - f)), force=True))
        if name == "chi2":
            e2 = sp.simplify(yt + yt**2 / 4 - (t * yt - f))
        check(e1 == 0 and e2 == 0,
              f"{name}: t*(f'(t)) = t and f*(f'(t)) = t f'(t) - f(t) symbolically (t > 0)")
        lo = sp.limit(fp, t, 0, "+")
        hi = sp.limit(fp, t, sp.oo)
        print(f"         f' maps (0, inf) onto ({lo}, {hi}); domain of f*: y {'<=' if d['ymax_in'] else '<'} {d['ymax']}")
        check(hi == d["ymax"] or sp.simplify(hi - d["ymax"]) == 0,
              f"{name}: sup of f' = f_inf = upper end of dom f*")
        if name == "chi2":
            # for y < -2 the derivative y - f'(t) = y - 2(t-1) < 0 on t >= 0:
            # maximiser t = 0, value -f(0) = -1
            yz, tz = z3.Reals("yz tz")
            check(z3_valid(yz - 2 * (tz - 1) < 0, yz < -2, tz >= 0),
                  "chi2: for y < -2 the maximiser is t = 0, f*(y) = -1 (z3)")
    # numeric: dense sup vs closed form, inside the domain
    ys = [-6.0, -3.0, -2.5, -2.0, -1.0, -0.5, -0.25, 0.0, 0.1, 0.3, 0.34, 0.45, 0.5, 0.9, 1.0, 2.0]
    worst = 0.0
    for yv in ys:
        ymax = float(d["ymax"]) if d["ymax"] != sp.oo else np.inf
        inside = yv < ymax - 1e-9 or (d["ymax_in"] and abs(yv - ymax) < 1e-12)
        if name == "reverse_kl" and yv >= 0:
            inside = False
        if inside:
            if d["ymax_in"] and abs(yv - ymax) < 1e-12 and name != "tv":
                closed = float(d["yval_at_max"])
                tmax = 1e8
            else:
                closed = float(sp.N(fstar(sp.nsimplify(yv))))
                tmax = 1e6
            num = numeric_sup(name, yv, tmax=tmax)
            err = closed - num
            tol = 1e-5 * max(1.0, abs(closed)) if not (d["ymax_in"] and abs(yv - ymax) < 1e-12 and name != "tv") else 1e-5
            if err < -1e-9 or err > tol:
                check(False, f"{name}: f*({yv}) closed {closed} vs dense sup {num}")
            worst = max(worst, abs(err))
        else:
            s1 = numeric_sup(name, yv, tmax=1e3)
            s2 = numeric_sup(name, yv, tmax=1e6)
            if not (s2 > s1 + 1.0 and s2 > 10.0) and not (name == "js" and yv > 0.34):
                check(False, f"{name}: f*({yv}) should be +inf (sup grows: {s1} -> {s2})")
            if name == "js" and yv > 0.34:
                # y slightly above f_inf = log(2)/2 ~ 0.3466: linear growth, slower
                s3 = numeric_sup(name, yv, tmax=1e6)
                if not (s3 > 1e3):
                    check(False, f"{name}: f*({yv}) should be +inf (got {s3})")
    check(True, f"{name}: closed-form conjugate matches dense numeric sup (max err {worst:.2e}); "
                f"domain y {'<=' if d['ymax_in'] else '<'} {d['ymax']}")


def main():
    for name in mentored.BUILTIN_NAMES:
        if name not in DIVS:
            # A built-in without a row in the table: its fields are checked against sympy by
            # tests/test_divergences.py; the closed forms of the table are optional documentation.
            print(f"[{name}] no closed-form row in the table (checked by tests/test_divergences.py)")
            continue
        d = dict(DIVS[name], f=mentored.divergence(name).builtin.source(t))
        check_divergence(name, d)
    print()
    if FAILURES:
        print(f"{len(FAILURES)} FAILURE(S):")
        for m in FAILURES:
            print("  -", m)
        return 1
    print("divergences_check: all per-divergence facts verified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
