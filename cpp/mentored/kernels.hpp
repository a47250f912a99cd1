// The streaming passes over a row, apart from the algorithms that use them: the row sums and
// checks (stats_pass, read by OneShot::build and by the input checks of the bindings), the π pass
// and its acceptance (pi_pass, accept_pass, accept_rule_pass, with the rounding of π to float32),
// the compensated-sum steps (TwoSum per lane, neumaier_add), and the selection of tokens by key
// (choose). Each runs at the speed of the memory: four float64 lanes in GCC/Clang vector types, or
// AVX2 where a table lookup does the packing; sums are in a fixed order, so the bits are the same
// in every clone and on every machine.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

#include "generators.hpp"

namespace mentored {
// π_i in the output type. float64: as is. float32: not to nearest but toward p_i, so that each
// term p_i f(π_i/p_i) moves toward f(1) = 0 and rounding cannot push D_f(π‖p) past the budget the
// float64 π met (docs/reliability.md): the float32 neighbour of v on p_i's side when it is not past
// p_i (by convexity its term is no larger than v's; proofs: Rounding.v, round_toward_term,
// round_toward_sound, float32_guarantee). Otherwise v and p_i share one gap between
// float32 neighbours lo < hi: for a normal p_i the one nearer p_i (its term is O(p_i·2⁻⁴⁶));
// below FLT_MIN, where the gap is wide relative to p_i (p_i may even lie below the smallest
// denormal), the one whose term p_i f(x/p_i) is smaller, since f(0) = ∞ forbids 0 for some f and
// a large f(x/p_i) forbids the denormal for others. `smaller_at_lo(lo, hi)` decides that.
// Chosen by the type of the output pointer.
template <class G>
inline double round_toward(double v, double, const G&, double*) {
  return v;
}
template <class G>
inline float round_toward(double v, double a, const G& smaller_at_lo, float*) {
  // The float32 neighbours of v (v ≥ 0): round to nearest, then step one ulp through the bits.
  // Arithmetic rather than branches: which way v rounds is a coin flip per token.
  const float r = static_cast<float>(v);
  const double rd = static_cast<double>(r);
  std::uint32_t bits;
  std::memcpy(&bits, &r, sizeof bits);
  const std::uint32_t lo_bits = bits - static_cast<std::uint32_t>(rd > v);
  const std::uint32_t hi_bits = bits + static_cast<std::uint32_t>(rd < v);
  float lo, hi;
  std::memcpy(&lo, &lo_bits, sizeof lo);
  std::memcpy(&hi, &hi_bits, sizeof hi);
  const bool down = v >= a;  // π at or above p: round down, toward p
  const float inner = down ? lo : hi;
  const double in = static_cast<double>(inner);
  if ((down & (in >= a)) | (!down & (in <= a))) return inner;  // bitwise: no branch on `down`
  if (a >= static_cast<double>(std::numeric_limits<float>::min())) {
    return a - static_cast<double>(lo) <= static_cast<double>(hi) - a ? lo : hi;
  }
  return smaller_at_lo(static_cast<double>(lo), static_cast<double>(hi)) ? lo : hi;
}

// The π pass of OneShot::build_pi, with what it needs of the solution.
struct PiRule {
  double ip, iq;      // 1/Σp, 1/Σq
  double t_lo, t_hi;  // thresholds (t_hi may be ∞); past DBL_MAX, t_hi holds t_hi·2⁻¹²⁸ (Point)
  double hi_pre;      // the upper clip is (p_i·hi_pre)·t_hi: hi_pre = 1, or 2¹²⁸ when t_hi is scaled
  double z;           // share of q given to {p = 0} on the continuation
  double lo_floor;    // the smallest positive double when t_lo > 0, else 0
};

// π_i in float64 from a = p_i/Σp, b = q_i/Σq: p·clip(q/p, t_lo, t_hi) as min/max (t_hi = ∞
// works as is; a scaled t_hi past DBL_MAX clips through hi_pre without overflow). Outside tokens
// (p_i = 0) get q·z on the continuation. A lower clip t_lo·p_i that
// underflows to 0 (a denormal p_i, a small t_lo > 0) is rounded toward p_i instead, to the
// smallest positive double: min(a, lo_floor) is that for a > 0 and 0 for a = 0. So π_i > 0
// wherever p_i > 0 and t_lo > 0, which f(0) = ∞ requires (the divergence reported, from t_lo,
// is then the divergence of this π); the mass this adds is below 1e-300. Both computed, one
// selected: the loop vectorises.
inline double pi_value(double a, double b, bool outside, const PiRule& x) {
  const double lower = std::max(x.t_lo * a, std::min(a, x.lo_floor));
  const double clipped = std::min(std::max(b, lower), x.t_hi * (a * x.hi_pre));
  const double continued = b * x.z;
  return outside ? continued : clipped;
}

// round_toward for v ≥ FLT_MIN and p_i ≥ FLT_MIN (build_pi redoes the other tokens), in double
// lanes so that the loop vectorises: clearing the low 29 of a double's 52 mantissa bits gives the
// float32 at or below it (float32 keeps 23), and adding 2^29 to those bits steps one float32 ulp
// up. Only double compares and selects: a select between booleans stops the vectoriser.
inline float round_toward_normal(double v, double a) {
  std::uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  const std::uint64_t lo_bits = bits & ~((std::uint64_t{1} << 29) - 1);
  const std::uint64_t up_bits = lo_bits + (std::uint64_t{1} << 29);
  double lo, up;
  std::memcpy(&lo, &lo_bits, sizeof lo);
  std::memcpy(&up, &up_bits, sizeof up);
  const double hi = lo == v ? lo : up;
  const bool down = v >= a;
  const double inner = down ? lo : hi;
  const double gap = down ? lo - a : a - hi;  // ≥ 0 iff the neighbour on p_i's side is not past p_i
  const double nearer = a - lo <= hi - a ? lo : hi;
  return static_cast<float>(gap >= 0.0 ? inner : nearer);  // exact: a float32 value
}

inline double round_normal(double v, double, double*) { return v; }
inline float round_normal(double v, double a, float*) { return round_toward_normal(v, a); }

// One pass: π into `out`. Rows without outside tokens (the usual case) skip their keys.
#if defined(__GNUC__)
#define MENTORED_INLINE inline __attribute__((always_inline))
#else
#define MENTORED_INLINE inline
#endif
template <class T, class U>
MENTORED_INLINE void pi_loop(const T* p, const T* q, const std::uint16_t* keys, std::size_t n, const PiRule& x, U* out) {
  const PiRule r = x;  // a local copy: stores to out cannot alias it
  if (keys == nullptr) {
    for (std::size_t i = 0; i < n; ++i) {
      const double a = static_cast<double>(p[i]) * r.ip, b = static_cast<double>(q[i]) * r.iq;
      out[i] = static_cast<U>(round_normal(pi_value(a, b, false, r), a, out));
    }
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const double a = static_cast<double>(p[i]) * r.ip, b = static_cast<double>(q[i]) * r.iq;
    out[i] = static_cast<U>(round_normal(pi_value(a, b, keys[i] == 0xFFFE, r), a, out));
  }
}

MENTORED_CLONES inline void pi_pass(const float* p, const float* q, const std::uint16_t* keys, std::size_t n,
                                    const PiRule& x, float* out) {
  pi_loop(p, q, keys, n, x, out);
}
MENTORED_CLONES inline void pi_pass(const double* p, const double* q, const std::uint16_t* keys, std::size_t n,
                                    const PiRule& x, double* out) {
  pi_loop(p, q, keys, n, x, out);
}
// float64 rows, π in float32 (a float32 target with a float64 draft), rounded toward p as above.
MENTORED_CLONES inline void pi_pass(const double* p, const double* q, const std::uint16_t* keys, std::size_t n,
                                    const PiRule& x, float* out) {
  pi_loop(p, q, keys, n, x, out);
}

// The streaming passes over a row (sums, keys) in GCC/Clang vector types, four float64 lanes:
// lane j keeps the running sums of the tokens i ≡ j mod 4, so the order of every sum is fixed by
// the token index (the same bits on any machine and in any clone), and the loops run at the
// speed of the memory. Vectors are passed by reference (by value would change the call ABI with
// the instruction set).
#if defined(__GNUC__)
#define MENTORED_VECTORS 1
typedef double v4d __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));
typedef long long v4i __attribute__((vector_size(32)));
typedef unsigned long long v4u __attribute__((vector_size(32)));
typedef unsigned short v4u16 __attribute__((vector_size(8)));
typedef int v4i32 __attribute__((vector_size(16)));
typedef unsigned v8u32 __attribute__((vector_size(32)));
typedef float v8f __attribute__((vector_size(32)));
typedef int v8i __attribute__((vector_size(32)));
typedef unsigned short v8u16 __attribute__((vector_size(16)));
inline void load4(const double* x, v4d& v) { std::memcpy(&v, x, sizeof v); }
inline void load4(const float* x, v4d& v) {
  v4f w;
  std::memcpy(&w, x, sizeof w);
  v = __builtin_convertvector(w, v4d);
}
inline double lanes_sum(const v4d& v) { return (v[0] + v[1]) + (v[2] + v[3]); }
inline double lanes_min(const v4d& v) { return std::min(std::min(v[0], v[1]), std::min(v[2], v[3])); }
#endif

