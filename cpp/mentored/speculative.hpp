// The speculative sampling step with a chosen verifier π (docs/theory.md §2), in vLLM's layout.
//
// For each sequence b and draft position j = 0..k−1, with x = draft[b, j] drawn from q[b, j]:
//     accept x  iff  u[b, j, 0] · q_x < π_x        (probability min(1, π_x/q_x) for u ~ U[0, 1)),
//     else emit  the first i with  C_i > u[b, j, 1] · C_{V−1},   C_i = Σ_{l≤i} (π_l − q_l)₊
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
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace mentored {

enum class StepStatus : int {
  ok = 0,
  bad_token = 1,  // a draft id outside [0, V)
};

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

// One sequence; returns its status.
template <class T>
StepStatus speculative_row(const T* pi, const T* q, const std::int64_t* draft, std::int64_t bonus, const double* u,
                           std::size_t k, std::size_t V, std::int64_t* out) {
  for (std::size_t j = 0; j <= k; ++j) out[j] = -1;
  for (std::size_t j = 0; j < k; ++j) {
    const std::int64_t x = draft[j];
    if (x < 0 || static_cast<std::size_t>(x) >= V) return StepStatus::bad_token;
    const T* pj = pi + j * V;
    const T* qj = q + j * V;
    if (u[2 * j] * static_cast<double>(qj[x]) < static_cast<double>(pj[x])) {
      out[j] = x;
      continue;
    }
    const auto residual = [&](std::size_t i) {
      return std::max(static_cast<double>(pj[i]) - static_cast<double>(qj[i]), 0.0);
    };
    std::int64_t y = inverse_cdf(residual, V, u[2 * j + 1]);
    if (y < 0) y = inverse_cdf([&](std::size_t i) { return static_cast<double>(pj[i]); }, V, u[2 * j + 1]);
    out[j] = y;
    return StepStatus::ok;
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

}  // namespace mentored
