// The seven built-in f-divergence generators of docs/theory.md §1, in tilted form.
//
// D_f(π‖p) = Σ_{p_i>0} p_i f(π_i/p_i) + f∞ · Σ_{p_i=0} π_i, with f convex and f(1) = 0.
// Adding c·(t − 1) to f adds c to f∞ (and −c to f(0)), and leaves D_f unchanged whenever Σπ = Σp. The core
// uses c = −f'(1), so that every term p_i f(π_i/p_i) is ≥ 0 and the sums that make D_f(π(s)‖p)
// carry no cancellation: D is then accurate to rounding relative to itself, even at s ≈ 0 where it
// is second order (kl: t log t − t + 1; reverse_kl: t − 1 − log t; the others have f'(1) = 0).
//
// Each generator is one type below (its name, f̃, f̃', f̃∞, tilt, the perspective past DBL_MAX and a
// vectorised f̃ at many ratios), named once in the list MENTORED_GENERATORS, from which the enum
// Generator, kGeneratorCount, kGeneratorNames and every dispatch on a Generator are generated. A new
// generator is one type and one entry at the end of the list here, and one registry entry in
// mentored/divergences.py (plus its member in the stub mentored/_core.pyi). The integer codes are
// the list positions, exported by the bindings (mentored._core.Generator), which is where the
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

// log(1 + x) for finite x > −1, vectorisable like log_positive: y = 1 + x rounded and c its rounding
// error, so that log(1 + x) = log(y + c) = log y + c/y up to (c/y)²/2 ≤ 2⁻¹⁰⁷. c = x − (y − 1) is
// exact below y = 2⁵³ (y − 1 is exact; for |x| ≤ 1 this is Fast2Sum's error term, above 1 a difference
// within a factor 2, Sterbenz; below x = −½, y is exact and c = 0); past 2⁵³, c/y < 2⁻⁵³ is under an
// ulp of log y ≥ 36. Within an ulp of std::log1p on the tests' grid; x itself for |x| < 2⁻⁵⁴.
inline double log1p_positive(double x) {
  const double y = 1.0 + x;
  return log_positive(y) + (x - (y - 1.0)) / y;
}

// Loops over many ratios, compiled twice on x86-64 (AVX2 and baseline, chosen at load time).
// The AVX2 copy does the same IEEE operations four at a time (nothing is contracted into FMA:
// -ffp-contract=off, CMakeLists.txt): results are bitwise the same on every machine. The loops are
// branch-free (selects between values computed for every lane) so that GCC vectorises them;
// -fno-math-errno (CMakeLists.txt) lets it vectorise std::sqrt.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(MENTORED_NO_CLONES)
#define MENTORED_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MENTORED_CLONES
#endif

// Ratios past DBL_MAX. A target token with a tiny p_i > 0 (a denormal p̂_i) can have q_i/p_i beyond
// DBL_MAX; it is a target token all the same, with its own ratio and its own finite cost
// p_i f(π_i/p_i). Such ratios, and the thresholds that reach them, are carried scaled: u = t·2⁻¹²⁸
// (every ratio of a token is below 2¹⁰⁷⁵, so u stays below 2⁹⁴⁷; the scaling by a power of two is
// exact wherever t itself is a double).
constexpr double kHugeDown = 0x1p-128;  // t → u
constexpr double kHugeUp = 0x1p128;     // u → t
constexpr double kLn2x128 = 128.0 * 0.69314718055994530942;

// ---------------------------------------------------------------- the generators, one type each
//
// Each type has
//   name         the name Python knows it by (exactly once in this file: tests/test_structure.py);
//   f(t)         f̃(t) for t in [0, ∞), f(0) the limit (generator_f adds t = ∞);
//   df(t, side)  f̃'(t) for t in [0, ∞), f̃'(0) = f̃'(0+), one-sided at a kink: from the right for
//                side > 0, from the left otherwise (generator_df adds t = ∞). Written without
//                cancellation near t = 1, where f̃' is small: λ = 1/(f'(t_hi) − f'(t_lo)) at a small
//                budget is the reciprocal of a difference of two such values;
//   dfinv(y)     (f̃')⁻¹(y), the t ≥ 0 where f̃'(t) = y: 0 from f̃'(0⁺) down, ∞ from f̃∞ up (where f̃' has
//                a flat piece, tv's, one point of the level set: the tree's weighted verifier solves tv
//                as the linear program it is, and reads no dfinv of it);
//   f_inf        f̃∞ = lim f̃(t)/t;
//   tilt         c = f'(1) of the untilted generator (tv: the subgradient 0), f = f̃ + c·(t − 1);
//   huge(y, u)   the perspective y·f̃(t) at t = u·2¹²⁸ > DBL_MAX, y > 0, from x = t·y = u·(y·2¹²⁸)
//                and log t = log u + 128 ln 2, without forming t: finite whenever the term itself is;
//   many(t,n,o)  o[i] = f̃(t[i]) for t[i] in [0, ∞] (∞ included), one vectorised loop: f up to a few
//                ulps of the terms it adds (tests/test_divergences.py; the same bits as f for tv, chi2,
//                neyman_chi2 and hellinger, whose loops are f's own expression).

