// The speculative sampling step with a chosen verifier π (docs/theory.md §2, §8), in vLLM's
// flattened layout: the one implementation of accept / first rejection / residual / bonus for host
// memory. Every host entry point (mentored.speculative_step, serving.rejection_sample on numpy and on
// CPU tensors, serving.Verifier) is one call of verify_batch.
//
// Request b owns n[b] consecutive positions; position t has parent t − 1 within its request (none
// at the first): a chain, walked from its root until the first rejection. At position t, with
// target p, drafter q and draft x:
//   random, dense q:   π solved just before the test (or given); accept x iff u0·q_x/Σq < π_x,
//                      else the first i with C_i > u1·C_{V−1}, C_i = Σ_{l≤i} (π_l − q_l/Σq)₊,
//                      the inverse CDF of the residual (π − q)₊ (from π itself where rounding
//                      leaves it no mass); q is read as q/Σq, the row π was solved for.
//   random, no q:      q = δ_x (a token-only drafter); π_x the largest within budget (onehot_pi_x,
//                      or given); accept iff u0 < π_x, else the inverse CDF of p without x (π off
//                      x is proportional to p).
//   greedy request:    π = δ_{argmax p} (first maximum): accept iff x = argmax p, else emit it.
//   placeholder x = −1: always rejected; a random request draws from p (there is no draft to lean
//                      toward), a greedy one emits argmax p.
// The emitted token has law exactly π (docs/theory.md §2). Output row b: the accepted drafts, then
// the token at the first rejection, then −1; column n[b] holds bonus[b] only when all n[b] drafts
// were accepted. With π = p this is lossless speculative sampling, decision for decision, given the
// same uniforms. Every row the call is given is checked, those no decision reads included, so that
// bad input is never answered silently.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <variant>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "program.hpp"
#include "solve.hpp"

