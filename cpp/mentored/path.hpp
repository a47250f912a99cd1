// The divergence-independent structure of mentored decoding (docs/theory.md §3–4).
//
// For one row (target p, drafter q) every optimum of
//     MD(f, ε):  max Σ min(π_i, q_i)  s.t.  D_f(π‖p) ≤ ε,  π in the simplex
// lies on one curve s ↦ π(s), s = TV(π, p):
//     π_i(s) = p_i · clip(q_i/p_i, t_lo(s), t_hi(s))          (p_i > 0)
//     π_i(s) = q_i · max(0, s − D_up) / Q0                     (p_i = 0, continuation)
// with Down(t_lo) = Up(t_hi) = s. Sorting the ratios r = q/p once makes Down and Up piecewise
// affine with known breakpoints (proofs/README.md, "piecewise-linear inversion"), so
//     thresholds at s: O(log n);  π(s): O(n);  D_f(π(s)‖p) from suffix sums: O(1) per segment.
// The largest s with D_f(π(s)‖p) ≤ ε is found by a binary search over segment starts (D is
// nondecreasing in s: proofs, "monotonicity") and a bisection inside the segment found.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <vector>

#include "generators.hpp"

namespace mentored {

enum class Status : int {
  ok = 0,
  zero_row = 1,     // a row of p or q sums to zero
  bad_value = 2,    // NaN, ±inf or a negative entry
  unreachable = 3,  // requested acceptance exceeds the end of the curve
  off_sum = 4,      // a row sums to 1 only beyond the caller's tolerance (solve_row)
};

// Suffix sums of p_j f(r_j) along each sorted side: the one divergence-dependent table.
struct Table {
  std::vector<double> lower;  // lower[k] = Σ_{j≥k} p_j f(r_j) over the ascending lower side
  std::vector<double> upper;  // upper[m] = Σ_{j≥m} p_j f(r_j) over the descending upper side
  double f_inf = kInf;
};

// A point of the curve: s, its thresholds, and the segment it lies on.
struct Point {
  double s = 0.0;
  double t_lo = 1.0;
  double t_hi = 1.0;
  std::size_t segment = 0;
  // t_hi past DBL_MAX (a target token with a denormal p_i and q_i/p_i beyond DBL_MAX is still
  // clipped): then t_hi = ∞ and hi_scaled = t_hi·2⁻¹²⁸ (generators.hpp); 0 otherwise. Not the
  // continuation onto {p = 0}, which has t_hi = ∞ and hi_scaled = 0.
  double hi_scaled = 0.0;
  // The factor and threshold of the upper clip p_i·t_hi, computed as (p_i·hi_pre)·hi_mul: exact
  // where t_hi is a double (hi_pre = 1), and without overflow past DBL_MAX (hi_pre = 2¹²⁸).
  double hi_pre() const { return hi_scaled > 0.0 ? kHugeUp : 1.0; }
  double hi_mul() const { return hi_scaled > 0.0 ? hi_scaled : t_hi; }
};

// A threshold t > 1 from its scaled form u = t·2⁻¹²⁸ into a Point: t_hi = t where t is a double.
inline void set_upper(Point& x, double u) {
  const double t = u * kHugeUp;
  if (t < kInf) {
    x.t_hi = t;
    x.hi_scaled = 0.0;
  } else {
    x.t_hi = kInf;
    x.hi_scaled = u;
  }
}

// u = t·2⁻¹²⁸ for t = num/den > 1 (num, den > 0), without overflow: the scaled double of t, the
// same bits as t·2⁻¹²⁸ wherever t is a double.
inline double scaled_quotient(double num, double den) {
  const double t = num / den;
  return t < kInf ? t * kHugeDown : (num * kHugeDown) / den;
}

// f̃'(t) from one side (side > 0: from the right; t = ∞ gives f̃∞), for the price search: a built-in's
// own, written without cancellation near 1 (generators.hpp). A generator the core cannot differentiate
// (a user's program or callable) gets a second-order one-sided difference of f̃, with a step relative
// to |t − 1|: there f̃' is about f̃''·(t − 1), so the quotient keeps its relative accuracy (~1e-8) down
// to thresholds next to 1, and at t = 1 it gives the one-sided derivative of a kink.
template <class F>
auto slope_of(const F& f, double t, int side, int) -> decltype(f.df(t), double()) {
  return generator_df(f.g, t, side);
}
template <class F>
double slope_of(const F& f, double t, int side, long) {
  if (!(t < kInf)) return f.f_inf;
  double h = std::max(1e-4 * std::fabs(t - 1.0), 1e-8);
  if (side <= 0) h = std::min(h, 1e-3 * t);  // stay inside (0, ∞): f̃ may be infinite at 0
  if (!(h > 0.0)) side = 1, h = 1e-8;       // t = 0: from the right, the only side there is
  const double d = side > 0 ? h : -h;
  return (4.0 * f(t + d) - 3.0 * f(t) - f(t + 2.0 * d)) / (2.0 * d);
}

// D'(s⁺) = f̃'(t_hi⁺) − f̃'(t_lo⁻) at a point of the curve: the divergence one more unit of s costs,
// nondecreasing in s (t_hi grows, t_lo falls, f̃' is nondecreasing; docs/theory.md §4, "Budgets by
// price"). On the continuation t_hi = ∞ and the cost is f̃∞ − f̃'(t_lo); t_hi past DBL_MAX reads as ∞.
template <class F>
double marginal_cost(const F& f, const Point& x) {
  return slope_of(f, x.t_hi, 1, 0) - slope_of(f, x.t_lo, -1, 0);
}

class Path {
 public:
  // Build the structure from one row; p and q are normalised to sum 1 in float64.
  template <class T>
  Status build(const T* p, const T* q, std::size_t n);