struct Tv {
  static constexpr const char* name = "tv";
  static constexpr double f_inf = 0.5;
  static constexpr double tilt = 0.0;
  static double f(double t) { return 0.5 * std::fabs(t - 1.0); }
  static double df(double t, int side) { return t > 1.0 ? 0.5 : t < 1.0 ? -0.5 : (side > 0 ? 0.5 : -0.5); }
  static double dfinv(double y) { return y < -0.5 ? 0.0 : y > 0.5 ? kInf : 1.0; }
  static double huge(double y, double u) {
    const double x = u * (y * kHugeUp);
    return 0.5 * (x - y);
  }
  MENTORED_CLONES static void many(const double* t, std::size_t n, double* out) {
    for (std::size_t i = 0; i < n; ++i) out[i] = 0.5 * std::fabs(t[i] - 1.0);
  }
};

struct Kl {  // f = t log t
  static constexpr const char* name = "kl";
  static constexpr double f_inf = kInf;
  static constexpr double tilt = 1.0;
  static double f(double t) { return t > 0.0 ? t * log_near_1(t) - (t - 1.0) : 1.0; }
  static double df(double t, int) { return t > 0.0 ? log_near_1(t) : -kInf; }  // log t
  static double dfinv(double y) { return std::exp(y); }
  static double huge(double y, double u) {  // y(t log t − t + 1)
    const double x = u * (y * kHugeUp), log_t = std::log(u) + kLn2x128;
    return x * (log_t - 1.0) + y;
  }
  MENTORED_CLONES static void many(const double* t, std::size_t n, double* out) {
    for (std::size_t i = 0; i < n; ++i) {
      const double x = t[i], v = x * log_positive(x) - (x - 1.0);
      out[i] = x > 0.0 ? (x < kInf ? v : kInf) : 1.0;
    }
  }
};

struct ReverseKl {  // f = −log t
  static constexpr const char* name = "reverse_kl";
  static constexpr double f_inf = 1.0;  // 0 + 1
  static constexpr double tilt = -1.0;
  static double f(double t) { return t > 0.0 ? (t - 1.0) - log_near_1(t) : kInf; }
  static double df(double t, int) { return t > 0.0 ? (t - 1.0) / t : -kInf; }  // 1 − 1/t
  static double dfinv(double y) { return y < 1.0 ? 1.0 / (1.0 - y) : kInf; }
  static double huge(double y, double u) {  // y(t − 1 − log t)
    const double x = u * (y * kHugeUp), log_t = std::log(u) + kLn2x128;
    return (x - y) - y * log_t;
  }
  MENTORED_CLONES static void many(const double* t, std::size_t n, double* out) {
    for (std::size_t i = 0; i < n; ++i) {
      const double x = t[i], v = (x - 1.0) - log_positive(x);
      out[i] = x > 0.0 ? v : kInf;
    }
  }
};

struct Chi2 {  // f = (t − 1)²
  static constexpr const char* name = "chi2";
  static constexpr double f_inf = kInf;
  static constexpr double tilt = 0.0;
  static double f(double t) { return (t - 1.0) * (t - 1.0); }
  static double df(double t, int) { return 2.0 * (t - 1.0); }  // 2(t − 1)
  static double dfinv(double y) { return y > -2.0 ? 1.0 + 0.5 * y : 0.0; }
  static double huge(double y, double u) {  // y(t − 1)² = (x − y)²/y: the quotient alone overflows where x − y < 1
    const double x = u * (y * kHugeUp);
    const double d = x - y, a = d * (d / y);
    return a < kInf ? a : (d * d) / y;
  }
  MENTORED_CLONES static void many(const double* t, std::size_t n, double* out) {
    for (std::size_t i = 0; i < n; ++i) out[i] = (t[i] - 1.0) * (t[i] - 1.0);
  }
};

