// Draft trees: the verifier of every node of a tree of drafts, and the walk that samples from it,
// for host memory (docs/serving.md, "Draft trees"). mentored.serving.tree_sample on numpy arrays is
// one call of tree_batch.
//
// A request is a tree of n nodes in topological order: node 0 the root (the last accepted token),
// parent[j] < j for j ≥ 1, and row j of p the target after node j's path. At node v with children c
// (distinct tokens x_c, weights w_c) the verifier π_v maximises Σ_c w_c π(x_c) subject to
// D_f(π‖p_v) ≤ ε. By data processing π/p_v is constant on each child's token and on the rest (the
// complement, weight 0), so π_v is fixed by k + 1 class masses m_j, with P_j = p_v(class j)/Σp_v:
//
//     max Σ_j w_j m_j   s.t.  Σ_j m_j = 1,   Σ_{P_j > 0} P_j f̃(m_j/P_j) + f̃∞ Σ_{P_j = 0} m_j ≤ ε
//
// (keep: m_j = 0 where P_j = 0). Objective "acceptance": w_c = 1, the set verifier: the children
// S get m* = onehot_pi_x at p_x = P(S) (the token-only verifier of speculative.hpp is |S| = 1),
// spread over S in proportion to p (all on the first child where P(S) = 0). "length": w_c = 1 +
// A(c), A(leaf) = 0, A(v) = Σ_c w_c m_c the expected number of accepted tokens from v, bottom-up.
// Children of equal weights are the set verifier; otherwise
//   tv (linear): move min(ε, the mass below the top weight) from the lowest weights up (the
//       complement first) to the highest weight, in proportion to P within a weight;
//   the other built-ins (strictly convex): stationarity f̃'(m_j/P_j) = σ − θ(w_top − w_j), θ = 1/λ
//       and σ the top class's f̃', so each level is (f̃')⁻¹ of that. For each θ, σ makes Σ m = 1 (a
//       root in the top class's mass); a class with P = 0 above the top weight (continue, f∞ < ∞)
//       takes the rest once σ reaches f̃∞ − θ(w_z − w_top). The divergence increases with θ (θ = 0:
//       π = p; θ = ∞: everything on the top), and a root in log₂ θ stops it at ε (root_below, to
//       the last bit; the torch path bisects both, a fixed number of times).
// The walk: at v, the first child c with u0 < m_1 + … + m_c is accepted (land); otherwise, and at
// a leaf, the token is drawn from p_v without the children's tokens, renormalised (inverse CDF at
// u1): its law is π_v. Greedy requests accept the child that is argmax p_v (first maximum) and emit
// argmax p_v. A chain (parent j − 1) is rejection_sample with draft_probs = None, decision for
// decision: the same test (land), the same draw, and the same π_x (onehot_pi_x).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <variant>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "generators.hpp"
#include "speculative.hpp"