  std::size_t size() const { return p_.size(); }
  double tv() const { return tv_; }        // TV(p, q) = Down(0)
  double d_up() const { return d_up_; }    // Up(∞) = TV(p, q) − Q0
  double q0() const { return q0_; }        // drafter mass where the target is zero
  double s_end() const { return s_end_; }  // end of the curve, continuation included
  // The last s of finite divergence: the continuation onto {p = 0} costs f∞ per unit.
  double s_max(double f_inf) const { return std::isinf(f_inf) ? std::min(s_end_, d_up_) : s_end_; }

  Point at(double s) const;

  // π(s) in the original token order; returns Σ min(π_i, q_i) (a compensated sum).
  template <class T>
  double build_pi(const Point& x, T* out) const;

  // Σ min(π_i, q_i) at a point in O(1), as a sum of nonnegative parts, so accurate however small:
  // lower tokens and ties give q_i, unclipped upper tokens q_i, clipped ones t_hi·p_i, {p = 0} z·q_i.
  // (1 − TV + s, its value on the curve, cancels when it is small.)
  double acceptance(const Point& x) const {
    if (x.s <= 0.0) return std::min(a0_, 1.0);
    const std::size_t m = segments_[x.segment].m;
    const double z = x.s > d_up_ && q0_ > 0.0 ? std::min((x.s - d_up_) / q0_, 1.0) : 0.0;
    const double clipped = m > 0 ? (P_hi_[m] * x.hi_pre()) * x.hi_mul() : 0.0;
    return std::min(((Q_lo_.back() + q_eq_) + Qs_hi_[m]) + clipped + z * q0_, 1.0);
  }

  template <class F>
  void tabulate(const F& f, Table& tab) const;

  // D_f(π(s)‖p) at a point (O(1)).
  template <class F>
  double divergence(const Table& tab, const F& f, const Point& x) const {
    return divergence_on(tab, f, x.segment, x.s);
  }

  // The largest s ≤ s_max(f∞) with D_f(π(s)‖p) ≤ budget.
  template <class F>
  Point solve_budget(const Table& tab, const F& f, double budget) const;