namespace mentored {

// Statuses of a step or a tree (the Python side maps them to errors, naming request and position or node).
enum class StepStatus : int {
  ok = 0,
  bad_token = 1,    // a draft id outside [0, V) (−1 too, where placeholders are not allowed)
  zero_row = 2,     // a row of p or q sums to zero
  bad_value = 3,    // NaN, ±inf or a negative entry
  unreachable = 4,  // zeros = keep: the end of the finite curve out of reach (rounding)
  bad_bonus = 5,    // a bonus id outside [0, V)
  off_sum = 6,      // a row sums to 1 only beyond the caller's tolerance
  bad_parent = 7,   // a tree's parent not before its node (tree.hpp), or a second root
  duplicate_token = 8,  // two children of a tree node carry one token (tree.hpp)
};

inline StepStatus step_status(Status st) {
  switch (st) {
    case Status::ok: return StepStatus::ok;
    case Status::zero_row: return StepStatus::zero_row;
    case Status::unreachable: return StepStatus::unreachable;
    case Status::off_sum: return StepStatus::off_sum;
    default: return StepStatus::bad_value;
  }
}

// Inverse CDF of w (≥ 0) at fraction u ∈ [0, 1): the first i with Σ_{l≤i} w_l > u · Σ w.
// Returns −1 when Σ w = 0.
template <class W>
std::int64_t inverse_cdf(const W& w, std::size_t V, double u) {
  double total = 0.0;
  for (std::size_t i = 0; i < V; ++i) total += w(i);
  if (!(total > 0.0)) return -1;
  const double level = u * total;
  double c = 0.0;
  std::int64_t last = -1;
  for (std::size_t i = 0; i < V; ++i) {
    const double wi = w(i);
    if (wi > 0.0) last = static_cast<std::int64_t>(i);
    c += wi;
    if (c > level && wi > 0.0) return static_cast<std::int64_t>(i);
  }
  return last;  // level ≥ the running sum only by rounding: the last token with mass
}

// Where a uniform lands among the masses m[0..k) laid end to end from 0: the first c with
// u[0] < m[0] + … + m[c], or k past them all (the rest of π). A tree node walks its children's
// π masses so (tree.hpp); a token-only draft is its one child: accepted iff u[0] < π_x.
inline std::size_t land(const double* m, std::size_t k, const double* u) {
  double acc = 0.0;
  for (std::size_t c = 0; c < k; ++c) {
    acc += m[c];
    if (u[0] < acc) return c;
  }
  return k;
}

// Position j of a row: accept x iff u0·q_x/Σq < π_x; else the residual token. Returns the token and
// whether x was accepted. iq = 1/Σq, the scale the solve normalised q by: π answers q/Σq, so the
// accept test and the residual (π − q/Σq)₊ read the same q (with raw q, a row inside the sum
// tolerance would emit a law off π).
template <class P, class T>
std::int64_t decide(const P* pj, const T* qj, std::int64_t x, const double* u, std::size_t V, double iq, bool& accepted) {
  accepted = u[0] * (static_cast<double>(qj[x]) * iq) < static_cast<double>(pj[x]);
  if (accepted) return x;
  const auto residual = [&](std::size_t i) {
    return std::max(static_cast<double>(pj[i]) - static_cast<double>(qj[i]) * iq, 0.0);
  };
  std::int64_t y = inverse_cdf(residual, V, u[1]);
  if (y < 0) y = inverse_cdf([&](std::size_t i) { return static_cast<double>(pj[i]); }, V, u[1]);
  return y;
}

// ---------------------------------------------------------------- the verifier of each position

// A request's divergence: a built-in, a user generator's program, or π given by the caller (a user
// generator the core cannot evaluate: the Python side solved π, or π_x of a token-only drafter).
struct GivenF {};
using StepF = std::variant<BuiltinF, ProgramF, GivenF>;

// π of one position into pi: solve's budget mode (value = ε), or its price mode (value = λ: the π
// maximising A(π) − λ·D_f(π‖p), docs/theory.md §4 "Budgets by price"); with keep (zeros = "keep")
// and f∞ < ∞, a row whose optimum continued onto {p = 0} (t_hi = ∞) is solved again at the end of
// the finite curve, acceptance 1 − Q0 (Q0 = Σ_{p_i = 0} q_i / Σq), the least divergence reaching
// it, and π is set to 0 on {p = 0}: the optimum with those zeros as constraints (docs/theory.md §8),
// as mentored.speculative.solve_pi does for the rows it is given. For a price the same re-solve is
// the constrained optimum: with π = 0 on {p = 0} the feasible curve points are the finite curve
// [0, TV − Q0], and h(s) = A − λD is concave along the whole curve; its largest maximiser lies on
// the continuation, past that end, so h is nondecreasing on the finite curve and its end is the best
// point there (and the least divergence with that acceptance, as for a budget). spent: D_f(π‖p).
template <class T, class F>
Status solve_position(OneShot& row, const F& f, const T* p, const T* q, std::size_t V, Mode mode, double value, bool keep,
                      T* pi, const RowCheck& check = {}, double* spent = nullptr) {
  RowResult r{0.0, 1.0, 1.0, 0.0, 0.0, 0.0};
  Status st = solve_row(row, f, p, q, V, mode, value, pi, r, check);
  if (spent) *spent = r.divergence;
  if (st != Status::ok || !keep || !(f.f_inf < kInf) || !std::isinf(r.t_hi)) return st;
  double q0 = 0.0, sq = 0.0;
  for (std::size_t i = 0; i < V; ++i) {
    const double qi = static_cast<double>(q[i]);
    sq += qi;
    if (p[i] == T(0)) q0 += qi;
  }
  const double a = std::min(std::max(1.0 - q0 / sq, 0.0), 1.0);
  st = solve_row(row, f, p, q, V, Mode::acceptance, a, pi, r);
  if (spent) *spent = r.divergence;
  if (st != Status::ok) return st;
  for (std::size_t i = 0; i < V; ++i)
    if (p[i] == T(0)) pi[i] = T(0);
  return Status::ok;
}

// y·f̃(x/y) for y > 0, x ≥ 0: finite however small y is, through the perspective past DBL_MAX.
template <class F>
double perspective(const F& f, double x, double y) {
  const double t = x / y;
  if (t < kInf) {
    const double v = f(t);
    if (v < kInf) return y * v;
  }
  return term_huge_of(f, y, (x * kHugeDown) / y, 0);
}

// The closed forms of π_x for q = δ_x: tv, p_x + ε; chi2, p_x + √(ε p_x (1 − p_x)) (docs/theory.md §8).
template <class F>
bool onehot_closed_form(const F&, double, double, double&) {
  return false;
}
inline bool onehot_closed_form(const BuiltinF& f, double px, double eps, double& a) {
  if (f.g == Generator::tv) a = std::min(px + eps, 1.0);
  else if (f.g == Generator::chi2) a = std::min(px + std::sqrt(eps * px * (1.0 - px)), 1.0);
  else return false;
  return true;
}

constexpr int kOnehotHalvings = 80;  // of [p_x, 1]: absolute error 2⁻⁸⁰

// D_f(π‖p) of the token-only verifier (π_x = a, the rest (1 − a)/(1 − p_x)·p) and of the greedy one
// (a = 1), px = p_x/Σp: p_x f̃(a/p_x) + (1 − p_x) f̃((1 − a)/(1 − p_x)); off the target's support
// (p_x = 0) a unit of mass costs f̃∞ (0·∞ = 0).
template <class F>
double onehot_divergence(const F& f, double px, double a) {
  const bool zero = px <= 0.0;
  const double rest = 1.0 - px;
  const double t1 = zero ? (a > 0.0 ? a * f.f_inf : 0.0) : perspective(f, a, px);
  return t1 + (rest > 0.0 ? perspective(f, 1.0 - a, rest) : 0.0);
}

// π_x of the verifier of a token-only drafter q = δ_x (docs/theory.md §8), px = p_x/Σp: the largest
// a ∈ [p_x, 1] with p_x f̃(a/p_x) + (1 − p_x) f̃((1 − a)/(1 − p_x)) ≤ ε (the rest of π is
// (1 − a)/(1 − p_x)·p), by bisection where no closed form is known. Where p_x = 0: 0 with keep or
// f∞ = ∞, else the largest z with f̃(1 − z) + f̃∞ z ≤ ε. mentored.serving.onehot_acceptance is this.
template <class F>
double onehot_pi_x(const F& f, double px, double eps, bool keep) {
  const bool zero = px <= 0.0;
  double a;
  if (!onehot_closed_form(f, px, eps, a)) {
    const auto D = [&](double v) { return onehot_divergence(f, px, v); };
    double lo = px + 0.0, hi = 1.0;
    const bool top = D(hi) <= eps;
    for (int i = 0; i < kOnehotHalvings; ++i) {
      const double mid = 0.5 * (lo + hi);
      if (D(mid) <= eps) lo = mid;
      else hi = mid;
    }
    a = top ? 1.0 : lo;
  }
  a = eps <= 0.0 ? px : (a > px ? a : px);  // NaN (ε = ∞ in a closed form at p_x ∈ {0, 1}): p_x
  if (zero && (keep || !(f.f_inf < kInf))) a = 0.0;
  return a;
}

// π_x of the price verifier of a token-only drafter q = δ_x (docs/theory.md §4 "Budgets by price",
// §8), px = p_x/Σp: the largest maximiser over a ∈ [p_x, 1] of a − λ·D(a), D(a) = onehot_divergence
// (the acceptance of δ_x is π_x = a). D is convex in a, with right slope
//     D'(a⁺) = f̃'((a/p_x)⁺) − f̃'(((1 − a)/(1 − p_x))⁻),
// the curve's marginal cost (path.hpp, marginal_cost) at t_hi = a/p_x, t_lo = (1 − a)/(1 − p_x)
// (t_hi = ∞ where p_x = 0: f̃∞), nondecreasing in a; so the objective is concave and its largest
// maximiser is min(1, the first a with λ·D'(a⁺) > 1), found by bisection on that predicate to the
// last bit. tv has D(a) = a − p_x: λ < 1 buys all (a = 1), λ > 1 nothing (a = p_x), and λ = 1, where
// every a is optimal, the largest (1), as solve's price mode does for tv. λ = ∞: a = p_x (budget 0);
// λ = 0: a = 1, the end (budget ∞). Where p_x = 0: 0 with keep or f∞ = ∞, as for a budget.
template <class F>
double onehot_pi_x_price(const F& f, double px, double price, bool keep) {
  const bool zero = px <= 0.0;
  if (zero && (keep || !(f.f_inf < kInf))) return 0.0;
  if (!(price < kInf)) return zero ? 0.0 : px;
  if (px >= 1.0) return 1.0;
  if (is_tv(f)) return price <= 1.0 ? 1.0 : px;
  const double rest = 1.0 - px;
  const auto past = [&](double a) {
    const double t_hi = zero ? kInf : a / px, t_lo = (1.0 - a) / rest;
    return price * (slope_of(f, t_hi, 1, 0) - slope_of(f, t_lo, -1, 0)) > 1.0;  // NaN (0·∞): not past
  };
  if (!past(1.0)) return 1.0;
  double lo = px + 0.0, hi = 1.0;
  if (past(lo)) return lo;
  for (int it = 0; it < 2100; ++it) {
    const double c = 0.5 * (lo + hi);
    if (c <= lo || c >= hi) break;
    if (!past(c)) lo = c;
    else hi = c;
  }
  return lo;
}

// Status of a row that no decision reads (after a rejection, and the bonus position's target row),
// and of the rows of a position decided without a solve: checked as a solve would check it
// (finite, nonnegative, a positive sum within rtol of 1). stats: its {Σ, min, max} (stats_pass).
template <class T>
Status check_row(const T* x, std::size_t V, double rtol, double* stats) {
  stats_pass(x, V, stats);
  if (!(stats[1] >= 0.0 && stats[2] < kInf && stats[0] < kInf)) return Status::bad_value;
  if (!(stats[0] > 0.0)) return Status::zero_row;
  if (!(std::fabs(stats[0] - 1.0) <= rtol)) return Status::off_sum;
  return Status::ok;
}

// The first i with the largest x_i (numpy's argmax of a checked row).
template <class T>
std::int64_t argmax(const T* x, std::size_t V) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < V; ++i)
    if (x[i] > x[best]) best = i;
  return static_cast<std::int64_t>(best);
}