// One row's Σx in float64, smallest and largest entry: {Σ, min, max}. A NaN shows in the sum
// (comparisons skip it). Lane j sums the entries i ≡ j mod 4: pass 1 of OneShot::build (the
// checks of a solve) and the input checks of the Python side (_core.row_stats) read these. The sum is
// compensated (Knuth's TwoSum per lane: the rounding error of each addition, exactly, collected in
// a carry), so that Σp is right to an ulp on rows of millions of tokens, where a plain sum drifts
// by 1e-13; where the plain sum is not finite (NaN, ∞, or finite entries overflowing) it is kept.
template <class T>
MENTORED_INLINE void stats_loop(const T* x, std::size_t n, double* out) {
  double sum = 0.0, carry = 0.0, lo = kInf, hi = -kInf;
  std::size_t i = 0;
#ifdef MENTORED_VECTORS
  const v4d inf = {kInf, kInf, kInf, kInf};
  v4d vs = {0.0, 0.0, 0.0, 0.0}, vc = vs, vlo = inf, vhi = -inf;
  for (; i + 4 <= n; i += 4) {
    v4d a;
    load4(x + i, a);
    const v4d t = vs + a, b = t - vs;
    vc += (vs - (t - b)) + (a - b);
    vs = t;
    vlo = a < vlo ? a : vlo;
    vhi = a > vhi ? a : vhi;
  }
  sum = lanes_sum(vs);
  carry = lanes_sum(vc);
  lo = lanes_min(vlo);
  hi = -lanes_min(-vhi);
#endif
  for (; i < n; ++i) {
    const double a = static_cast<double>(x[i]);
    const double t = sum + a, b = t - sum;
    carry += (sum - (t - b)) + (a - b);
    sum = t;
    lo = a < lo ? a : lo;
    hi = a > hi ? a : hi;
  }
  out[0] = std::isfinite(sum) ? sum + carry : sum, out[1] = lo, out[2] = hi;
}

