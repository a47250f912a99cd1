// The seven built-in f-divergence generators of MATH.md §1, in tilted form.
//
// D_f(π‖p) = Σ_{p_i>0} p_i f(π_i/p_i) + f∞ · Σ_{p_i=0} π_i, with f convex and f(1) = 0.
// Adding c·(t − 1) to f and subtracting c from f∞ leaves D_f unchanged whenever Σπ = Σp. The core
// uses c = −f'(1), so that every term p_i f(π_i/p_i) is ≥ 0 and the sums that make D_f(π(s)‖p)
// carry no cancellation: D is then accurate to rounding relative to itself, even at s ≈ 0 where it
// is second order (kl: t log t − t + 1; reverse_kl: t − 1 − log t; the others have f'(1) = 0).
// The integer codes are shared with mentored/divergences.py (_CODES); keep them equal.
#pragma once

#include <cmath>
#include <limits>

namespace mentored {

constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Generator : int {
  tv = 0,
  kl = 1,
  reverse_kl = 2,
  chi2 = 3,
  neyman_chi2 = 4,
  hellinger = 5,
  js = 6,
};

constexpr int kGeneratorCount = 7;

// log t, through log1p near 1 where t − 1 is exact and log t is small.
inline double log_near_1(double t) { return std::fabs(t - 1.0) < 0.5 ? std::log1p(t - 1.0) : std::log(t); }

// f(t) for t in [0, ∞]; f(0) and f(∞) are the limits.
inline double generator_f(Generator g, double t) {
  const double ln2 = 0.69314718055994530942;
  if (t == kInf) return kInf;  // every built-in grows without bound
  switch (g) {
    case Generator::tv:
      return 0.5 * std::fabs(t - 1.0);
    case Generator::kl:
      return t > 0.0 ? t * log_near_1(t) - (t - 1.0) : 1.0;
    case Generator::reverse_kl:
      return t > 0.0 ? (t - 1.0) - log_near_1(t) : kInf;
    case Generator::chi2:
      return (t - 1.0) * (t - 1.0);
    case Generator::neyman_chi2:
      return t > 0.0 ? (t - 1.0) * (t - 1.0) / t : kInf;
    case Generator::hellinger: {
      const double r = std::sqrt(t) - 1.0;
      return r * r;
    }
    case Generator::js: {
      // ½[t log(2t/(1+t)) + log(2/(1+t))]. With u = (t−1)/(t+1) this is g(u)/(2(1−u)) where
      // g(u) = (1+u)log(1+u) + (1−u)log(1−u) = Σ_k u^{2k}/(k(2k−1)); the series avoids the
      // cancellation of the two logarithms near t = 1, where f is second order.
      if (t == 0.0) return 0.5 * ln2;
      const double u = (t - 1.0) / (t + 1.0);
      if (std::fabs(u) < 0.1) {
        const double u2 = u * u;
        double g = 0.0, power = u2;
        for (int k = 1; k <= 9; ++k, power *= u2) g += power / (k * (2.0 * k - 1.0));
        return g / (2.0 * (1.0 - u));
      }
      return 0.5 * (t * (ln2 + std::log(t) - std::log1p(t)) + ln2 - std::log1p(t));
    }
  }
  return std::numeric_limits<double>::quiet_NaN();
}

// f∞ = lim f(t)/t of the tilted generator (reverse_kl: 0 + 1).
inline double generator_f_inf(Generator g) {
  switch (g) {
    case Generator::tv: return 0.5;
    case Generator::kl: return kInf;
    case Generator::reverse_kl: return 1.0;
    case Generator::chi2: return kInf;
    case Generator::neyman_chi2: return 1.0;
    case Generator::hellinger: return 1.0;
    case Generator::js: return 0.5 * 0.69314718055994530942;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

// A built-in generator as the functor the path algorithms take (see path.hpp).
struct BuiltinF {
  Generator g;
  double f_inf;
  explicit BuiltinF(Generator g_) : g(g_), f_inf(generator_f_inf(g_)) {}
  double operator()(double t) const { return generator_f(g, t); }
};

}  // namespace mentored