// ---------------------------------------------------------------- one request, and a batch

// Where a step failed: request b, position j (−1 when not yet known), the status, and the failing
// row's numbers for the message: {Σ, min, max} of its target row, then of its draft row (a row
// not read: {1, 0, 0}, which passes).
struct StepError {
  StepStatus status = StepStatus::ok;
  std::int64_t position = -1;
  double stats[6] = {1.0, 0.0, 0.0, 1.0, 0.0, 0.0};
};

// The tolerances on the sums of a step's target and draft rows (RowCheck; ∞: no check).
// lenient: a position whose rows fail their check is decided instead of refused (serving with
// validation off: a NaN from a model must not stop an engine): its draft is rejected and it emits
// the first largest entry of its target row (NaN read as the lowest; 0 when the row has no number),
// an id in [0, V). Rows no decision reads are not checked then.
struct StepCheck {
  double rtol_p = kInf, rtol_q = kInf;
  bool lenient = false;
};

// The first index of the largest entry of a row, NaN read as the lowest; 0 when the row has no number.
template <class T>
std::int64_t largest_entry(const T* row, std::size_t V) {
  std::int64_t best = 0;
  bool found = false;
  for (std::size_t i = 0; i < V; ++i)
    if (row[i] == row[i] && (!found || row[i] > row[best])) best = static_cast<std::int64_t>(i), found = true;
  return best;
}