struct NeymanChi2 {  // f = (t − 1)²/t
  static constexpr const char* name = "neyman_chi2";
  static constexpr double f_inf = 1.0;
  static constexpr double tilt = 0.0;
  static double f(double t) { return t > 0.0 ? (t - 1.0) * ((t - 1.0) / t) : kInf; }  // no overflow of (t − 1)² near DBL_MAX
  static double df(double t, int) {  // 1 − 1/t², without t² (which overflows past 1.3e154)
    return t > 0.0 ? ((t - 1.0) / t) * ((t + 1.0) / t) : -kInf;
  }
  static double dfinv(double y) { return y < 1.0 ? 1.0 / std::sqrt(1.0 - y) : kInf; }  // 1/√(1 − y)
  static double huge(double y, double u) {  // y(t − 1)²/t
    const double x = u * (y * kHugeUp);
    return (x - y) * ((x - y) / x);
  }
  MENTORED_CLONES static void many(const double* t, std::size_t n, double* out) {
    for (std::size_t i = 0; i < n; ++i) {
      const double x = t[i], v = (x - 1.0) * ((x - 1.0) / x);  // ∞·(∞/∞) is NaN at x = ∞: selected away
      out[i] = x > 0.0 ? (x < kInf ? v : kInf) : kInf;
    }
  }
};

struct Hellinger {  // f = (√t − 1)²
  static constexpr const char* name = "hellinger";
  static constexpr double f_inf = 1.0;
  static constexpr double tilt = 0.0;
  static double f(double t) {
    const double r = std::sqrt(t) - 1.0;
    return r * r;
  }
  static double df(double t, int) { return t > 0.0 ? (t - 1.0) / (t + std::sqrt(t)) : -kInf; }  // 1 − 1/√t = (t − 1)/(t + √t)
  static double dfinv(double y) {  // 1/(1 − y)²
    const double r = y < 1.0 ? 1.0 / (1.0 - y) : kInf;
    return r * r;
  }
  static double huge(double y, double u) {  // y(√t − 1)²
    const double x = u * (y * kHugeUp);
    const double r = std::sqrt(x) - std::sqrt(y);
    return r * r;
  }
  MENTORED_CLONES static void many(const double* t, std::size_t n, double* out) {
    for (std::size_t i = 0; i < n; ++i) {
      const double r = std::sqrt(t[i]) - 1.0;
      out[i] = r * r;
    }
  }
};