// Σ min(π_i, q_i·iq) of a returned π (widened exactly) in Neumaier's compensated sum, four lanes
// (lane j takes i ≡ j mod 4, so the order is fixed by the index), then the lanes' sums and
// carries combined the same way: the acceptance of the π returned, to a few ulps of itself
// however small it is. 1 − TV + s, its value on the curve, cancels when the acceptance is small.
MENTORED_INLINE void neumaier_add(double& sum, double& carry, double x) {
  const double t = sum + x;
  carry += std::fabs(sum) >= std::fabs(x) ? (sum - t) + x : (x - t) + sum;
  sum = t;
}
#ifdef MENTORED_VECTORS
// neumaier_add in four lanes, for terms m ≥ 0 (then the running sums are ≥ 0 and |sum| ≥ |m| is sum ≥ m).
MENTORED_INLINE void neumaier_add4(v4d& vs, v4d& vc, const v4d& m) {
  const v4d t = vs + m;
  vc += vs >= m ? (vs - t) + m : (m - t) + vs;
  vs = t;
}
#endif
template <class T>
MENTORED_INLINE double accept_loop(const T* pi, const T* q, std::size_t n, double iq) {
  double sum = 0.0, carry = 0.0;
  std::size_t i = 0;
#ifdef MENTORED_VECTORS
  const v4d viq = {iq, iq, iq, iq};
  v4d vs = {0.0, 0.0, 0.0, 0.0}, vc = vs;
  for (; i + 4 <= n; i += 4) {
    v4d a, b;
    load4(pi + i, a);
    load4(q + i, b);
    b *= viq;
    const v4d m = a < b ? a : b;  // both ≥ 0
    neumaier_add4(vs, vc, m);
  }
  for (int j = 0; j < 4; ++j) neumaier_add(sum, carry, vs[j]);
  for (int j = 0; j < 4; ++j) carry += vc[j];
#endif
  for (; i < n; ++i) {
    const double a = static_cast<double>(pi[i]), b = static_cast<double>(q[i]) * iq;
    neumaier_add(sum, carry, a < b ? a : b);
  }
  return sum + carry;
}
MENTORED_CLONES inline double accept_pass(const double* pi, const double* q, std::size_t n, double iq) {
  return accept_loop(pi, q, n, iq);
}
// The same sum over the float64 π of the rule (pi_value), recomputed from the row: for a float32
// output, whose acceptance and divergence are reported for the float64 π it rounds (toward p, each
// π_i by at most one float32 ulp).
template <class T>
MENTORED_INLINE double accept_rule_loop(const T* p, const T* q, const std::uint16_t* keys, std::size_t n,
                                        const PiRule& x) {
  double sum = 0.0, carry = 0.0;
  std::size_t i = 0;
#ifdef MENTORED_VECTORS
  const v4d zero = {0.0, 0.0, 0.0, 0.0};
  const v4d ip = zero + x.ip, iq = zero + x.iq, t_lo = zero + x.t_lo, t_hi = zero + x.t_hi;
  const v4d hi_pre = zero + x.hi_pre, z = zero + x.z, lo_floor = zero + x.lo_floor;
  v4d vs = zero, vc = zero;
  for (; i + 4 <= n; i += 4) {
    v4d a, b;
    load4(p + i, a);
    load4(q + i, b);
    a *= ip;
    b *= iq;
    // pi_value, lane by lane: max(t_lo·a, min(a, lo_floor)), then the clip, or b·z outside.
    const v4d floor = a < lo_floor ? a : lo_floor, lo_clip = t_lo * a;
    const v4d lower = lo_clip < floor ? floor : lo_clip;
    const v4d up = t_hi * (a * hi_pre), raised = b < lower ? lower : b;
    v4d v = up < raised ? up : raised;
    if (keys != nullptr) {
      v4u16 k16;
      std::memcpy(&k16, keys + i, sizeof k16);
      const v4i outside = __builtin_convertvector(k16, v4i) == 0xFFFE;
      v = outside ? b * z : v;
    }
    const v4d m = v < b ? v : b;
    neumaier_add4(vs, vc, m);
  }
  for (int j = 0; j < 4; ++j) neumaier_add(sum, carry, vs[j]);
  for (int j = 0; j < 4; ++j) carry += vc[j];
#endif
  for (; i < n; ++i) {
    const double a = static_cast<double>(p[i]) * x.ip, b = static_cast<double>(q[i]) * x.iq;
    const double v = pi_value(a, b, keys != nullptr && keys[i] == 0xFFFE, x);
    neumaier_add(sum, carry, v < b ? v : b);
  }
  return sum + carry;
}
MENTORED_CLONES inline double accept_rule_pass(const float* p, const float* q, const std::uint16_t* keys,
                                               std::size_t n, const PiRule& x) {
  return accept_rule_loop(p, q, keys, n, x);
}
MENTORED_CLONES inline double accept_rule_pass(const double* p, const double* q, const std::uint16_t* keys,
                                               std::size_t n, const PiRule& x) {
  return accept_rule_loop(p, q, keys, n, x);
}