// A failed row's error: its status at position j, with the numbers of its rows.
inline StepError step_error(Status st, std::size_t j, const double* stats_p, const double* stats_q) {
  StepError e;
  e.status = step_status(st);
  e.position = static_cast<std::int64_t>(j);
  if (stats_p) std::copy(stats_p, stats_p + 3, e.stats);
  if (stats_q) std::copy(stats_q, stats_q + 3, e.stats + 3);
  return e;
}

// A batch in the flattened layout (C-contiguous): request b owns n[b] consecutive positions from
// start_b = Σ_{c<b} n[c] of q, draft, u (2 per position: u0 decides acceptance, u1 samples the
// token), eps (eps_step = 1; or one value for all: 0: a budget, or a price where priced[b]), pi and
// pi_x, and the rows from
// start_b + b·extra of p (extra = 1 when p holds a bonus-position row after each request's drafts,
// as speculative_step's target does, checked too; 0 otherwise). Optional (null): q (token-only
// drafts), greedy [B], priced [B] (request b's eps are prices λ: each position's π maximises
// A(π) − λ·D_f(π‖p), docs/theory.md §4; null: all budgets), which [B] (the index of each request's
// divergence; null: 0), pi [T, V] and
// pi_x [T] (π given, for requests whose divergence is GivenF, dense and token-only).
// placeholders: −1 is a draft that is always rejected (otherwise an id outside [0, V)).
template <class T>
struct Step {
  const T* p = nullptr;
  const T* q = nullptr;
  const std::int64_t* draft = nullptr;
  const std::int64_t* n = nullptr;
  const std::int64_t* bonus = nullptr;
  const double* u = nullptr;
  const double* eps = nullptr;
  std::size_t eps_step = 0;
  const bool* greedy = nullptr;
  const bool* priced = nullptr;
  const std::int32_t* which = nullptr;
  const T* pi = nullptr;
  const double* pi_x = nullptr;
  std::size_t B = 0, V = 0, extra = 0;
  bool keep = false, placeholders = false;
  bool block = false;  // dense random requests verified as a block (verify_block), the rest token by token
  StepCheck check;
  // Optional outputs [B, width], beside out: log π and log p (p/Σp) of each emitted token and
  // D_f(π‖p) of the verifier it was drawn from (docs/theory.md §11); NaN where nothing is emitted,
  // where the row is no distribution (lenient), and where the core cannot evaluate f (GivenF: D only).
  // The bonus column is the caller's (NaN here). For a priced request D is the optimum's, the budget the
  // price amounts to.
  double* logpi = nullptr;
  double* logp = nullptr;
  double* spent = nullptr;
};

