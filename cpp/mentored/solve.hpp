// Batched mentored decoding: one optimal π per row of a (B, n) batch, rows in parallel.
//
// Each row is independent and written by one thread, so results do not depend on the number of
// threads or on scheduling.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "generators.hpp"
#include "oneshot.hpp"
#include "path.hpp"

namespace mentored {

enum class Mode : int {
  budget = 0,      // value = ε: the largest s with D_f(π(s)‖p) ≤ ε
  acceptance = 1,  // value = a: s = a − 1 + TV(p, q), the smallest divergence reaching a
  price = 2,       // value = λ: the π maximising A(π) − λ·D_f(π‖p), reported with the divergence it spends
};

// Per-row scalars, in this order in the (B, 8) result block. lam, mu: the dual parameters
// (dual_params), NaN for a generator the core cannot differentiate (a user's: computed in Python).
struct RowResult {
  double s = 0.0, t_lo = 1.0, t_hi = 1.0, acceptance = 0.0, divergence = 0.0, s_max = 0.0, lam = kNaN, mu = kNaN;
  void store(double* res) const {
    res[0] = s;
    res[1] = t_lo;
    res[2] = t_hi;
    res[3] = acceptance;
    res[4] = divergence;
    res[5] = s_max;
    res[6] = lam;
    res[7] = mu;
  }
};
constexpr int kRowFields = 8;

// λ = 1/(f'(t_hi) − f'(t_lo)), μ = −λ f'(t_lo) (docs/theory.md §4), with the derivatives one-sided
// toward the inside of [t_lo, t_hi] (tv's kink at 1). λ = 0, μ = 0 where the budget is not binding;
// λ = ∞, μ = NaN where f'(t_hi) − f'(t_lo) ≤ 1e-8 (budget 0 for a generator differentiable at 1:
// the dual optimum is not attained). Only for generators that give f' (the built-ins).
template <class F>
auto dual_params(const F& f, RowResult& r, bool binding, int) -> decltype(f.fprime(1.0, 1), void()) {
  if (!binding) {
    r.lam = r.mu = 0.0;
    return;
  }
  const double d_hi = f.fprime(r.t_hi, 1), d_lo = f.fprime(r.t_lo, -1), gap = d_hi - d_lo;
  r.lam = gap > 1e-8 ? 1.0 / gap : kInf;  // NaN (∞ − ∞) compares false: ∞
  r.mu = r.lam < kInf ? -r.lam * d_lo : kNaN;
}
template <class F>
void dual_params(const F&, RowResult&, bool, long) {}

// What the solver knows of a generator beyond f: tv, whose D_tv(π(s)‖p) is s itself on the curve
// (s = TV(π, p)), and whether D_f(π‖p) = 0 only at π = p (every built-in: f̃ > 0 off t = 1), so that
// budget 0 is s = 0 exactly, not the last s whose computed D rounds to 0.
template <class F>
bool is_tv(const F&) {
  return false;
}
inline bool is_tv(const BuiltinF& f) { return f.g == Generator::tv; }
template <class F>
bool lossless_is_unique(const F&) {
  return false;
}
inline bool lossless_is_unique(const BuiltinF&) { return true; }

// The input checks of a row beyond its entries (OneShot::build): Σp and Σq within rtol of 1
// (relative; ∞: any positive sum, the row is normalised), and where to put the row's stats.
struct RowCheck {
  double rtol_p = kInf, rtol_q = kInf;
  double* stats = nullptr;  // {Σp, min p, max p, Σq, min q, max q} (OneShot::input_stats), or null
};

// U, the type of π: T, or float for float64 rows whose output is float32 (a float32 target with a
// float64 draft), rounded toward p as the float32 rows are (OneShot::build_pi).
template <class T, class U, class F>
Status solve_row(OneShot& row, const F& f, const T* p, const T* q, std::size_t n, Mode mode, double value, U* pi,
                 RowResult& out, const RowCheck& check = {}) {
  const Status st = row.build(p, q, n);
  if (check.stats) std::copy(row.input_stats(), row.input_stats() + 6, check.stats);
  if (st != Status::ok) return st;
  const double* sums = row.input_stats();
  if (!(std::fabs(sums[0] - 1.0) <= check.rtol_p) || !(std::fabs(sums[3] - 1.0) <= check.rtol_q)) return Status::off_sum;
  const double s_max = row.s_max(f.f_inf);
  Point x;
  // Price ∞: no divergence is worth any acceptance, the optimum of budget 0 (price 0 needs no such
  // case: no s is past, and the search returns s_max, as budget ∞ does).
  if (mode == Mode::price && !(value < kInf)) mode = Mode::budget, value = 0.0;
  if (mode == Mode::price) {
    x = row.solve_price(f, value);
  } else if (mode == Mode::budget) {
    if (is_tv(f)) x = row.at(std::min(std::max(value, 0.0), s_max));  // D_tv = s: no search
    else if (value <= 0.0 && lossless_is_unique(f)) x = row.at(0.0);
    else x = row.solve_budget(f, value);
  } else {
    const double s = value - 1.0 + row.tv();
    // Acceptance is known only to rounding: allow a few ulps past the end of the curve.
    if (s > s_max + 1e-12) {
      out.acceptance = 1.0 - row.tv() + s_max;  // the most that is reachable, for the message
      return Status::unreachable;
    }
    x = row.at(std::min(std::max(s, 0.0), s_max));
  }
  out.s = x.s;
  out.t_lo = x.t_lo;
  out.t_hi = x.t_hi;
  out.acceptance = row.build_pi(p, q, x, pi, f);
  out.divergence = is_tv(f) ? x.s : row.divergence(f, x.s);
  out.s_max = s_max;
  dual_params(f, out, mode == Mode::acceptance || x.s < s_max, 0);
  return Status::ok;
}

// The workspace of the calling OS thread, shared by every solve on it (one, whatever T and F).
inline OneShot& thread_workspace() {
  static thread_local OneShot row;
  return row;
}

// Per-thread buffers kept between calls: enough for rows of 2¹⁸ tokens (a 256k vocabulary) without
// reallocating; a longer row's buffers are released when its call ends (docs/reliability.md).
constexpr std::size_t kKeepTokens = std::size_t{1} << 18;

// The threads a batch runs on (threads ≤ 0: the default below), fixed for the whole call.
inline int batch_threads(int threads, std::size_t rows, std::size_t n) {
#ifdef _OPENMP
  // No more threads than rows: a team that waits for work costs more than one small row. By
  // default a small batch (a decode step of a few short rows) runs on the calling thread: waking a
  // team costs more than the work, and far more when other processes hold the cores.
  const int want = threads > 0 ? threads : (rows * n > (std::size_t{1} << 16) ? omp_get_max_threads() : 1);
  return static_cast<int>(std::max<std::size_t>(1, std::min<std::size_t>(static_cast<std::size_t>(want), rows)));
#else
  (void)threads, (void)rows, (void)n;
  return 1;
#endif
}

// Rows [0, rows) of a batch (a chunk of a longer one: the pointers are the chunk's) on nt threads
// (batch_threads). rtol: of Σp, Σq (RowCheck); stats: (rows, 6) per row (RowCheck), or null. trim:
// the call ends with this chunk, so each thread's buffers go back to kKeepTokens.
template <class T, class U, class F>
void solve_batch(const T* p, const T* q, std::size_t rows, std::size_t n, const F& f, Mode mode,
                 const double* values, int nt, U* pi, double* results, int* status, double rtol_p = kInf,
                 double rtol_q = kInf, double* stats = nullptr, bool trim = true) {
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
  {
    // One per thread, kept across calls: its buffers are then allocated (and page-faulted) once.
    OneShot& row = thread_workspace();
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (long long b = 0; b < static_cast<long long>(rows); ++b) {
      const std::size_t o = static_cast<std::size_t>(b) * n;
      RowResult r;
      const RowCheck check{rtol_p, rtol_q, stats ? stats + 6 * static_cast<std::size_t>(b) : nullptr};
      const Status st = solve_row(row, f, p + o, q + o, n, mode, values[b], pi + o, r, check);
      status[b] = static_cast<int>(st);
      r.store(results + static_cast<std::size_t>(b) * kRowFields);
    }
    if (trim) row.trim(kKeepTokens);
  }
  (void)nt;
}

}  // namespace mentored
