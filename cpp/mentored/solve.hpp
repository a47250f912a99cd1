// Batched mentored decoding: one optimal π per row of a (B, n) batch, rows in parallel.
//
// Each row is independent and written by one thread, so results do not depend on the number of
// threads or on scheduling.
#pragma once

#include <algorithm>
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
};

// Per-row scalars, in this order in the (B, 6) result block.
struct RowResult {
  double s, t_lo, t_hi, acceptance, divergence, s_max;
  void store(double* res) const {
    res[0] = s;
    res[1] = t_lo;
    res[2] = t_hi;
    res[3] = acceptance;
    res[4] = divergence;
    res[5] = s_max;
  }
};
constexpr int kRowFields = 6;

template <class T, class F>
Status solve_row(OneShot& row, const F& f, const T* p, const T* q, std::size_t n, Mode mode, double value, T* pi,
                 RowResult& out, double sp = kNaN, double sq = kNaN) {
  const Status st = row.build(p, q, n, sp, sq);
  if (st != Status::ok) return st;
  const double s_max = row.s_max(f.f_inf);
  Point x;
  if (mode == Mode::budget) {
    x = row.solve_budget(f, value);
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
  out.divergence = row.divergence(f, x.s);
  out.s_max = s_max;
  return Status::ok;
}

// threads ≤ 0: the OpenMP default. sums: (rows, 2) of Σp, Σq per row if known (OneShot::build),
// or null.
template <class T, class F>
void solve_batch(const T* p, const T* q, std::size_t rows, std::size_t n, const F& f, Mode mode,
                 const double* values, int threads, T* pi, double* results, int* status,
                 const double* sums = nullptr) {
#ifdef _OPENMP
  // No more threads than rows: a team that waits for work costs more than one small row. By
  // default a small batch (a decode step of a few short rows) runs on the calling thread: waking a
  // team costs more than the work, and far more when other processes hold the cores.
  const int want = threads > 0 ? threads : (rows * n > (std::size_t{1} << 16) ? omp_get_max_threads() : 1);
  const int nt = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(want), rows));
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
  {
    // One per thread, kept across calls: its buffers are then allocated (and page-faulted) once.
    static thread_local OneShot row;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (long long b = 0; b < static_cast<long long>(rows); ++b) {
      const std::size_t o = static_cast<std::size_t>(b) * n;
      RowResult r{0.0, 1.0, 1.0, 0.0, 0.0, 0.0};
      const double sp = sums ? sums[2 * b] : kNaN, sq = sums ? sums[2 * b + 1] : kNaN;
      const Status st = solve_row(row, f, p + o, q + o, n, mode, values[b], pi + o, r, sp, sq);
      status[b] = static_cast<int>(st);
      r.store(results + static_cast<std::size_t>(b) * kRowFields);
    }
  }
  (void)threads;
}

}  // namespace mentored