// How request b's eps are read: budgets, or prices (Step::priced).
template <class T>
Mode step_mode(const Step<T>& st, std::size_t b) {
  return st.priced && st.priced[b] ? Mode::price : Mode::budget;
}

// π_x of a token-only draft within a budget or at a price (onehot_pi_x, onehot_pi_x_price).
template <class F>
double onehot_verifier(const F& f, double px, Mode mode, double value, bool keep) {
  return mode == Mode::price ? onehot_pi_x_price(f, px, value, keep) : onehot_pi_x(f, px, value, keep);
}

// Where a request writes its notes of the emitted tokens (Step's logpi, logp, spent), if asked.
struct Notes {
  double *logpi = nullptr, *logp = nullptr, *spent = nullptr;
  template <class T>
  Notes(const Step<T>& st, std::size_t b, std::size_t width) {
    if (!st.logpi) return;
    logpi = st.logpi + b * width, logp = st.logp + b * width, spent = st.spent + b * width;
    for (std::size_t j = 0; j < width; ++j) logpi[j] = logp[j] = spent[j] = kNaN;
  }
  void operator()(std::size_t j, double pi_y, double p_y, double d) const {
    if (!logpi) return;
    logpi[j] = std::log(pi_y), logp[j] = std::log(p_y), spent[j] = d;
  }
};

// D_f(π‖p) where the core evaluates f; NaN for π given by the caller (the Python side evaluates it).
template <class F>
double onehot_spent(const F& f, double px, double a) {
  if constexpr (std::is_same_v<F, GivenF>) return kNaN;
  else return onehot_divergence(f, px, a);
}

