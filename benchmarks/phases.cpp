// Where the one-shot solve spends its time, phase by phase, on one core.
//
//   g++ -O3 -std=gnu++17 -fno-trapping-math -fno-math-errno -ffp-contract=off -fopenmp -Icpp benchmarks/phases.cpp -o /tmp/phases && /tmp/phases
//
// Rows as in benchmarks/speed.py (softmax of N(0, 3²) logits, the drafter's a copy plus N(0, 1)
// noise), float32, 64 × 131072, kl, budget 0.1. Prints the best over five sweeps of the mean per
// row, in ms: build (the checking pass with the sums, keys, bucket sums), search (bracket
// and exact search, f at the unclipped tokens included), π. The ratios to a streaming pass are
// benchmarks/speed.py's.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "mentored/solve.hpp"

using namespace mentored;
using Clock = std::chrono::steady_clock;

static double ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

int main() {
  const std::size_t n = 131072, rows = 64;
  std::vector<float> P(rows * n), Q(rows * n), pi(rows * n);
  std::mt19937_64 rng(0);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (std::size_t b = 0; b < rows; ++b) {
    std::vector<double> a(n), c(n);
    double sa = 0.0, sc = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      const double logit = 3.0 * normal(rng);
      a[i] = std::exp(logit);
      c[i] = std::exp(logit + normal(rng));
      sa += a[i];
      sc += c[i];
    }
    for (std::size_t i = 0; i < n; ++i) {
      P[b * n + i] = static_cast<float>(a[i] / sa);
      Q[b * n + i] = static_cast<float>(c[i] / sc);
    }
  }
  const BuiltinF f(Generator::kl);
  OneShot row;
  double best_build = 1e30, best_search = 1e30, best_pi = 1e30;
  for (int sweep = 0; sweep < 5; ++sweep) {
    double build = 0.0, search = 0.0, write = 0.0;
    for (std::size_t b = 0; b < rows; ++b) {
      const float* p = P.data() + b * n;
      const float* q = Q.data() + b * n;
      const auto t0 = Clock::now();
      if (row.build(p, q, n) != Status::ok) return 1;
      const auto t1 = Clock::now();
      const Point x = row.solve_budget(f, 0.1);
      const auto t2 = Clock::now();
      row.build_pi(p, q, x, pi.data() + b * n, f);
      const auto t3 = Clock::now();
      build += ms(t0, t1), search += ms(t1, t2), write += ms(t2, t3);
    }
    best_build = std::min(best_build, build / rows);
    best_search = std::min(best_search, search / rows);
    best_pi = std::min(best_pi, write / rows);
  }
  std::printf("ms per row of %zu tokens, one core: build %.3f, search %.3f, pi %.3f, total %.3f\n", n, best_build,
              best_search, best_pi, best_build + best_search + best_pi);
  return 0;
}