  // The optimum of max A(π) − price·D_f(π‖p), price in (0, ∞): the largest s ≤ s_max(f∞) where
  // price·D'(s⁺) ≤ 1 (marginal_cost), or s_max where that holds up to the end.
  template <class F>
  Point solve_price(const Table& tab, const F& f, double price) const;

 private:
  struct Segment {
    double start;   // s where the segment starts
    std::size_t k;  // lower tokens clipped at t_lo (the first k of the ascending side)
    std::size_t m;  // upper tokens clipped at t_hi (the first m of the descending side); 0: t_hi = ∞
  };

  double t_lo_on(const Segment& g, double s) const;
  double t_hi_on(const Segment& g, double s) const;
  Point point_on(std::size_t j, double s) const;
  template <class F>
  double divergence_on(const Table& tab, const F& f, std::size_t j, double s) const;

  std::vector<double> p_, q_;  // the normalised row
  // Tokens of {p = 0}, the target's zeros. A tiny p_i > 0 is a target token whatever its ratio:
  // q_i/p_i beyond DBL_MAX (a denormal p_i) is carried scaled on the upper side (below).
  bool outside(std::size_t i) const { return p_[i] == 0.0; }
  // Lower side {p > 0, r < 1} ascending, upper side {p > 0, r > 1} descending; prefix sums have
  // one more entry than the side: P[k] = Σ_{j<k} p_j. The upper side's ratios are held scaled,
  // r_hi_[j] = r·2⁻¹²⁸ (generators.hpp, kHugeDown), so that those past DBL_MAX keep their order and
  // value; every product r·P is taken as r_hi_·(P·2¹²⁸), the same bits where r is a double.
  std::vector<double> r_lo_, p_lo_, P_lo_, Q_lo_;
  std::vector<double> r_hi_, p_hi_, P_hi_, Q_hi_;
  std::vector<double> Qs_hi_;       // suffix sums of q on the upper side: Qs_hi_[m] = Σ_{j≥m} q_j
  double q_eq_ = 0.0, a0_ = 0.0;    // Σ q over ties q_i = p_i > 0; Σ min(p_i, q_i)
  std::vector<Segment> segments_;
  double tv_ = 0.0, d_up_ = 0.0, q0_ = 0.0, s_end_ = 0.0;
  struct Entry {
    double r, p, q;
  };
  std::vector<Entry> lo_, hi_;  // scratch for the sort
};

// ---------------------------------------------------------------------------------------------

template <class T>
Status Path::build(const T* p, const T* q, std::size_t n) {
  // Σp, Σq compensated (Neumaier): the correctly rounded sums but for near-ties, so that π(0) is
  // p/Σp itself, as the one-shot solver returns it at budget 0.
  double sp = 0.0, sq = 0.0, cp = 0.0, cq = 0.0;
  auto add = [](double& sum, double& carry, double x) {
    const double t = sum + x;
    carry += std::fabs(sum) >= std::fabs(x) ? (sum - t) + x : (x - t) + sum;
    sum = t;
  };
  for (std::size_t i = 0; i < n; ++i) {
    const double a = static_cast<double>(p[i]), b = static_cast<double>(q[i]);
    if (!(a >= 0.0) || !(b >= 0.0) || std::isinf(a) || std::isinf(b)) return Status::bad_value;
    add(sp, cp, a);
    add(sq, cq, b);
  }
  sp += cp;
  sq += cq;
  if (!(sp > 0.0) || !(sq > 0.0)) return Status::zero_row;
  // Finite entries can sum past DBL_MAX; x/∞ = 0 would silently build a different row.
  if (!(sp < kInf) || !(sq < kInf)) return Status::bad_value;

  p_.resize(n);
  q_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    p_[i] = static_cast<double>(p[i]) / sp;
    q_[i] = static_cast<double>(q[i]) / sq;
  }