// Request b of a step verified as a block (docs/theory.md §10; Sun et al. 2025, block verification),
// dense drafts: π_j is the verifier of position j (solved, or given), q̂_j = q_j/Σq_j. With w_0 = 1,
// w_{i+1} = min(w_i·π_i(x_i)/q̂_i(x_i), 1) and, for 0 < i < m, R_i = Σ_y (w_i π_i(y) − q̂_i(y))₊,
// h_i = R_i/(R_i + 1 − w_i) (1 when 0/0), h_m = w_m: τ is the largest i ≤ m with u0(position i − 1)
// < h_i (0 if none); the row emits x_0 … x_{τ−1}, then the residual token (w_τ π_τ − q̂_τ)₊ at
// u1(position τ) (from π_τ where rounding leaves it no mass), or the bonus at τ = m = n. The block
// ends at m ≤ n, the first placeholder or (lenient) failed row, which is decided as the token rule
// decides it: the chain's law there is p (placeholder) or the target's largest entry. All rows up
// to m are solved before any decision; scratch holds n rows.
template <class T, class F, class O, class Rows, class Rest>
StepError verify_block(OneShot& row, const F& f, const Step<T>& st, std::size_t b, std::size_t s, T* scratch, O* out,
                       const Rows& check_rows, const Rest& check_rest, double* stats, const Notes& note) {
  const std::size_t V = st.V, n = static_cast<std::size_t>(st.n[b]);
  const T* p = st.p + (s + b * st.extra) * V;
  const T* q = st.q + s * V;
  const std::int64_t* draft = st.draft + s;
  const double* u = st.u + 2 * s;
  static thread_local std::vector<const T*> pis;
  static thread_local std::vector<double> iqs, sps, ds;  // 1/Σq, Σp, D_f(π‖p) per position
  pis.assign(n, nullptr);
  iqs.assign(n, 1.0);
  sps.assign(n, 1.0);
  ds.assign(n, kNaN);
  std::size_t m = n;
  std::int64_t stop_token = -1;  // the token decided at m < n (a failed row in lenient mode); −1: drawn from p
  for (std::size_t j = 0; j < n && m == n; ++j) {
    const T* pj = p + j * V;
    const T* qj = q + j * V;
    StepError e;
    if (draft[j] < 0) {
      e = check_rows(j);
      if (e.status == StepStatus::ok) {
        m = j;
        break;
      }
    } else if constexpr (std::is_same_v<F, GivenF>) {
      e = check_rows(j);
      pis[j] = st.pi + (s + j) * V;
    } else {
      const Status c = solve_position(row, f, pj, qj, V, step_mode(st, b), st.eps[(s + j) * st.eps_step], st.keep, scratch + j * V,
                                      RowCheck{st.check.rtol_p, st.check.rtol_q, stats}, &ds[j]);
      e = c == Status::ok ? StepError{} : step_error(c, j, stats, stats + 3);
      pis[j] = scratch + j * V;
    }
    if (e.status != StepStatus::ok) {
      if (!st.check.lenient) return e;
      m = j;
      stop_token = largest_entry(pj, V);
      break;
    }
    iqs[j] = 1.0 / stats[3];  // Σq as the solve (or the check) read it: π answers q/Σq
    sps[j] = stats[0];
  }
  // The weights w_i and the last i whose test passes, scanned from the end.
  static thread_local std::vector<double> w;
  w.assign(m + 1, 1.0);
  for (std::size_t i = 0; i < m; ++i) {
    const auto x = static_cast<std::size_t>(draft[i]);
    const double pix = static_cast<double>(pis[i][x]), qx = static_cast<double>(q[i * V + x]) * iqs[i];
    w[i + 1] = !(pix > 0.0) || !(w[i] > 0.0) ? 0.0 : !(qx > 0.0) ? 1.0 : std::min(w[i] * (pix / qx), 1.0);
  }
  const auto residual = [&](std::size_t i) {
    return [&, i](std::size_t y) {
      return std::max(w[i] * static_cast<double>(pis[i][y]) - static_cast<double>(q[i * V + y]) * iqs[i], 0.0);
    };
  };
  std::size_t tau = 0;
  for (std::size_t i = m; i >= 1; --i) {
    double h = w[i];
    if (i < m) {
      const auto r = residual(i);
      double R = 0.0;
      for (std::size_t y = 0; y < V; ++y) R += r(y);
      const double den = R + (1.0 - w[i]);
      h = den > 0.0 ? R / den : 1.0;
    }
    if (u[2 * (i - 1)] < h) {
      tau = i;
      break;
    }
  }
  // Each emitted token's law given the tokens before it is its position's π (docs/theory.md §10).
  const auto emit = [&](std::size_t j, std::int64_t y) {
    out[j] = static_cast<O>(y);
    note(j, static_cast<double>(pis[j][y]), static_cast<double>(p[j * V + y]) / sps[j], ds[j]);
  };
  for (std::size_t j = 0; j < tau; ++j) emit(j, draft[j]);
  if (tau < m) {
    std::int64_t y = inverse_cdf(residual(tau), V, u[2 * tau + 1]);
    if (y < 0) y = inverse_cdf([&](std::size_t i) { return static_cast<double>(pis[tau][i]); }, V, u[2 * tau + 1]);
    emit(tau, y);
    return check_rest(m == n ? n : m + 1);
  }
  if (m < n) {  // all m accepted, then the placeholder's token from p (or the failed row's: no law)
    const T* pm = p + m * V;
    if (stop_token >= 0) {
      out[m] = static_cast<O>(stop_token);
    } else {
      const std::int64_t y = inverse_cdf([&](std::size_t i) { return static_cast<double>(pm[i]); }, V, u[2 * m + 1]);
      out[m] = static_cast<O>(y);
      const double sp = check_row(pm, V, kInf, stats) == Status::ok ? stats[0] : kNaN;
      note(m, static_cast<double>(pm[y]) / sp, static_cast<double>(pm[y]) / sp, 0.0);
    }
    return check_rest(m + 1);
  }
  const StepError rest = check_rest(n);
  if (rest.status == StepStatus::ok) out[n] = static_cast<O>(st.bonus[b]);
  return rest;
}