MENTORED_CLONES inline void stats_pass(const float* x, std::size_t n, double* out) { stats_loop(x, n, out); }
MENTORED_CLONES inline void stats_pass(const double* x, std::size_t n, double* out) { stats_loop(x, n, out); }

// The indices i < n, ascending, whose key k has lo ≤ k ≤ hi and lies outside [mid_lo, mid_hi], into
// out, and those with k inside [mid_lo, mid_hi], into mid (each holds n + 8: up to 7 slots past
// the last index may be written); returns the two counts. No branch on the keys: which tokens a
// range takes is a coin flip per token. With AVX2, eight keys at a time: compares, a movemask,
// and a permutation from a table that packs the chosen lanes to the front.
inline std::pair<std::size_t, std::size_t> choose_scalar(const std::uint16_t* keys, std::size_t first, std::size_t n,
                                                            int lo, int hi, int mid_lo, int mid_hi, std::uint32_t* out,
                                                            std::uint32_t* mid) {
  std::size_t m = 0, c = 0;
  for (std::size_t i = first; i < n; ++i) {
    const int k = keys[i];
    const bool inside = (k >= mid_lo) & (k <= mid_hi);
    out[m] = mid[c] = static_cast<std::uint32_t>(i);
    m += static_cast<std::size_t>((k >= lo) & (k <= hi) & !inside);
    c += static_cast<std::size_t>(inside);
  }
  return {m, c};
}

