// The seven built-in f-divergence generators of docs/theory.md §1, in tilted form.
//
// D_f(π‖p) = Σ_{p_i>0} p_i f(π_i/p_i) + f∞ · Σ_{p_i=0} π_i, with f convex and f(1) = 0.
// Adding c·(t − 1) to f adds c to f∞ (and −c to f(0)), and leaves D_f unchanged whenever Σπ = Σp. The core
// uses c = −f'(1), so that every term p_i f(π_i/p_i) is ≥ 0 and the sums that make D_f(π(s)‖p)
// carry no cancellation: D is then accurate to rounding relative to itself, even at s ≈ 0 where it
// is second order (kl: t log t − t + 1; reverse_kl: t − 1 − log t; the others have f'(1) = 0).
// The integer codes are exported by the bindings (mentored._core.Generator), which is where the
// Python side reads them.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

namespace mentored {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

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

// The names Python knows them by (the bindings export the enum from this table, and the registry of
// mentored/divergences.py must hold one entry per name: a new generator is added here and there).
constexpr const char* kGeneratorNames[kGeneratorCount] = {"tv", "kl", "reverse_kl", "chi2", "neyman_chi2", "hellinger", "js"};

// log t, through log1p near 1 where t − 1 is exact and log t is small.
inline double log_near_1(double t) { return std::fabs(t - 1.0) < 0.5 ? std::log1p(t - 1.0) : std::log(t); }

// log x for finite x > 0, written so that a loop over it vectorises (libm's log is a call per
// element): x = 2^e·m with m in [√½, √2), u = m − 1 exact, σ = u/(2 + u), and
//     log m = 2 atanh σ = u − σ(u − T),   T = Σ_{k≥1} 2σ^{2k}/(2k+1),
// since 2σ = u − σu. |σ| ≤ 0.1716, so ten terms of T leave a remainder below 2^-60 relative.
// e·ln2 is split so that e·ln2_hi is exact. Within a few ulps of std::log (tested against it).
inline double log_positive(double x) {
  constexpr double kLn2 = 0.69314718055994530942;
  const double ln2_hi = static_cast<double>(static_cast<float>(kLn2));  // 24 bits: e·ln2_hi exact
  const double ln2_lo = kLn2 - ln2_hi;
  constexpr double kSqrtHalf = 0.70710678118654752440;
  // Denormals: scale by 2^54 first, so that the exponent field holds all of e.
  const bool tiny = x < std::numeric_limits<double>::min();
  x *= tiny ? 18014398509481984.0 : 1.0;  // selects between constants: if-converted
  std::uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  // The exponent as a double without an int→double conversion (none in SSE2/AVX2 for 64 bits):
  // 2^52 + k has k in its low mantissa bits.
  const std::uint64_t ebits = (bits >> 52) | 0x4330000000000000ULL;
  double e;
  std::memcpy(&e, &ebits, sizeof e);
  e -= 4503599627370496.0 + 1023.0 + (tiny ? 54.0 : 0.0);
  const std::uint64_t mbits = (bits & 0x000FFFFFFFFFFFFFULL) | 0x3FE0000000000000ULL;  // m/2 in [½, 1)
  double m;
  std::memcpy(&m, &mbits, sizeof m);
  const bool low = m < kSqrtHalf;
  m *= low ? 2.0 : 1.0;  // [√½, √2)
  e += low ? 0.0 : 1.0;
  const double u = m - 1.0;
  const double sigma = u / (2.0 + u);
  const double z = sigma * sigma;
  double t = 2.0 / 21.0;
  t = t * z + 2.0 / 19.0;
  t = t * z + 2.0 / 17.0;
  t = t * z + 2.0 / 15.0;
  t = t * z + 2.0 / 13.0;
  t = t * z + 2.0 / 11.0;
  t = t * z + 2.0 / 9.0;
  t = t * z + 2.0 / 7.0;
  t = t * z + 2.0 / 5.0;
  t = t * z + 2.0 / 3.0;
  t *= z;
  return e * ln2_hi + ((u - sigma * (u - t)) + e * ln2_lo);
}

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
      return t > 0.0 ? (t - 1.0) * ((t - 1.0) / t) : kInf;  // no overflow of (t − 1)² near DBL_MAX
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

// c = f'(1) of the untilted generator (tv: the subgradient 0), so that f = f̃ + c·(t − 1).
inline double generator_tilt(Generator g) {
  switch (g) {
    case Generator::kl: return 1.0;           // f = t log t
    case Generator::reverse_kl: return -1.0;  // f = −log t
    default: return 0.0;
  }
}

// The untilted generator's tilt c, f(0) = f̃(0) − c and f∞ = f̃∞ + c.
struct GeneratorConstants {
  double tilt, f0, f_inf;
};
inline GeneratorConstants generator_constants(Generator g) {
  const double c = generator_tilt(g);
  return {c, generator_f(g, 0.0) - c, generator_f_inf(g) + c};
}

// f̃'(t) = f'(t) − c for t in [0, ∞], with f̃'(0) = f̃'(0+) and f̃'(∞) = f̃∞ (the limits). At tv's kink
// (t = 1) it is the one-sided derivative: from the right for side > 0, from the left otherwise.
// Written without cancellation near t = 1, where f̃' is small: λ = 1/(f'(t_hi) − f'(t_lo)) at a
// small budget is the reciprocal of a difference of two such values.
inline double generator_df(Generator g, double t, int side) {
  const double ln2 = 0.69314718055994530942;
  if (t == kInf) return generator_f_inf(g);
  switch (g) {
    case Generator::tv:
      return t > 1.0 ? 0.5 : t < 1.0 ? -0.5 : (side > 0 ? 0.5 : -0.5);
    case Generator::kl:  // log t
      return t > 0.0 ? log_near_1(t) : -kInf;
    case Generator::reverse_kl:  // 1 − 1/t
      return t > 0.0 ? (t - 1.0) / t : -kInf;
    case Generator::chi2:  // 2(t − 1)
      return 2.0 * (t - 1.0);
    case Generator::neyman_chi2:  // 1 − 1/t², without t² (which overflows past 1.3e154)
      return t > 0.0 ? ((t - 1.0) / t) * ((t + 1.0) / t) : -kInf;
    case Generator::hellinger:  // 1 − 1/√t = (t − 1)/(t + √t)
      return t > 0.0 ? (t - 1.0) / (t + std::sqrt(t)) : -kInf;
    case Generator::js:  // ½ log(2t/(1 + t))
      if (t == 0.0) return -kInf;
      if (t > 3.0) return 0.5 * (ln2 - std::log1p(1.0 / t));
      if (t < 1.0 / 3.0) return 0.5 * std::log(2.0 * t / (1.0 + t));
      return 0.5 * std::log1p((t - 1.0) / (t + 1.0));
  }
  return kNaN;
}

// Loops over many ratios, compiled twice on x86-64 (AVX2 and baseline, chosen at load time).
// The AVX2 copy does the same IEEE operations four at a time (no FMA is enabled, so nothing is
// contracted): results are bitwise the same on every machine.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(MENTORED_NO_CLONES)
#define MENTORED_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MENTORED_CLONES
#endif

MENTORED_CLONES inline void kl_many(const double* t, std::size_t n, double* out) {
  for (std::size_t i = 0; i < n; ++i) {
    const double x = t[i], v = x * log_positive(x) - (x - 1.0);
    out[i] = x > 0.0 ? (x < kInf ? v : kInf) : 1.0;
  }
}

MENTORED_CLONES inline void reverse_kl_many(const double* t, std::size_t n, double* out) {
  for (std::size_t i = 0; i < n; ++i) {
    const double x = t[i], v = (x - 1.0) - log_positive(x);
    out[i] = x > 0.0 ? v : kInf;
  }
}

// Ratios past DBL_MAX. A target token with a tiny p_i > 0 (a denormal p̂_i) can have q_i/p_i beyond
// DBL_MAX; it is a target token all the same, with its own ratio and its own finite cost
// p_i f(π_i/p_i). Such ratios, and the thresholds that reach them, are carried scaled: u = t·2⁻¹²⁸
// (every ratio of a token is below 2¹⁰⁷⁵, so u stays below 2⁹⁴⁷; the scaling by a power of two is
// exact wherever t itself is a double).
constexpr double kHugeDown = 0x1p-128;  // t → u
constexpr double kHugeUp = 0x1p128;     // u → t
constexpr double kLn2x128 = 128.0 * 0.69314718055994530942;

// The perspective y·f(t) of a built-in at t = u·2¹²⁸ > DBL_MAX, y > 0, from x = t·y = u·(y·2¹²⁸)
// and log t = log u + 128 ln 2, without forming t: finite whenever the term itself is.
inline double generator_term_huge(Generator g, double y, double u) {
  const double ln2 = 0.69314718055994530942;
  const double x = u * (y * kHugeUp), log_t = std::log(u) + kLn2x128;
  switch (g) {
    case Generator::tv:
      return 0.5 * (x - y);
    case Generator::kl:  // y(t log t − t + 1)
      return x * (log_t - 1.0) + y;
    case Generator::reverse_kl:  // y(t − 1 − log t)
      return (x - y) - y * log_t;
    case Generator::chi2: {  // y(t − 1)² = (x − y)²/y: the quotient alone overflows where x − y < 1
      const double d = x - y, a = d * (d / y);
      return a < kInf ? a : (d * d) / y;
    }
    case Generator::neyman_chi2:  // y(t − 1)²/t
      return (x - y) * ((x - y) / x);
    case Generator::hellinger: {  // y(√t − 1)²
      const double r = std::sqrt(x) - std::sqrt(y);
      return r * r;
    }
    case Generator::js:  // ½[x log(2x/(x+y)) + y log(2y/(x+y))]
      return 0.5 * (x * (ln2 - std::log1p(y / x)) + y * (ln2 + std::log(y) - std::log(x + y)));
  }
  return std::numeric_limits<double>::quiet_NaN();
}

// y·f(t) at t = u·2¹²⁸ for any generator functor: the functor's own `huge` when it has one (the
// built-ins), otherwise f∞·x, an upper bound (f(t) ≤ f∞(t − 1) for a convex f with f(1) = 0) within
// O(y log t) ≤ 1e-300 of the term when f∞ < ∞, and ∞ when f∞ = ∞ (a user generator is only
// known at finite t).
template <class F>
auto term_huge_of(const F& f, double y, double u, int) -> decltype(f.huge(y, u)) {
  return f.huge(y, u);
}
template <class F>
double term_huge_of(const F& f, double y, double u, long) {
  return f.f_inf < kInf ? f.f_inf * (u * (y * kHugeUp)) : kInf;
}
// y·f(u·2¹²⁸) for a scaled ratio u of the upper side (t > 1): y·f(t) itself where t and f(t) are
// doubles (the same bits as unscaled), the perspective where either overflows (kl's t log t passes
// DBL_MAX from t ≈ 2.5e305, chi2's (t − 1)² from t ≈ 1.3e154, while y·f(t) is finite for a small y).
template <class F>
double term_scaled(const F& f, double y, double u) {
  const double t = u * kHugeUp;
  const double v = t < kInf ? f(t) : kInf;
  return v < kInf ? y * v : term_huge_of(f, y, u, 0);
}

// A built-in generator as the functor the path algorithms take (see path.hpp).
struct BuiltinF {
  Generator g;
  double f_inf;
  explicit BuiltinF(Generator g_) : g(g_), f_inf(generator_f_inf(g_)) {}
  double operator()(double t) const { return generator_f(g, t); }
  // f'(t) of the untilted generator, one-sided at a kink (generator_df).
  double fprime(double t, int side) const { return generator_df(g, t, side) + generator_tilt(g); }
  double huge(double y, double u) const { return generator_term_huge(g, y, u); }
  // f at n ratios in [0, ∞): one loop per generator, branch-free where that lets it vectorise.
  void many(const double* t, std::size_t n, double* out) const {
    switch (g) {
      case Generator::kl:
        return kl_many(t, n, out);
      case Generator::reverse_kl:
        return reverse_kl_many(t, n, out);
      default:
        break;
    }
    for (std::size_t i = 0; i < n; ++i) out[i] = generator_f(g, t[i]);
  }
};

}  // namespace mentored