// Request b of a step; scratch: a row [V] for π. out [width] (width ≥ n + 1) is filled with −1,
// then the accepted drafts, the token at the first rejection, or the bonus at column n. Positions
// are solved only when reached.
template <class T, class F, class O>
StepError verify_request(OneShot& row, const F& f, const Step<T>& st, std::size_t b, std::size_t s, T* scratch, O* out,
                         std::size_t width) {
  const std::size_t V = st.V, n = static_cast<std::size_t>(st.n[b]);
  const T* p = st.p + (s + b * st.extra) * V;
  const T* q = st.q ? st.q + s * V : nullptr;
  const std::int64_t* draft = st.draft + s;
  const std::int64_t bonus = st.bonus[b];
  const double* u = st.u + 2 * s;
  const bool greedy = st.greedy && st.greedy[b];
  const StepCheck& check = st.check;
  for (std::size_t j = 0; j < width; ++j) out[j] = O(-1);
  const Notes note(st, b, width);
  const std::int64_t lowest = st.placeholders ? -1 : 0;
  for (std::size_t j = 0; j < n; ++j)
    if (draft[j] < lowest || draft[j] >= static_cast<std::int64_t>(V))
      return {StepStatus::bad_token, static_cast<std::int64_t>(j)};
  if (bonus < 0 || static_cast<std::size_t>(bonus) >= V) return {StepStatus::bad_bonus, static_cast<std::int64_t>(n)};
  double stats[6] = {1.0, 0.0, 0.0, 1.0, 0.0, 0.0};
  // The rows of position l, checked without a solve; the target's {Σ, min, max} in stats[0..2].
  const auto check_rows = [&](std::size_t l) -> StepError {
    Status c = check_row(p + l * V, V, check.rtol_p, stats);
    if (c != Status::ok) return step_error(c, l, stats, nullptr);
    if (q) {
      c = check_row(q + l * V, V, check.rtol_q, stats + 3);
      if (c != Status::ok) return step_error(c, l, stats, stats + 3);
    }
    return {};
  };
  // The rows from `from` on that no decision reads, then the bonus position's target row.
  const auto check_rest = [&](std::size_t from) -> StepError {
    if (check.lenient) return {};
    for (std::size_t l = from; l < n; ++l) {
      const StepError e = check_rows(l);
      if (e.status != StepStatus::ok) return e;
    }
    if (st.extra == 1) {
      const Status c = check_row(p + n * V, V, check.rtol_p, stats);
      if (c != Status::ok) return step_error(c, n, stats, nullptr);
    }
    return {};
  };
  if (st.block && q && !greedy) return verify_block(row, f, st, b, s, scratch, out, check_rows, check_rest, stats, note);
  for (std::size_t j = 0; j < n; ++j) {
    const T* pj = p + j * V;
    const T* qj = q ? q + j * V : nullptr;
    const std::int64_t x = draft[j];
    const double* uj = u + 2 * j;
    std::int64_t y = x;
    bool accepted;
    // A failed row: refused, or in lenient mode decided (rejected, the target's largest entry).
    const auto failed = [&](const StepError& e) -> StepError {
      if (!check.lenient) return e;
      out[j] = static_cast<O>(largest_entry(pj, V));
      return {};
    };
    if (greedy || x < 0 || !qj) {
      const StepError e = check_rows(j);
      if (e.status != StepStatus::ok) return failed(e);
      const double sp = stats[0];
      if (greedy) {
        y = argmax(pj, V);
        accepted = x == y;
        note(j, 1.0, static_cast<double>(pj[y]) / sp, onehot_spent(f, static_cast<double>(pj[y]) / sp, 1.0));
      } else if (x < 0) {  // a placeholder: drawn from p
        y = inverse_cdf([&](std::size_t i) { return static_cast<double>(pj[i]); }, V, uj[1]);
        accepted = false;
        note(j, static_cast<double>(pj[y]) / sp, static_cast<double>(pj[y]) / sp, 0.0);
      } else {  // q = δ_x
        const double px = static_cast<double>(pj[x]) / sp;
        double a;
        if constexpr (std::is_same_v<F, GivenF>) a = st.pi_x[s + j];
        else a = onehot_verifier(f, px, step_mode(st, b), st.eps[(s + j) * st.eps_step], st.keep);
        accepted = land(&a, 1, uj) == 0;
        if (!accepted) {
          y = inverse_cdf([&](std::size_t i) { return i == static_cast<std::size_t>(x) ? 0.0 : static_cast<double>(pj[i]); }, V, uj[1]);
          if (y < 0) y = inverse_cdf([&](std::size_t i) { return static_cast<double>(pj[i]); }, V, uj[1]);
        }
        const double py = static_cast<double>(pj[y]) / sp;  // π off x is (1 − a)/(1 − p_x)·p
        note(j, accepted ? a : (1.0 - a) * py / (1.0 - px), py, onehot_spent(f, px, a));
      }
    } else {
      const T* pi = scratch;
      double d = kNaN;
      if constexpr (std::is_same_v<F, GivenF>) {
        const StepError e = check_rows(j);
        if (e.status != StepStatus::ok) return failed(e);
        pi = st.pi + (s + j) * V;
      } else {
        const Status c = solve_position(row, f, pj, qj, V, step_mode(st, b), st.eps[(s + j) * st.eps_step], st.keep, scratch,
                                        RowCheck{check.rtol_p, check.rtol_q, stats}, &d);
        if (c != Status::ok) return failed(step_error(c, j, stats, stats + 3));
      }
      // stats[3] = Σq as the solve (or the check) read it: 1/Σq is the very scale π answers.
      y = decide(pi, qj, x, uj, V, 1.0 / stats[3], accepted);
      note(j, static_cast<double>(pi[y]), static_cast<double>(pj[y]) / stats[0], d);
    }
    out[j] = static_cast<O>(y);
    if (!accepted) return check_rest(j + 1);
  }
  const StepError rest = check_rest(n);
  if (rest.status == StepStatus::ok) out[n] = static_cast<O>(bonus);
  return rest;
}