#if defined(__GNUC__) && defined(__x86_64__)
struct PackTable {
  alignas(32) std::uint32_t lanes[256][8];
  PackTable() {
    for (int mask = 0; mask < 256; ++mask) {
      int j = 0;
      for (int b = 0; b < 8; ++b) {
        if (mask & (1 << b)) lanes[mask][j++] = static_cast<std::uint32_t>(b);
      }
      while (j < 8) lanes[mask][j++] = 0;
    }
  }
};

__attribute__((target("avx2,popcnt"))) inline std::pair<std::size_t, std::size_t> choose_avx2(
    const std::uint16_t* keys, std::size_t n, int lo, int hi, int mid_lo, int mid_hi, std::uint32_t* out,
    std::uint32_t* mid) {
  static const PackTable table;
  const __m256i below = _mm256_set1_epi32(lo - 1), above = _mm256_set1_epi32(hi + 1);
  const __m256i mid_below = _mm256_set1_epi32(mid_lo - 1), mid_above = _mm256_set1_epi32(mid_hi + 1);
  const __m256i eight = _mm256_set1_epi32(8);
  __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  std::size_t m = 0, c = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i k = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(keys + i)));
    const __m256i in_range = _mm256_and_si256(_mm256_cmpgt_epi32(k, below), _mm256_cmpgt_epi32(above, k));
    const __m256i inside = _mm256_and_si256(_mm256_cmpgt_epi32(k, mid_below), _mm256_cmpgt_epi32(mid_above, k));
    const int mask = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_andnot_si256(inside, in_range)));
    const int mask_mid = _mm256_movemask_ps(_mm256_castsi256_ps(inside));
    const __m256i perm = _mm256_load_si256(reinterpret_cast<const __m256i*>(table.lanes[mask]));
    const __m256i perm_mid = _mm256_load_si256(reinterpret_cast<const __m256i*>(table.lanes[mask_mid]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + m), _mm256_permutevar8x32_epi32(index, perm));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(mid + c), _mm256_permutevar8x32_epi32(index, perm_mid));
    m += static_cast<std::size_t>(__builtin_popcount(static_cast<unsigned>(mask)));
    c += static_cast<std::size_t>(__builtin_popcount(static_cast<unsigned>(mask_mid)));
    index = _mm256_add_epi32(index, eight);
  }
  const auto tail = choose_scalar(keys, i, n, lo, hi, mid_lo, mid_hi, out + m, mid + c);
  return {m + tail.first, c + tail.second};
}
#endif

inline std::pair<std::size_t, std::size_t> choose(const std::uint16_t* keys, std::size_t n, int lo, int hi,
                                                  int mid_lo, int mid_hi, std::uint32_t* out, std::uint32_t* mid) {
#if defined(__GNUC__) && defined(__x86_64__) && !defined(MENTORED_NO_CLONES)
  // Short rows take the scalar loop (a table is no use there), so that the tests reach both.
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2 && n >= 64) return choose_avx2(keys, n, lo, hi, mid_lo, mid_hi, out, mid);
#endif
  return choose_scalar(keys, 0, n, lo, hi, mid_lo, mid_hi, out, mid);
}

}  // namespace mentored