  // Split by side (comparing q_i with p_i, so no ratio decides the side), then sort each side by
  // ratio. Ties keep index order, so that the structure is a function of the row alone.
  lo_.clear();
  hi_.clear();
  q0_ = 0.0;
  q_eq_ = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!outside(i) && q_[i] == p_[i]) q_eq_ += q_[i];  // ties: few, and any sum of them is exact enough
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (outside(i)) q0_ += q_[i];
    else if (q_[i] < p_[i]) lo_.push_back({q_[i] / p_[i], p_[i], q_[i]});
    else if (q_[i] > p_[i]) hi_.push_back({scaled_quotient(q_[i], p_[i]), p_[i], q_[i]});
  }
  std::stable_sort(lo_.begin(), lo_.end(), [](const Entry& a, const Entry& b) { return a.r < b.r; });
  std::stable_sort(hi_.begin(), hi_.end(), [](const Entry& a, const Entry& b) { return a.r > b.r; });
  const std::size_t n_lo = lo_.size(), n_hi = hi_.size();

  auto fill = [&add](const std::vector<Entry>& side, std::vector<double>& r, std::vector<double>& pv,
                 std::vector<double>& P, std::vector<double>& Q) {
    const std::size_t count = side.size();
    r.resize(count);
    pv.resize(count);
    P.assign(count + 1, 0.0);
    Q.assign(count + 1, 0.0);
    // Prefix sums compensated (Neumaier): each P[k], Q[k] is within an ulp or so of the exact sum
    // of its entries, however many (a plain sum drifts by up to k ulps).
    double sp = 0.0, cp = 0.0, sq = 0.0, cq = 0.0;
    for (std::size_t j = 0; j < count; ++j) {
      r[j] = side[j].r;
      pv[j] = side[j].p;
      add(sp, cp, side[j].p);
      add(sq, cq, side[j].q);
      P[j + 1] = sp + cp;
      Q[j + 1] = sq + cq;
    }
  };
  fill(lo_, r_lo_, p_lo_, P_lo_, Q_lo_);
  fill(hi_, r_hi_, p_hi_, P_hi_, Q_hi_);
  Qs_hi_.assign(n_hi + 1, 0.0);
  {
    double sum = 0.0, carry = 0.0;
    for (std::size_t j = n_hi; j-- > 0;) {
      add(sum, carry, hi_[j].q);
      Qs_hi_[j] = sum + carry;
    }
  }
  a0_ = (Q_lo_[n_lo] + q_eq_) + P_hi_[n_hi];
  // The sort's scratch is not kept for the life of the structure.
  std::vector<Entry>().swap(lo_);
  std::vector<Entry>().swap(hi_);

  tv_ = P_lo_[n_lo] - Q_lo_[n_lo];
  d_up_ = Q_hi_[n_hi] - P_hi_[n_hi];
  // Rounding can leave tv_ ≠ d_up_ + q0_ by a few ulps; the curve stops at the smaller end.
  s_end_ = q0_ > 0.0 ? tv_ : std::min(tv_, d_up_);
  if (n_hi == 0 && q0_ == 0.0) s_end_ = 0.0;
  if (n_lo == 0) s_end_ = 0.0;

  // Segment starts: Down(r_k) for the lower side, Up(r_m) for the upper side, then D_up where the
  // continuation begins. Both lists are already ascending in s; merge them.
  segments_.clear();
  std::size_t k = n_lo, m = n_hi;
  segments_.push_back({0.0, k, m});
  auto s_lo = [&](std::size_t kk) {  // Down at the kk-th ascending ratio (1-based)
    return tv_ - (r_lo_[kk - 1] * P_lo_[kk - 1] - Q_lo_[kk - 1]);
  };
  auto s_hi = [&](std::size_t mm) {  // Up at the mm-th descending ratio (1-based)
    // Up ≤ D_up always (the min guards rounding: a +∞ here once ran the merge below past k = 0;
    // found by fuzz/fuzz_core.py). The ratio is scaled (r_hi_), so that r·P stays finite.
    return std::min(d_up_ - (Q_hi_[mm - 1] - r_hi_[mm - 1] * (P_hi_[mm - 1] * kHugeUp)), d_up_);
  };
  while (k > 1 || m > 1 || (m == 1 && s_end_ > d_up_)) {
    const double a = k > 1 ? s_lo(k) : kInf;
    double b = kInf;
    if (m > 1) b = s_hi(m);
    else if (m == 1 && s_end_ > d_up_) b = d_up_;
    if (k > 1 && a <= b) {  // k > 1: never step the lower side past its first ratio
      --k;
      segments_.push_back({std::min(a, s_end_), k, m});
    } else {
      --m;
      segments_.push_back({std::min(b, s_end_), k, m});
    }
  }
  return Status::ok;
}

