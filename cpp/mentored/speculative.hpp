// The speculative sampling step with a chosen verifier π (docs/theory.md §2), in vLLM's layout.
//
// For each sequence b and draft position j = 0..k−1, with x = draft[b, j] drawn from q[b, j]:
//     accept x  iff  u[b, j, 0] · q_x < π_x        (probability min(1, π_x/q_x) for u ~ U[0, 1)),
//     else emit  the first i with  C_i > u[b, j, 1] · C_{V−1},   C_i = Σ_{l≤i} (π_l − q_l)₊
// with q read as q/Σq, the row π was solved for (its sum is 1 only to a tolerance),
//                (inverse CDF of the residual (π − q)₊ / Σ(π − q)₊), and stop the row.
// The emitted token has law exactly π (docs/theory.md §2). Output row b: the accepted drafts, then the
// residual token at the first rejection, then −1 at every later position; column k holds
// bonus[b] only when all k drafts were accepted. With π = p this is lossless speculative sampling,
// decision for decision, given the same uniforms.
//
// Layouts (C-contiguous): pi, q [B, k, V]; draft [B, k]; bonus [B]; u [B, k, 2] (column 0 decides
// acceptance, column 1 samples the residual); out [B, k + 1]. The residual is summed in float64.
// If rounding leaves no residual mass (π = q to rounding, where a rejection has probability 0),
// the token is drawn from π itself by the same inverse CDF.
//
// verify_batch (below) also solves: it takes p and q instead of π, and solves each position's π
// into a per-thread scratch row just before its acceptance test, so that a whole step is one call.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "solve.hpp"