namespace mentored {

constexpr double kLog2ThetaRange = 1100.0;  // θ from 2⁻¹¹⁰⁰ = 0 (π = p) to 2¹¹⁰⁰ = ∞ (all on the top)
constexpr int kRootSteps = 400;             // a bound on root_below's steps; it stops at the last bit
// The complement's target mass is 1 − Σ_c P_c from this up (its absolute error, that of the row's
// sum, is then a small relative one); below, it is summed over the complement, where 1 − Σ_c P_c
// would have lost its digits (and rounds a complement below an ulp of 1 to 0).
constexpr double kRestDirect = 0x1p-10;

// The last x in [lo, hi] with F(x) ≤ 0, for F nondecreasing with fl = F(lo) ≤ 0 < fh = F(hi), to
// the last bit: regula falsi with Illinois' halving of the end kept twice, and a halving of the
// bracket whenever two steps have not halved it (so at most ~3 steps a bit; about ten in all where
// F is smooth).
template <class Fn>
double root_below(const Fn& F, double lo, double hi, double fl, double fh) {
  int kept = 0, stale = 0;
  for (int i = 0; i < kRootSteps; ++i) {
    double x = stale >= 2 ? lo + 0.5 * (hi - lo) : lo - fl * ((hi - lo) / (fh - fl));
    if (!(x > lo && x < hi)) x = lo + 0.5 * (hi - lo);
    if (!(x > lo && x < hi)) break;  // no double between them
    const double width = hi - lo, fx = F(x);
    if (fx <= 0.0) {
      lo = x, fl = fx;
      if (kept < 0) fh *= 0.5;
      kept = -1;
    } else {
      hi = x, fh = fx;
      if (kept > 0) fl *= 0.5;
      kept = 1;
    }
    stale = hi - lo > 0.5 * width ? stale + 1 : 0;
  }
  return lo;
}

// The set verifier: m* = onehot_pi_x(P(S)) on the children (at a price: onehot_pi_x_price), 1 − m*
// on the complement.
template <class F>
void set_masses(const F& f, const double* P, std::size_t n, double eps, bool keep, double* m, bool price = false) {
  double PS = 0.0;
  for (std::size_t c = 1; c < n; ++c) PS += P[c];
  PS = std::min(PS, 1.0);  // rounding of the sum
  const double a = price ? onehot_pi_x_price(f, PS, eps, keep) : onehot_pi_x(f, PS, eps, keep);
  m[0] = 1.0 - a;
  for (std::size_t c = 1; c < n; ++c) m[c] = PS > 0.0 ? a * (P[c] / PS) : 0.0;  // P_c/P(S) = 1 for one child: m = a exactly
  if (!(PS > 0.0) && n > 1) m[1] = a;
}

// tv's linear program (see the top of this file). done: scratch of n flags. At a price λ (eps = ∞,
// price = λ): moving a unit of mass from weight w to the top gains w_top − w and costs λ (D_tv grows
// by the mass moved, to a class with P = 0 too: f̃∞ = ½ plus ½ at the source), so every class with
// w_top − w ≥ λ is drained (at equality, the largest optimum, as solve's tv rule at λ = 1) and no
// other: the drain stops at the first weight with w_top − w < λ. price = 0: budgets alone.
inline void tv_masses(const double* P, const double* w, std::size_t n, double eps, bool keep, double* m, std::vector<char>& done,
                      double price = 0.0) {
  std::copy(P, P + n, m);
  double w_max = -kInf;
  for (std::size_t j = 0; j < n; ++j)
    if ((P[j] > 0.0 || !keep) && w[j] > w_max) w_max = w[j];
  double PT = 0.0, R = 0.0;
  std::size_t first = n;
  for (std::size_t j = 0; j < n; ++j) {
    const bool top = (P[j] > 0.0 || !keep) && w[j] == w_max;
    if (top && first == n) first = j;
    if (top) PT += P[j];
    else R += P[j];
  }
  const double delta = std::min(eps, R);
  if (!(delta > 0.0)) return;
  done.assign(n, 0);
  double left = delta;  // what is still to move; at a price the drain may stop short of delta = R
  while (left > 0.0) {  // the lowest weight still holding mass, drained first
    double w_min = kInf, G = 0.0;
    for (std::size_t j = 0; j < n; ++j)
      if (!done[j] && P[j] > 0.0 && w[j] != w_max && w[j] < w_min) w_min = w[j];
    if (w_min == kInf || w_max - w_min < price) break;
    for (std::size_t j = 0; j < n; ++j)
      if (!done[j] && P[j] > 0.0 && w[j] == w_min) G += P[j];
    const double take = std::min(left, G);
    for (std::size_t j = 0; j < n; ++j)
      if (!done[j] && P[j] > 0.0 && w[j] == w_min) {
        m[j] = take < G ? P[j] - take * (P[j] / G) : 0.0;
        done[j] = 1;
      }
    left -= take;
  }
  const double moved = price > 0.0 ? delta - left : delta;  // a budget moves all of delta (left is rounding)
  for (std::size_t j = 0; j < n; ++j)
    if ((P[j] > 0.0 || !keep) && w[j] == w_max) m[j] = PT > 0.0 ? P[j] + moved * (P[j] / PT) : (j == first ? moved : 0.0);
}

// The weighted problem of a strictly convex built-in (see the top of this file). d: scratch of n.
// price: eps is a price λ, the objective Σ_j w_j m_j − λ·D_f(π‖p) (docs/theory.md §4), whose
// stationarity w_j − λ f̃'(m_j/P_j) = μ is the budget's with its multiplier fixed: θ = 1/λ, no root.
inline void kkt_masses(const BuiltinF& f, const double* P, const double* w, std::size_t n, double eps, bool keep, double* m,
                       std::vector<double>& d, bool price = false) {
  double w_top = -kInf;
  for (std::size_t j = 0; j < n; ++j)
    if (P[j] > 0.0 && w[j] > w_top) w_top = w[j];
  double PT = 0.0;
  bool others = false;
  d.assign(n, 0.0);  // w_top − w_j on the target's support; −1 off it
  for (std::size_t j = 0; j < n; ++j) {
    d[j] = P[j] > 0.0 ? w_top - w[j] : -1.0;
    if (P[j] > 0.0 && d[j] == 0.0) PT += P[j];
    others = others || d[j] > 0.0;
  }
  std::size_t z = n;  // the class with P = 0 that may take mass: the highest weight above the top
  if (!keep && f.f_inf < kInf)
    for (std::size_t j = 0; j < n; ++j)
      if (!(P[j] > 0.0) && w[j] > w_top && (z == n || w[j] > w[z])) z = j;
  std::copy(P, P + n, m);
  if (!others && z == n) return;  // all the target's mass is on the top weight already
  const double f_inf = f.f_inf;
  // Masses at θ into mm; returns D_f(π‖p) of them.
  const auto at = [&](double theta, double* mm) {
    const auto total = [&](double mT) {
      const double s = f.df(mT / PT);
      double t = mT;
      for (std::size_t j = 0; j < n; ++j)
        if (d[j] > 0.0) t += P[j] * f.dfinv(s - theta * d[j]);
      return t;
    };
    const double f1 = total(1.0) - 1.0;
    double mT = f1 <= 0.0 ? 1.0 : root_below([&](double x) { return total(x) - 1.0; }, PT, 1.0, total(PT) - 1.0, f1);
    if (z < n) mT = std::min(mT, PT * f.dfinv(f_inf - theta * (w[z] - w_top)));
    const double s = f.df(mT / PT);
    double D = 0.0, sum = 0.0;
    for (std::size_t j = 0; j < n; ++j) {
      mm[j] = d[j] == 0.0 ? P[j] * (mT / PT) : d[j] > 0.0 ? P[j] * f.dfinv(s - theta * d[j]) : 0.0;
      if (P[j] > 0.0) D += perspective(f, mm[j], P[j]);
      sum += mm[j];
    }
    if (z < n) {
      mm[z] = std::max(1.0 - sum, 0.0);
      D += f_inf * mm[z];
    }
    return D;
  };
  const double top = price ? 0.0 : at(kInf, m) - eps;
  if (price) {
    at(eps > 0.0 ? 1.0 / eps : kInf, m);  // λ = 0: θ = ∞, everything on the top (budget ∞)
  } else if (top > 0.0) {
    const double u = root_below([&](double x) { return at(std::exp2(x), m) - eps; }, -kLog2ThetaRange, kLog2ThetaRange, -eps, top);
    at(std::exp2(u), m);
  }
  double sum = 0.0;
  for (std::size_t j = 0; j < n; ++j) sum += m[j];
  for (std::size_t j = 0; j < n; ++j) m[j] /= sum;
}

// The host layout of a batch of trees (mentored.verify.serving's plan), in O(N): from global
// parents gp [N] (−1 at roots, else gp[i] < i), each node's depth and height (0 at a leaf, else
// 1 + its highest child's), its children in node order (kids[first[v] .. first[v + 1])), and the
// nodes by height, in node order within a height (by_height[level[h] .. level[h + 1]), h ≤ the
// highest). Returns false (nothing written past the failing node) where some gp[i] ∉ [−1, i).
struct TreeLayout {
  std::vector<std::int64_t> depth, height, first, kids, by_height, level;
};

inline bool tree_layout(const std::int64_t* gp, std::size_t N, TreeLayout& L) {
  L.depth.assign(N, 0);
  L.height.assign(N, 0);
  L.first.assign(N + 1, 0);
  for (std::size_t i = 0; i < N; ++i) {
    const std::int64_t a = gp[i];
    if (a < -1 || a >= static_cast<std::int64_t>(i)) return false;
    if (a >= 0) {
      L.depth[i] = L.depth[static_cast<std::size_t>(a)] + 1;
      ++L.first[static_cast<std::size_t>(a) + 1];
    }
  }
  for (std::size_t i = 0; i < N; ++i) L.first[i + 1] += L.first[i];
  L.kids.assign(static_cast<std::size_t>(L.first[N]), 0);
  {
    std::vector<std::int64_t> fill(L.first.begin(), L.first.end() - 1);
    for (std::size_t i = 0; i < N; ++i)
      if (gp[i] >= 0) L.kids[static_cast<std::size_t>(fill[static_cast<std::size_t>(gp[i])]++)] = static_cast<std::int64_t>(i);
  }
  std::int64_t top = 0;
  for (std::size_t i = N; i-- > 0;)  // children after their parent: every child's height is final first
    if (gp[i] >= 0) {
      std::int64_t& h = L.height[static_cast<std::size_t>(gp[i])];
      h = std::max(h, L.height[i] + 1);
      top = std::max(top, h);
    }
  L.level.assign(static_cast<std::size_t>(top) + 2, 0);
  for (std::size_t i = 0; i < N; ++i) ++L.level[static_cast<std::size_t>(L.height[i]) + 1];
  for (std::size_t h = 0; h + 1 < L.level.size(); ++h) L.level[h + 1] += L.level[h];
  L.by_height.assign(N, 0);
  std::vector<std::int64_t> fill(L.level.begin(), L.level.end() - 1);
  for (std::size_t i = 0; i < N; ++i)
    L.by_height[static_cast<std::size_t>(fill[static_cast<std::size_t>(L.height[i])]++)] = static_cast<std::int64_t>(i);
  return true;
}

// Scratch of one thread.
struct TreeWork {
  std::vector<char> mark;                // [V]: the children's tokens of a node
  std::vector<std::size_t> first, kids;  // children of each node (CSR, in node order)
  std::vector<std::int64_t> depth;
  std::vector<double> sum, P, w, m, d, mass;
  std::vector<char> done;
};

// The complement's mass as a reader of the children's masses sees it, where f̃(0) = ∞ (reverse_kl,
// neyman_chi2) and the complement has target mass (P[0] > 0). The walk and the caller read the
// complement as 1 − Σ_c m_c; rounded, that sum can reach 1 (the optimum's complement can be far below
// an ulp of 1: D = ∞), or miss the solved complement m[0] by a few ulps, a large part of it where it
// is small (D past ε, by P[0]·|f̃'(m[0]/P[0])| times the miss). So where the children's sum could
// leave less than T = max(m[0], 2⁻⁵³) (solved: ε > 0) or nothing (ε = 0: m = P) in some order of
// summation (k children: k − 1 roundings of at most 2⁻⁵³·Σ each), mass moves to the complement: from
// the children above their target, in proportion to their excess, where that holds it and the
// complement stays within P[0] (each ratio m/P moves toward 1: D does not increase); otherwise
// (P[0] itself below a few ulps) by scaling the children, at a cost of at most P[0]·f̃(m_0/P[0]).
// m[0] is set to 1 − Σ_c m_c. One child is left as solved unless m_1 = 1.
inline void keep_complement(const double* P, std::size_t n, double* m, bool solved) {
  if (n < 2 || !(P[0] > 0.0)) return;
  constexpr double u = 0x1p-53;
  const auto k = static_cast<double>(n - 1);
  solved = solved && n > 2;  // one child: 1 − m_1 is read with one rounding, of a complement ≥ 1/2 or none
  const double T = solved ? std::max(m[0], u) : u;
  double S = 0.0;
  for (std::size_t c = 1; c < n; ++c) S += m[c];
  const double slack = solved ? 2.0 * (k - 1.0) * u * S : 0.0;  // twice the sum's rounding, any order
  for (int pass = 0; pass < 3 && S > 0.0 && S > 1.0 - T - slack; ++pass) {
    const double delta = S - (1.0 - T - slack - 2.0 * u);  // 2⁻⁵² more: the moved masses round too
    double E = 0.0;
    for (std::size_t c = 1; c < n; ++c) E += std::max(m[c] - P[c], 0.0);
    if (E >= delta && 1.0 - S + delta <= P[0]) {
      const double r = delta / E;
      for (std::size_t c = 1; c < n; ++c) m[c] -= r * std::max(m[c] - P[c], 0.0);
    } else {
      const double r = (S - delta) / S;
      for (std::size_t c = 1; c < n; ++c) m[c] *= r;
    }
    S = 0.0;
    for (std::size_t c = 1; c < n; ++c) S += m[c];
  }
  m[0] = 1.0 - S;
}

// The class masses of a node's verifier: P[0..n) the classes' target masses (class 0 the
// complement, summed over it where small: kRestDirect; w[0] = 0), w their weights; m receives the
// masses (Σ m = 1), the complement's as its readers see it where f̃(0) = ∞ (keep_complement).
// price: eps is a price λ ≥ 0 (Σ_j w_j m_j − λ·D_f(π‖p) maximised; λ = ∞ is budget 0, π = p).
inline void node_masses(const BuiltinF& f, const double* P, const double* w, std::size_t n, double eps, bool keep, double* m,
                        TreeWork& work, bool price = false) {
  bool equal = true;
  for (std::size_t c = 2; c < n; ++c) equal = equal && w[c] == w[1];
  const bool moves = price ? eps < kInf : eps > 0.0;  // not π = p
  if (!moves || n == 1) std::copy(P, P + n, m);
  else if (equal) set_masses(f, P, n, eps, keep, m, price);
  else if (f.g == Generator::tv) tv_masses(P, w, n, price ? kInf : eps, keep, m, work.done, price ? eps : 0.0);
  else kkt_masses(f, P, w, n, eps, keep, m, work.d, price);
  if (std::isinf(f(0.0))) keep_complement(P, n, m, moves);
}

// A batch of trees (C-contiguous): request b owns the n[b] consecutive nodes from start_b = Σ_{c<b}
// n[c] of p [N, V], token, parent (local: −1 at node 0, else in [0, j)), u [N, 2] (u0 walks the
// node's children, u1 draws its token) and given; eps [B] (eps_step = 1) or one for all (0).
// Optional (null): greedy [B], priced [B] (request b's eps is a price λ, node_masses), which [B] (the index of each request's divergence), given [N] (π of
// each node's token under its parent's verifier, for requests whose divergence is GivenF).
// length: objective "length" (else "acceptance"); rtol: the tolerance on the rows' sums.
template <class T>
struct Tree {
  const T* p = nullptr;
  const std::int64_t* token = nullptr;
  const std::int64_t* parent = nullptr;
  const std::int64_t* n = nullptr;
  const double* u = nullptr;
  const double* eps = nullptr;
  std::size_t eps_step = 0;
  const bool* greedy = nullptr;
  const bool* priced = nullptr;
  const std::int32_t* which = nullptr;
  const double* given = nullptr;
  std::size_t B = 0, V = 0;
  bool keep = false, length = false;
  double rtol = kInf;
};

using TreeF = std::variant<BuiltinF, GivenF>;

// Request b (its nodes from s): structure and rows checked, every node's verifier bottom-up into
// accept [n] (π_parent(x_j); 1 at the root) and value [n] (A(j)), then the walk into out [width]
// (−1 after the emitted token) and last (the local index of the last accepted node).
template <class T, class F, class O>
StepError tree_request(const F& f, const Tree<T>& tr, std::size_t b, std::size_t s, TreeWork& wk, O* out, std::size_t width,
                       std::int64_t& last, double* accept, double* value) {
  const std::size_t V = tr.V, n = static_cast<std::size_t>(tr.n[b]);
  const T* p = tr.p + s * V;
  const std::int64_t* token = tr.token + s;
  const std::int64_t* parent = tr.parent + s;
  const bool greedy = tr.greedy && tr.greedy[b];
  for (std::size_t j = 0; j < width; ++j) out[j] = O(-1);
  last = -1;
  for (std::size_t j = 0; j < n; ++j) {
    const std::int64_t a = parent[j];
    if (j == 0 ? a != -1 : !(a >= 0 && static_cast<std::size_t>(a) < j)) return {StepStatus::bad_parent, static_cast<std::int64_t>(j)};
    if (token[j] < 0 || static_cast<std::uint64_t>(token[j]) >= V) return {StepStatus::bad_token, static_cast<std::int64_t>(j)};
  }
  // children in node order (CSR), depths
  wk.first.assign(n + 1, 0);
  wk.kids.resize(n);
  wk.depth.assign(n, 0);
  for (std::size_t j = 1; j < n; ++j) ++wk.first[static_cast<std::size_t>(parent[j]) + 1];
  for (std::size_t j = 0; j < n; ++j) wk.first[j + 1] += wk.first[j];
  {
    std::vector<std::size_t>& fill = wk.first;  // advanced while filling, restored after
    for (std::size_t j = 1; j < n; ++j) {
      const auto a = static_cast<std::size_t>(parent[j]);
      wk.kids[fill[a]++] = j;
      wk.depth[j] = wk.depth[a] + 1;
    }
    for (std::size_t j = n; j-- > 1;) fill[j] = fill[j - 1];
    fill[0] = 0;
  }
  for (std::size_t j = 0; j < n; ++j)
    if (static_cast<std::size_t>(wk.depth[j]) >= width) return {StepStatus::bad_parent, static_cast<std::int64_t>(j)};
  wk.mark.resize(V, 0);
  for (std::size_t v = 0; v < n; ++v) {  // distinct tokens among siblings
    std::size_t dup = n;
    for (std::size_t i = wk.first[v]; i < wk.first[v + 1]; ++i) {
      char& seen = wk.mark[static_cast<std::size_t>(token[wk.kids[i]])];
      if (seen && dup == n) dup = wk.kids[i];
      seen = 1;
    }
    for (std::size_t i = wk.first[v]; i < wk.first[v + 1]; ++i) wk.mark[static_cast<std::size_t>(token[wk.kids[i]])] = 0;
    if (dup < n) return {StepStatus::duplicate_token, static_cast<std::int64_t>(dup)};
  }
  wk.sum.resize(n);
  for (std::size_t j = 0; j < n; ++j) {
    double stats[3];
    const Status c = check_row(p + j * V, V, tr.rtol, stats);
    if (c != Status::ok) return step_error(c, j, stats, nullptr);
    wk.sum[j] = stats[0];
  }
  // every node's verifier, bottom-up
  const double eps = tr.eps[b * tr.eps_step];
  for (std::size_t v = n; v-- > 0;) {
    const std::size_t c0 = wk.first[v], k = wk.first[v + 1] - c0;
    const T* pv = p + v * V;
    if (k && greedy) {
      const std::int64_t top = argmax(pv, V);
      for (std::size_t i = 0; i < k; ++i) accept[wk.kids[c0 + i]] = token[wk.kids[c0 + i]] == top ? 1.0 : 0.0;
    } else if (k && !std::is_same_v<F, GivenF>) {
      if constexpr (!std::is_same_v<F, GivenF>) {
        wk.P.resize(k + 1), wk.w.resize(k + 1), wk.m.resize(k + 1);
        double PS = 0.0;
        for (std::size_t i = 0; i < k; ++i) {
          const std::size_t c = wk.kids[c0 + i];
          wk.P[i + 1] = static_cast<double>(pv[token[c]]) / wk.sum[v];
          wk.w[i + 1] = tr.length ? 1.0 + value[c] : 1.0;
          PS += wk.P[i + 1];
        }
        wk.P[0] = 1.0 - PS;
        if (!(wk.P[0] >= kRestDirect)) {  // summed over the complement: 1 − Σ P_c has lost its digits
          for (std::size_t i = 0; i < k; ++i) wk.mark[static_cast<std::size_t>(token[wk.kids[c0 + i]])] = 1;
          double rest = 0.0;
          for (std::size_t i = 0; i < V; ++i) rest += wk.mark[i] ? 0.0 : static_cast<double>(pv[i]);
          for (std::size_t i = 0; i < k; ++i) wk.mark[static_cast<std::size_t>(token[wk.kids[c0 + i]])] = 0;
          wk.P[0] = rest / wk.sum[v];
        }
        wk.w[0] = 0.0;
        node_masses(f, wk.P.data(), wk.w.data(), k + 1, eps, tr.keep, wk.m.data(), wk, tr.priced && tr.priced[b]);
        for (std::size_t i = 0; i < k; ++i) accept[wk.kids[c0 + i]] = wk.m[i + 1];
      }
    } else {
      for (std::size_t i = 0; i < k; ++i) accept[wk.kids[c0 + i]] = tr.given[s + wk.kids[c0 + i]];
    }
    double A = 0.0;
    for (std::size_t i = 0; i < k; ++i) A += accept[wk.kids[c0 + i]] * (1.0 + value[wk.kids[c0 + i]]);
    value[v] = A;
  }
  accept[0] = 1.0;
  // the walk
  std::size_t v = 0;
  for (;;) {
    const std::size_t c0 = wk.first[v], k = wk.first[v + 1] - c0;
    wk.mass.resize(k);
    for (std::size_t i = 0; i < k; ++i) wk.mass[i] = accept[wk.kids[c0 + i]];
    const std::size_t c = land(wk.mass.data(), k, tr.u + 2 * (s + v));
    if (c == k) break;
    v = wk.kids[c0 + c];
    out[wk.depth[v] - 1] = static_cast<O>(token[v]);
  }
  const T* pv = p + v * V;
  std::int64_t y;
  if (greedy) {
    y = argmax(pv, V);
  } else {
    const std::size_t c0 = wk.first[v], k = wk.first[v + 1] - c0;
    for (std::size_t i = 0; i < k; ++i) wk.mark[static_cast<std::size_t>(token[wk.kids[c0 + i]])] = 1;
    const double u1 = tr.u[2 * (s + v) + 1];
    y = inverse_cdf([&](std::size_t i) { return wk.mark[i] ? 0.0 : static_cast<double>(pv[i]); }, V, u1);
    if (y < 0) y = inverse_cdf([&](std::size_t i) { return static_cast<double>(pv[i]); }, V, u1);
    for (std::size_t i = 0; i < k; ++i) wk.mark[static_cast<std::size_t>(token[wk.kids[c0 + i]])] = 0;
  }
  out[wk.depth[v]] = static_cast<O>(y);
  last = static_cast<std::int64_t>(v);
  return {};
}

// All requests, divergence divs[which[b]] for request b; out [B, width], last [B], accept and value
// [N]. Returns the first request that failed (B if none) and its error (position: the local node).
// OpenMP over requests on nt threads, each with its own scratch.
template <class T, class O>
std::size_t tree_batch(const Tree<T>& tr, const std::vector<TreeF>& divs, int nt, O* out, std::size_t width, std::int64_t* last,
                       double* accept, double* value, StepError& error) {
  const std::size_t B = tr.B;
  std::vector<std::size_t> start(B + 1, 0);
  for (std::size_t b = 0; b < B; ++b) start[b + 1] = start[b] + static_cast<std::size_t>(tr.n[b]);
  std::vector<StepError> errors(B);
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
  {
    TreeWork wk;
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
    for (long long bb = 0; bb < static_cast<long long>(B); ++bb) {
      const std::size_t b = static_cast<std::size_t>(bb), s = start[b];
      const TreeF& f = divs[tr.which ? static_cast<std::size_t>(tr.which[b]) : 0];
      errors[b] = std::visit(
          [&](const auto& g) { return tree_request(g, tr, b, s, wk, out + b * width, width, last[b], accept + s, value + s); }, f);
    }
  }
  (void)nt;
  for (std::size_t b = 0; b < B; ++b)
    if (errors[b].status != StepStatus::ok) {
      error = errors[b];
      return b;
    }
  return B;
}

}  // namespace mentored