inline double Path::t_lo_on(const Segment& g, double s) const {
  if (g.k == 0) return 1.0;
  const double t = (tv_ - s + Q_lo_[g.k]) / P_lo_[g.k];
  const double lo = r_lo_[g.k - 1];
  const double hi = g.k < r_lo_.size() ? r_lo_[g.k] : 1.0;
  return std::min(std::max(t, lo), hi);
}

// t_hi scaled: u = t_hi·2⁻¹²⁸ (generators.hpp); g.m > 0.
inline double Path::t_hi_on(const Segment& g, double s) const {
  const double u = scaled_quotient(Q_hi_[g.m] - (d_up_ - s), P_hi_[g.m]);
  const double lo = g.m < r_hi_.size() ? r_hi_[g.m] : kHugeDown;
  const double hi = r_hi_[g.m - 1];
  return std::min(std::max(u, lo), hi);
}

inline Point Path::point_on(std::size_t j, double s) const {
  Point x;
  x.s = s;
  x.segment = j;
  if (s <= 0.0) return x;  // π = p: both thresholds at 1
  const Segment& g = segments_[j];
  x.t_lo = t_lo_on(g, s);
  if (g.m == 0) x.t_hi = r_hi_.empty() && q0_ == 0.0 ? 1.0 : kInf;
  else set_upper(x, t_hi_on(g, s));
  return x;
}

inline Point Path::at(double s) const {
  s = std::min(std::max(s, 0.0), s_end_);
  auto it = std::upper_bound(segments_.begin(), segments_.end(), s,
                             [](double v, const Segment& g) { return v < g.start; });
  return point_on(static_cast<std::size_t>(it - segments_.begin()) - 1, s);
}

template <class T>
double Path::build_pi(const Point& x, T* out) const {
  const double z = x.s > d_up_ && q0_ > 0.0 ? (x.s - d_up_) / q0_ : 0.0;
  const double lo_floor = x.t_lo > 0.0 ? std::numeric_limits<double>::denorm_min() : 0.0;
  const double hi_pre = x.hi_pre(), hi_mul = x.hi_mul();
  // Σ min(π_i, q_i) in Neumaier's compensated sum: accurate to a few ulps of itself, however small.
  double accepted = 0.0, carry = 0.0;
  for (std::size_t i = 0; i < p_.size(); ++i) {
    double v;
    if (outside(i)) {
      v = q_[i] * std::min(z, 1.0);
    } else {
      // p·clip(q/p, t_lo, t_hi), compared without forming q/p. As in kernels.hpp (pi_value): a
      // t_lo·p_i that underflows to 0 is rounded toward p_i, so π_i > 0 wherever p_i > 0 < t_lo.
      const double lo = std::max(x.t_lo * p_[i], std::min(p_[i], lo_floor)), hi = (p_[i] * hi_pre) * hi_mul;
      v = q_[i] < lo ? lo : (q_[i] > hi ? hi : q_[i]);
    }
    const double m = std::min(v, q_[i]), sum = accepted + m;
    carry += std::fabs(accepted) >= m ? (accepted - sum) + m : (m - sum) + accepted;
    accepted = sum;
    out[i] = static_cast<T>(v);
  }
  return std::min(accepted + carry, 1.0);
}