// All requests of a step, divergence divs[which[b]] for request b. out [B, width]. Returns the first
// request that failed (B if none) and its error. On nt threads (batch_threads), OpenMP over
// requests; each thread solves into its own scratch row.
//
// Requests go in chunks of at most max_rows rows (at least one request each); between chunks
// `stop()` is asked whether to stop (the bindings check for signals there, Ctrl-C). A chunk with a
// failed request ends the call: no later request can be the first to fail. Each thread's buffers
// go back to kKeepTokens when the call ends, stopped or not.
template <class T, class O, class Stop>
std::size_t verify_batch(const Step<T>& st, const std::vector<StepF>& divs, int nt, O* out, std::size_t width,
                         StepError& error, std::size_t max_rows, const Stop& stop) {
  const std::size_t B = st.B, V = st.V, extra = st.extra;
  std::vector<std::size_t> start(B + 1, 0);
  std::size_t K = 0;  // the longest request: a block keeps all its rows of π
  for (std::size_t b = 0; b < B; ++b) {
    start[b + 1] = start[b] + static_cast<std::size_t>(st.n[b]);
    K = std::max(K, static_cast<std::size_t>(st.n[b]));
  }
  std::vector<StepError> errors(B);
  // Requests [b0, b1); trim: the call ends with them.
  const auto run = [&](std::size_t b0, std::size_t b1, bool trim) {
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    {
      OneShot& row = thread_workspace();
      static thread_local std::vector<T> scratch;
      if (scratch.size() < V * (st.block ? std::max<std::size_t>(K, 1) : 1)) scratch.resize(V * (st.block ? std::max<std::size_t>(K, 1) : 1));
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
      for (long long bb = static_cast<long long>(b0); bb < static_cast<long long>(b1); ++bb) {
        const std::size_t b = static_cast<std::size_t>(bb);
        const StepF& f = divs[st.which ? static_cast<std::size_t>(st.which[b]) : 0];
        errors[b] = std::visit(
            [&](const auto& g) { return verify_request(row, g, st, b, start[b], scratch.data(), out + b * width, width); }, f);
      }
      if (trim) {
        row.trim(kKeepTokens);
        if (scratch.size() > kKeepTokens) std::vector<T>().swap(scratch);
      }
    }
  };
  const auto rows = [&](std::size_t b0, std::size_t b1) { return start[b1] - start[b0] + (b1 - b0) * extra; };
  for (std::size_t b0 = 0, b1; b0 < B; b0 = b1) {
    b1 = b0 + 1;
    while (b1 < B && rows(b0, b1 + 1) <= max_rows) ++b1;
    run(b0, b1, b1 == B);
    for (std::size_t b = b0; b < b1; ++b)
      if (errors[b].status != StepStatus::ok) {
        if (b1 < B) run(0, 0, true);
        error = errors[b];
        return b;
      }
    if (b1 < B && stop()) {
      run(0, 0, true);  // stopped: the threads' buffers trimmed as a finished call leaves them
      return B;
    }
  }
  (void)nt;
  return B;
}

}  // namespace mentored