namespace mentored {

// Statuses of a step (mentored/speculative.py maps them to errors, naming request and position).
enum class StepStatus : int {
  ok = 0,
  bad_token = 1,    // a draft id outside [0, V) (the placeholder −1 included)
  zero_row = 2,     // a row of p or q sums to zero
  bad_value = 3,    // NaN, ±inf or a negative entry
  unreachable = 4,  // zeros = keep: the end of the finite curve out of reach (rounding)
  bad_bonus = 5,    // a bonus id outside [0, V)
  off_sum = 6,      // a row sums to 1 only beyond the caller's tolerance
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

// 1/Σq of a draft row as the solve scales it (OneShot::sums_check: the float64 sum of stats_pass),
// 1 where Σq has no finite positive reciprocal (a row the solve would have refused).
template <class T>
double draft_scale(const T* q, std::size_t V) {
  double stats[3];
  stats_pass(q, V, stats);
  const double iq = 1.0 / stats[0];
  return stats[0] > 0.0 && iq < kInf ? iq : 1.0;
}

// One sequence; returns its status.
template <class T>
StepStatus speculative_row(const T* pi, const T* q, const std::int64_t* draft, std::int64_t bonus, const double* u,
                           std::size_t k, std::size_t V, std::int64_t* out) {
  for (std::size_t j = 0; j <= k; ++j) out[j] = -1;
  for (std::size_t j = 0; j < k; ++j) {
    const std::int64_t x = draft[j];
    if (x < 0 || static_cast<std::size_t>(x) >= V) return StepStatus::bad_token;
    bool accepted;
    out[j] = decide(pi + j * V, q + j * V, x, u + 2 * j, V, draft_scale(q + j * V, V), accepted);
    if (!accepted) return StepStatus::ok;
  }
  out[k] = bonus;
  return StepStatus::ok;
}

// All sequences, OpenMP over b (threads ≤ 0: the OpenMP default). status [B].
template <class T>
void speculative_batch(const T* pi, const T* q, const std::int64_t* draft, const std::int64_t* bonus, const double* u,
                       std::size_t B, std::size_t k, std::size_t V, int threads, std::int64_t* out, int* status) {
#ifdef _OPENMP
  const int nt = static_cast<int>(std::min<std::size_t>(threads > 0 ? threads : omp_get_max_threads(), B));
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
  for (long long b = 0; b < static_cast<long long>(B); ++b) {
    const std::size_t r = static_cast<std::size_t>(b);
    status[r] = static_cast<int>(
        speculative_row(pi + r * k * V, q + r * k * V, draft + r * k, bonus[r], u + r * k * 2, k, V, out + r * (k + 1)));
  }
  (void)threads;
}

// ---------------------------------------------------------------- solve and verify in one call

// π of one position into pi: solve's budget mode; with keep (zeros = "keep") and f∞ < ∞, a row
// whose optimum continued onto {p = 0} (t_hi = ∞) is solved again at the end of the finite curve,
// acceptance 1 − Q0 (Q0 = Σ_{p_i = 0} q_i / Σq), the least divergence reaching it, and π is set
// to 0 on {p = 0}: the optimum with those zeros as constraints (docs/theory.md §8), as
// mentored.speculative.solve_pi does for the rows it is given.
template <class T, class F>
Status solve_position(OneShot& row, const F& f, const T* p, const T* q, std::size_t V, double eps, bool keep, T* pi,
                      const RowCheck& check = {}) {
  RowResult r{0.0, 1.0, 1.0, 0.0, 0.0, 0.0};
  Status st = solve_row(row, f, p, q, V, Mode::budget, eps, pi, r, check);
  if (st != Status::ok || !keep || !(f.f_inf < kInf) || !std::isinf(r.t_hi)) return st;
  double q0 = 0.0, sq = 0.0;
  for (std::size_t i = 0; i < V; ++i) {
    const double qi = static_cast<double>(q[i]);
    sq += qi;
    if (p[i] == T(0)) q0 += qi;
  }
  const double a = std::min(std::max(1.0 - q0 / sq, 0.0), 1.0);
  st = solve_row(row, f, p, q, V, Mode::acceptance, a, pi, r);
  if (st != Status::ok) return st;
  for (std::size_t i = 0; i < V; ++i)
    if (p[i] == T(0)) pi[i] = T(0);
  return Status::ok;
}

// Status of a row that no decision reads (after a rejection, and the bonus position's target row):
// checked as a solve would check it (finite, nonnegative, a positive sum within rtol of 1), so that
// bad input is never answered silently. stats: its {Σ, min, max} (stats_pass).
template <class T>
Status check_row(const T* x, std::size_t V, double rtol, double* stats) {
  stats_pass(x, V, stats);
  if (!(stats[1] >= 0.0 && stats[2] < kInf && stats[0] < kInf)) return Status::bad_value;
  if (!(stats[0] > 0.0)) return Status::zero_row;
  if (!(std::fabs(stats[0] - 1.0) <= rtol)) return Status::off_sum;
  return Status::ok;
}

// Where a step failed: request b, position j (−1 when not yet known), the status, and the failing
// row's numbers for the message: {Σ, min, max} of its target row, then of its draft row (a row
// not read: {1, 0, 0}, which passes).
struct StepError {
  StepStatus status = StepStatus::ok;
  std::int64_t position = -1;
  double stats[6] = {1.0, 0.0, 0.0, 1.0, 0.0, 0.0};
};

// The tolerances on the sums of a step's target and draft rows (RowCheck; ∞: no check).
struct StepCheck {
  double rtol_p = kInf, rtol_q = kInf;
};

// One request of n drafts, rows p (its first n rows are read), q [n, V]; pi: a scratch row [V].
// out [width] (width ≥ n + 1) is filled with −1, then the accepted drafts, the residual token at
// the first rejection, or the bonus at column n. Positions are solved only when reached.
// A failed row's error: its status at position j, with the numbers of its rows.
inline StepError step_error(Status st, std::size_t j, const double* stats_p, const double* stats_q) {
  StepError e;
  e.status = step_status(st);
  e.position = static_cast<std::int64_t>(j);
  if (stats_p) std::copy(stats_p, stats_p + 3, e.stats);
  if (stats_q) std::copy(stats_q, stats_q + 3, e.stats + 3);
  return e;
}

// bonus_row: p holds the bonus position's target row after the n drafts' (speculative_step's
// layout), checked as the rows no decision reads are.
template <class T, class F, class O>
StepError verify_request(OneShot& row, const F& f, const T* p, const T* q, const std::int64_t* draft, std::size_t n,
                         std::int64_t bonus, const double* u, const double* eps, std::size_t eps_step, std::size_t V,
                         bool keep, T* pi, O* out, std::size_t width, const StepCheck& check = {}, bool bonus_row = false) {
  for (std::size_t j = 0; j < width; ++j) out[j] = O(-1);
  for (std::size_t j = 0; j < n; ++j)
    if (draft[j] < 0 || static_cast<std::size_t>(draft[j]) >= V) return {StepStatus::bad_token, static_cast<std::int64_t>(j)};
  if (bonus < 0 || static_cast<std::size_t>(bonus) >= V) return {StepStatus::bad_bonus, static_cast<std::int64_t>(n)};
  double stats[6];
  // The rows from `from` on that no decision reads: each target row, then each draft row.
  const auto check_rest = [&](std::size_t from) -> StepError {
    for (std::size_t l = from; l < n; ++l) {
      Status st = check_row(p + l * V, V, check.rtol_p, stats);
      if (st != Status::ok) return step_error(st, l, stats, nullptr);
      st = check_row(q + l * V, V, check.rtol_q, stats + 3);
      if (st != Status::ok) return step_error(st, l, stats, stats + 3);
    }
    if (bonus_row) {
      const Status st = check_row(p + n * V, V, check.rtol_p, stats);
      if (st != Status::ok) return step_error(st, n, stats, nullptr);
    }
    return {};
  };
  for (std::size_t j = 0; j < n; ++j) {
    const T* pj = p + j * V;
    const T* qj = q + j * V;
    const Status st = solve_position(row, f, pj, qj, V, eps[j * eps_step], keep, pi, RowCheck{check.rtol_p, check.rtol_q, stats});
    if (st != Status::ok) return step_error(st, j, stats, stats + 3);
    bool accepted;
    // stats[3] = Σq as the solve read it: 1/Σq is the very scale it normalised q by.
    out[j] = static_cast<O>(decide(pi, qj, draft[j], u + 2 * j, V, 1.0 / stats[3], accepted));
    if (accepted) continue;
    return check_rest(j + 1);
  }
  const StepError rest = check_rest(n);
  if (rest.status == StepStatus::ok) out[n] = static_cast<O>(bonus);
  return rest;
}

// A batch of B requests in the flattened layout: request b owns n[b] consecutive rows of q, draft,
// u (2 per row) and eps (or one budget for all: eps_step = 0) from start_b = Σ_{c<b} n[c], and rows
// start_b + b·extra of p (extra = 1 when p holds a bonus-position row after each request's drafts,
// as speculative_step's target does; 0 otherwise). out [B, width]. Returns the first request that
// failed (B if none) and its error. On nt threads (batch_threads), OpenMP over requests; each
// thread solves into its own scratch row.
//
// Requests go in chunks of at most max_rows rows (at least one request each); between chunks
// `stop()` is asked whether to stop (the bindings check for signals there, Ctrl-C). A chunk with a
// failed request ends the call: no later request can be the first to fail. Each thread's buffers
// go back to kKeepTokens when the call ends, stopped or not.
template <class T, class F, class O, class Stop>
std::size_t verify_batch(const F& f, const T* p, const T* q, const std::int64_t* draft, const std::int64_t* n,
                         const std::int64_t* bonus, const double* u, const double* eps, std::size_t eps_step,
                         std::size_t B, std::size_t V, std::size_t extra, bool keep, int nt, O* out, std::size_t width,
                         StepError& error, const StepCheck& check, std::size_t max_rows, const Stop& stop) {
  std::vector<std::size_t> start(B + 1, 0);
  for (std::size_t b = 0; b < B; ++b) start[b + 1] = start[b] + static_cast<std::size_t>(n[b]);
  std::vector<StepError> errors(B);
  // Requests [b0, b1); trim: the call ends with them.
  const auto run = [&](std::size_t b0, std::size_t b1, bool trim) {
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    {
      OneShot& row = thread_workspace();
      static thread_local std::vector<T> scratch;
      if (scratch.size() < V) scratch.resize(V);
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
      for (long long bb = static_cast<long long>(b0); bb < static_cast<long long>(b1); ++bb) {
        const std::size_t b = static_cast<std::size_t>(bb), s = start[b];
        errors[b] = verify_request(row, f, p + (s + b * extra) * V, q + s * V, draft + s, static_cast<std::size_t>(n[b]),
                                   bonus[b], u + 2 * s, eps + s * eps_step, eps_step, V, keep, scratch.data(), out + b * width,
                                   width, check, extra == 1);
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