template <class F>
void Path::tabulate(const F& f, Table& tab) const {
  tab.f_inf = f.f_inf;
  tab.lower.assign(r_lo_.size() + 1, 0.0);
  for (std::size_t j = r_lo_.size(); j-- > 0;) tab.lower[j] = tab.lower[j + 1] + p_lo_[j] * f(r_lo_[j]);
  // Upper ratios are scaled: p f(r) itself where r is a double, the perspective past DBL_MAX.
  tab.upper.assign(r_hi_.size() + 1, 0.0);
  for (std::size_t j = r_hi_.size(); j-- > 0;) tab.upper[j] = tab.upper[j + 1] + term_scaled(f, p_hi_[j], r_hi_[j]);
}

template <class F>
double Path::divergence_on(const Table& tab, const F& f, std::size_t j, double s) const {
  if (s <= 0.0) return 0.0;
  const Segment& g = segments_[j];
  double d = 0.0;
  if (g.k > 0) d += P_lo_[g.k] * f(t_lo_on(g, s)) + tab.lower[g.k];
  if (g.m > 0) {
    d += term_scaled(f, P_hi_[g.m], t_hi_on(g, s)) + tab.upper[g.m];
  } else {
    d += tab.upper.empty() ? 0.0 : tab.upper[0];
    if (s > d_up_) d += tab.f_inf * (s - d_up_);
  }
  return d;
}

template <class F>
Point Path::solve_budget(const Table& tab, const F& f, double budget) const {
  const double s_max = this->s_max(tab.f_inf);
  const Point end = at(s_max);
  if (divergence(tab, f, end) <= budget) return end;

  // Segments starting before s_max, and the last of them whose start is still within budget.
  std::size_t count = static_cast<std::size_t>(
      std::upper_bound(segments_.begin(), segments_.end(), s_max,
                       [](double v, const Segment& g) { return v < g.start; }) -
      segments_.begin());
  std::size_t lo = 0, hi = count;  // D(start[lo]) ≤ budget; answer segment in [lo, hi)
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (divergence_on(tab, f, mid, segments_[mid].start) <= budget) lo = mid;
    else hi = mid;
  }
  // Bisection inside the segment: D is continuous and nondecreasing there.
  double a = segments_[lo].start;
  double b = lo + 1 < segments_.size() ? std::min(segments_[lo + 1].start, s_max) : s_max;
  for (int it = 0; it < 2100; ++it) {
    const double c = 0.5 * (a + b);
    if (c <= a || c >= b) break;
    if (divergence_on(tab, f, lo, c) <= budget) a = c;
    else b = c;
  }
  return point_on(lo, a);
}

template <class F>
Point Path::solve_price(const Table& tab, const F& f, double price) const {
  // A(π(s)) − price·D(s) = 1 − TV + s − price·D(s) is concave in s (D is convex: its slope
  // marginal_cost is nondecreasing), so its largest maximiser is where price·D'(s⁺) first exceeds 1.
  // The same search as solve_budget with that predicate in place of D(s) ≤ ε: over segment starts,
  // then by bisection inside the segment (the thresholds are continuous there).
  const auto past = [&](std::size_t j, double s) { return price * marginal_cost(f, point_on(j, s)) > 1.0; };
  const double s_max = this->s_max(tab.f_inf);
  const Point end = at(s_max);
  if (!(price * marginal_cost(f, end) > 1.0)) return end;
  if (past(0, 0.0)) return at(0.0);
  std::size_t count = static_cast<std::size_t>(
      std::upper_bound(segments_.begin(), segments_.end(), s_max,
                       [](double v, const Segment& g) { return v < g.start; }) -
      segments_.begin());
  std::size_t lo = 0, hi = count;  // not past at start[lo]; past at start[hi] (or s_max)
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (!past(mid, segments_[mid].start)) lo = mid;
    else hi = mid;
  }
  double a = segments_[lo].start;
  double b = lo + 1 < segments_.size() ? std::min(segments_[lo + 1].start, s_max) : s_max;
  for (int it = 0; it < 2100; ++it) {
    const double c = 0.5 * (a + b);
    if (c <= a || c >= b) break;
    if (!past(lo, c)) a = c;
    else b = c;
  }
  return point_on(lo, a);
}

}  // namespace mentored