struct Js {  // f = ½[t log(2t/(1+t)) + log(2/(1+t))]
  static constexpr const char* name = "js";
  static constexpr double f_inf = 0.5 * 0.69314718055994530942;
  static constexpr double tilt = 0.0;
  static double f(double t) {
    const double ln2 = 0.69314718055994530942;
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
  static double df(double t, int) {  // ½ log(2t/(1 + t))
    const double ln2 = 0.69314718055994530942;
    if (t == 0.0) return -kInf;
    if (t > 3.0) return 0.5 * (ln2 - std::log1p(1.0 / t));
    if (t < 1.0 / 3.0) return 0.5 * std::log(2.0 * t / (1.0 + t));
    return 0.5 * std::log1p((t - 1.0) / (t + 1.0));
  }
  static double dfinv(double y) {  // 2t/(1 + t) = e^{2y}: t = e^{2y}/(1 − e), e = expm1(2y) < 1 (both parts to their ulp)
    const double e = std::expm1(2.0 * y);
    return e < 1.0 ? std::exp(2.0 * y) / (1.0 - e) : kInf;
  }
  static double huge(double y, double u) {  // ½[x log(2x/(x+y)) + y log(2y/(x+y))]
    const double ln2 = 0.69314718055994530942;
    const double x = u * (y * kHugeUp);
    return 0.5 * (x * (ln2 - std::log1p(y / x)) + y * (ln2 + std::log(y) - std::log(x + y)));
  }
  // f at every ratio from both of its branches, selected. Near 1 (|u| < 0.1) the same series, by
  // Horner's rule with its coefficients 1/(k(2k − 1)) (f divides term by term), and 1/(2(1 − u)) as
  // (1 + t)/4, so that no lane divides more than it must (5 divisions in all). Elsewhere the
  // logarithms of log_positive, in three ranges that keep the digits f's two-logarithm form loses
  // (ln 2 + log t − log1p t: thousands of ulps of f past t = 1e20, and near |u| = 0.1 tens more than
  // the form below needs):
  //   t < ⅓:      log(2t/(1+t)) = ln 2 + log t − log1p t,  log(2/(1+t)) = ln 2 − log1p t;
  //   ⅓ ≤ t ≤ 3: log(1 + v) and log(1 − v) at v = u rounded to a multiple of 2⁻⁵² (1 ± v exact):
  //               t·log(1 + v) + log(1 − v) is stationary in v at v = u, so v − u costs O((v − u)²);
  //   t > 3:      log(2t/(1+t)) = ln 2 − log1p(1/t),  log(2/(1+t)) = ln 2 − log t − log1p(1/t).
  MENTORED_CLONES static void many(const double* t, std::size_t n, double* out) {
    const double ln2 = 0.69314718055994530942;
    for (std::size_t i = 0; i < n; ++i) {
      const double x = t[i];
      const double u = (x - 1.0) / (x + 1.0);  // NaN at x = ∞: selected away
      const double u2 = u * u;
      double h = 1.0 / 153.0;
      h = h * u2 + 1.0 / 120.0;
      h = h * u2 + 1.0 / 91.0;
      h = h * u2 + 1.0 / 66.0;
      h = h * u2 + 1.0 / 45.0;
      h = h * u2 + 1.0 / 28.0;
      h = h * u2 + 1.0 / 15.0;
      h = h * u2 + 1.0 / 6.0;
      h = h * u2 + 1.0;
      const double series = (u2 * h) * (0.25 * (1.0 + x));  // g(u)/(2(1 − u)), 2(1 − u) = 4/(1 + t)
      const bool lo = x < 1.0 / 3.0, hi = x > 3.0, mid = !lo && !hi;
      const double v = (u + 1.5) - 1.5;  // exact: 1.5 + u is in [1, 2] on the middle range
      const double l1 = log_positive(mid ? 1.0 + v : x);                   // log t, or log(1 + v)
      const double l2 = log1p_positive(mid ? -v : lo ? x : 1.0 / x);       // log1p t, log1p(1/t), or log(1 − v)
      const double a = lo ? (ln2 + l1) - l2 : hi ? ln2 - l2 : l1;          // log(2t/(1+t))
      const double b = lo ? ln2 - l2 : hi ? (ln2 - l1) - l2 : l2;          // log(2/(1+t))
      const double logs = 0.5 * (x * a + b);
      out[i] = x == 0.0 ? 0.5 * ln2 : std::fabs(u) < 0.1 ? series : x == kInf ? kInf : logs;  // NaN: NaN, as f
    }
  }
};

// ---------------------------------------------------------------- the list, and what it generates

// Every built-in, once: X(enumerator, type). The code of a generator is its position; a new one
// goes at the end, so that the codes of the others stay.
#define MENTORED_GENERATORS(X) \
  X(tv, Tv)                    \
  X(kl, Kl)                    \
  X(reverse_kl, ReverseKl)     \
  X(chi2, Chi2)                \
  X(neyman_chi2, NeymanChi2)   \
  X(hellinger, Hellinger)      \
  X(js, Js)

enum class Generator : int {
#define MENTORED_ENUMERATOR(id, Type) id,
  MENTORED_GENERATORS(MENTORED_ENUMERATOR)
#undef MENTORED_ENUMERATOR
};

#define MENTORED_PLUS_ONE(id, Type) +1
constexpr int kGeneratorCount = 0 MENTORED_GENERATORS(MENTORED_PLUS_ONE);
#undef MENTORED_PLUS_ONE

// The names Python knows them by (the bindings export the enum from this table, and the registry of
// mentored/divergences.py must hold one entry per name).
#define MENTORED_NAME(id, Type) Type::name,
constexpr const char* kGeneratorNames[] = {MENTORED_GENERATORS(MENTORED_NAME)};
#undef MENTORED_NAME

namespace detail {
constexpr bool same_text(const char* a, const char* b) { return *a == *b && (*a == '\0' || same_text(a + 1, b + 1)); }
#define MENTORED_MEMBER(id, Type) Generator::id,
constexpr Generator kGeneratorList[] = {MENTORED_GENERATORS(MENTORED_MEMBER)};
#undef MENTORED_MEMBER
// The enumerators are numbered 0, 1, ... in list order, and the names are distinct.
constexpr bool numbered_and_distinct() {
  for (int i = 0; i < kGeneratorCount; ++i) {
    if (static_cast<int>(kGeneratorList[i]) != i) return false;
    for (int j = 0; j < i; ++j)
      if (same_text(kGeneratorNames[i], kGeneratorNames[j])) return false;
  }
  return true;
}
}  // namespace detail

// The list, the count, the names and the enum are one: each type's name is its enumerator's.
static_assert(sizeof kGeneratorNames / sizeof kGeneratorNames[0] == kGeneratorCount, "one name per generator");
static_assert(sizeof detail::kGeneratorList / sizeof detail::kGeneratorList[0] == kGeneratorCount, "one enumerator per generator");
static_assert(detail::numbered_and_distinct(), "generator codes are the list positions, names distinct");
#define MENTORED_SAME_NAME(id, Type) \
  static_assert(detail::same_text(Type::name, #id), "the name of " #Type " is not its enumerator " #id);
MENTORED_GENERATORS(MENTORED_SAME_NAME)
#undef MENTORED_SAME_NAME

// What an integer past the list (never made by the bindings, which check the codes) gives: NaN.
struct NoGenerator {
  static constexpr const char* name = nullptr;
  static constexpr double f_inf = kNaN;
  static constexpr double tilt = kNaN;
  static double f(double) { return kNaN; }
  static double df(double, int) { return kNaN; }
  static double dfinv(double) { return kNaN; }
  static double huge(double, double) { return kNaN; }
  static void many(const double*, std::size_t n, double* out) {
    for (std::size_t i = 0; i < n; ++i) out[i] = kNaN;
  }
};

// fn(Type{}) for the type of g: the one dispatch on a Generator, a switch generated from the list and
// compiled with -Wswitch an error, so that an enumerator the list does not name stops the build.
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wswitch"
template <class Fn>
inline decltype(auto) visit_generator(Generator g, Fn&& fn) {
  switch (g) {
#define MENTORED_CASE(id, Type) \
  case Generator::id:           \
    return fn(Type{});
    MENTORED_GENERATORS(MENTORED_CASE)
#undef MENTORED_CASE
  }
  return fn(NoGenerator{});
}
#pragma GCC diagnostic pop

// f(t) for t in [0, ∞]; f(0) and f(∞) are the limits.
inline double generator_f(Generator g, double t) {
  if (t == kInf) return kInf;  // every built-in grows without bound
  return visit_generator(g, [t](auto G) { return decltype(G)::f(t); });
}

// f∞ = lim f(t)/t of the tilted generator (reverse_kl: 0 + 1).
inline double generator_f_inf(Generator g) {
  return visit_generator(g, [](auto G) { return decltype(G)::f_inf; });
}

// c = f'(1) of the untilted generator (tv: the subgradient 0), so that f = f̃ + c·(t − 1).
inline double generator_tilt(Generator g) {
  return visit_generator(g, [](auto G) { return decltype(G)::tilt; });
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
inline double generator_df(Generator g, double t, int side) {
  if (t == kInf) return generator_f_inf(g);
  return visit_generator(g, [t, side](auto G) { return decltype(G)::df(t, side); });
}

// (f̃')⁻¹(y) for y in [−∞, ∞]: the t ≥ 0 with f̃'(t) = y (0 below f̃'(0⁺), ∞ from f̃∞ up).
inline double generator_dfinv(Generator g, double y) {
  return visit_generator(g, [y](auto G) { return decltype(G)::dfinv(y); });
}

// The perspective y·f(t) of a built-in at t = u·2¹²⁸ > DBL_MAX, y > 0 (each type's huge).
inline double generator_term_huge(Generator g, double y, double u) {
  return visit_generator(g, [y, u](auto G) { return decltype(G)::huge(y, u); });
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
  // f̃'(t) and its inverse (the tilted generator's, as the tree's weighted verifier reads them).
  double df(double t) const { return generator_df(g, t, 1); }
  double dfinv(double y) const { return generator_dfinv(g, y); }
  double huge(double y, double u) const { return generator_term_huge(g, y, u); }
  // f at n ratios in [0, ∞]: the generator's vectorised loop.
  void many(const double* t, std::size_t n, double* out) const {
    visit_generator(g, [t, n, out](auto G) { decltype(G)::many(t, n, out); });
  }
};

}  // namespace mentored
