// One-shot mentored decoding for one row in expected O(n): no full sort.
//
// Same answer as Path::solve_budget (path.hpp), up to rounding, found differently. Tokens are
// bucketed by the bit pattern of their ratio r = q/p (64 buckets per octave; the order of positive
// doubles is the order of their bits), with per-bucket sums of p and q. At a bucket edge e the
// functions of docs/theory.md §3 are exact from those sums,
//     Down(e) = TV − (e·P_{r<e} − Q_{r<e}),   Up(e) = D_up − (Q_{r>e} − e·P_{r>e}),
// so a threshold is located to its bucket by binary search over edges, and only that bucket is
// sorted to invert exactly inside it (proofs: Inversion.v, Down_inversion / Up_inversion).
//
// The budget search (D is nondecreasing in s: Monotone.v, D_monotone) runs in two phases.
//  1. On bucket sums alone: f at the bucket edges and at each bucket's mean ratio bound Σ p f(r)
//     per bucket (monotonicity of f on each side of 1, Jensen, the chord; proofs: Bracket.v,
//     bracket_sound, threshold_interval), hence D(s) from below
//     and above; bisection brackets the answer to a few buckets of each threshold.
//  2. Exact, by bisection inside the bracket. Only the tokens of the buckets from one threshold to
//     the other are touched: those the thresholds can visit are moved into bucket order (a
//     counting sort restricted to them) and sorted when visited; those always between the
//     thresholds only need Σ p f(r), taken straight from the row (fill_split).
// Per row: a pass for the keys (with the checks and, unless given, the sums), one for the bucket
// sums, one for π, and f once per unclipped token; no work proportional to the number of buckets.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "generators.hpp"
#include "kernels.hpp"
#include "path.hpp"

namespace mentored {

// f at many ratios: one call of f.many when the functor has it (a user generator evaluated by
// numpy), otherwise one call per ratio.
template <class F>
auto evaluate_many(const F& f, const double* t, std::size_t n, double* out, int) -> decltype(f.many(t, n, out), void()) {
  f.many(t, n, out);
}
template <class F>
void evaluate_many(const F& f, const double* t, std::size_t n, double* out, long) {
  for (std::size_t i = 0; i < n; ++i) out[i] = f(t[i]);
}

class OneShot {
 public:
  // Buckets: [0, kLower) hold r < 1 ascending (bucket 0: r < 2^-kOctaves, zeros included);
  // [kLower, kBuckets) hold r > 1 ascending (the last: r ≥ 2^kOctaves, +inf included).
  static constexpr int kSub = 6;  // mantissa bits: 64 buckets per octave
  static constexpr int kOctaves = 48;
  static constexpr int kLower = 1 + kOctaves * (1 << kSub);
  static constexpr int kBuckets = 2 * kLower;
  // Keys of tokens outside the buckets: p_i = q_i (π_i = p_i throughout), and {p = 0}.
  static constexpr std::uint16_t kNone = 0xFFFF, kOutside = 0xFFFE;
  // The top bucket, r ≥ 2^kOctaves: its tokens' ratios (Token::r) and its threshold are held
  // scaled, u = r·2⁻¹²⁸ (generators.hpp), since q/p may pass DBL_MAX there (a denormal p_i).
  static constexpr int kTop = kBuckets - 1;
  static int key(double r);  // the bucket of a ratio r ≥ 0
  // The ratio of a token of bucket k as Token::r holds it.
  static double token_ratio(int k, double a, double b) { return k == kTop ? scaled_quotient(b, a) : b / a; }

  // Pass 1 reads the row's sums and checks every entry (input_stats); pass 2 its bucket keys.
  template <class T>
  Status build(const T* p, const T* q, std::size_t n);
  // {Σp, min p, max p, Σq, min q, max q} of the row given to build (stats_pass), set whatever the
  // status: what the caller needs to say why a row was refused.
  const double* input_stats() const { return stats_; }

  double tv() const { return tv_; }
  double d_up() const { return d_up_; }
  double s_end() const { return s_end_; }
  double s_max(double f_inf) const { return std::isinf(f_inf) ? std::min(s_end_, d_up_) : s_end_; }

  // Thresholds at s (s in [0, s_end]).
  Point at(double s) {
    Point x;
    x.s = s;
    fill_for(s);
    if (s > 0.0) {
      x.t_lo = lower(s).t;
      const Side hi = upper(s);
      if (hi.bucket == kTop) set_upper(x, hi.t);
      else x.t_hi = hi.t;
    }
    return x;
  }

  // Per-token buffers back to at most `tokens` entries of capacity (release_above).
  void trim(std::size_t tokens);
  // Bytes held by the per-token buffers (their capacity), for tests.
  std::size_t token_bytes() const;

  // D_f(π(s)‖p), exact to rounding (f is the tilted generator: every term ≥ 0).
  template <class F>
  double divergence(const F& f, double s);

  // The largest s ≤ s_max with D_f(π(s)‖p) ≤ budget.
  template <class F>
  Point solve_budget(const F& f, double budget);

  // The optimum of max A(π) − price·D_f(π‖p), price in (0, ∞): the largest s ≤ s_max where
  // price·D'(s⁺) ≤ 1 (path.hpp, marginal_cost), as Path::solve_price finds it.
  template <class F>
  Point solve_price(const F& f, double price);

  // π(s) from the input row; returns its acceptance Σ min(π_i, q_i) = 1 − TV(p, q) + s.
  // f decides the rounding of π to float32 in one rare case (round_toward).
  template <class T, class U, class F>
  double build_pi(const T* p, const T* q, const Point& x, U* out, const F& f) const;

 private:
  struct Token {
    double r, p, q;
  };
  // Inside a sorted bucket, running sums aligned with TokenState::tokens: prefix sums (over [0, i])
  // of P, Q and suffix sums (over [i, m)) of F on the lower side; the reverse on the upper side.
  struct Cumulative {
    double P, Q, F;
  };

  // The state of a row, by purpose. Per token (sized by the row; trim releases them):
  struct TokenState {
    std::vector<std::uint16_t> keys;  // every token's bucket key (the keys pass)
    // Tokens in bucket order, bucket k at [start[k], start[k + 1]) (a counting sort), for the
    // buckets [filled_lo_, filled_hi_] only: the search needs those around r = 1 and the thresholds.
    std::vector<Token> tokens;
    std::vector<Cumulative> cum;  // aligned with tokens, inside the sorted buckets
  };
  // Per bucket (fixed size): the sums of the bucket pass and the counting sort. count, P, Q are per
  // 16-bit key (kOutside and kNone have slots too), zero outside [kmin_, kmax_] and those two.
  struct BucketSums {
    std::vector<std::size_t> count;
    std::vector<double> P, Q;
    std::vector<std::size_t> start;              // first token of each bucket in TokenState::tokens
    std::vector<std::size_t> pos;                // next free slot of each bucket (the counting sort)
    std::vector<double> below_P, below_Q;        // lower side: sums over buckets before k
    std::vector<double> above_P, above_Q;        // upper side: sums over buckets after k
  };
  // Per bucket, computed on demand for the generator of the row (reset through touch/dirty_*):
  struct BucketLazy {
    std::vector<double> F;                // per-bucket Σ p f(r), NaN until computed
    std::vector<char> sorted, fcum_ready;
    // Lazily grown runs of computed buckets around r = 1 and their running sums: mid_lo[k] =
    // Σ_{k < j < kLower} F_j for k ≥ lo_reach_; mid_hi[k] = Σ_{kLower ≤ j < k} F_j for k ≤ hi_reach_.
    std::vector<double> mid_lo, mid_hi;
  };
  // Per bucket: bounds on D_f(π(s)‖p) from bucket sums and f at bucket edges (bound_buckets).
  struct BucketBounds {
    std::vector<double> fedge;          // f at bucket edges
    std::vector<double> fmean;          // f at Q_k/P_k
    std::vector<double> low_lo, up_lo;  // lower side: Σ over buckets ≥ k of the bounds
    std::vector<double> low_hi, up_hi;  // upper side: Σ over buckets < k of the bounds
  };
  // Scratch, sized by a bucket or by the row (trim releases them).
  struct Scratch {
    std::vector<double> ratios, fvals;         // f_at
    std::vector<std::uint64_t> order;          // sort_bucket
    std::vector<Token> spare;                  // sort_bucket
    std::vector<std::uint32_t> chosen, middle;  // fill: choose() into them
    std::vector<double> weights;               // fill_split
  };
  TokenState tok_;
  BucketSums bucket_;
  BucketLazy lazy_;
  BucketBounds bounds_;
  Scratch scratch_;

  struct Side {
    double t;        // the threshold (scaled, u = t·2⁻¹²⁸, when bucket = kTop)
    double clipped;  // p-mass of the clipped tokens
    int bucket;      // bucket holding the threshold
    std::size_t j;   // tokens of that bucket (in sorted order) on the clipped side: [0, j) or [j, m)
  };
  // clipped·f(t) of a side: through the perspective in the top bucket (t may pass DBL_MAX).
  template <class F>
  static double side_term(const F& f, const Side& x) {
    return x.bucket == kTop ? term_scaled(f, x.clipped, x.t) : x.clipped * f(x.t);
  }

  template <class T>
  Status sums_check(const T* p, const T* q, std::size_t n);  // pass 1: Σp, Σq and the checks
  void set_input(const float* p, const float* q) { pf_ = p; qf_ = q; pd_ = qd_ = nullptr; }
  void set_input(const double* p, const double* q) { pd_ = p; qd_ = q; pf_ = qf_ = nullptr; }
  static double edge(int k);  // lower edge of bucket k
  void sort_bucket(int k);
  template <class F>
  double bucket_f(const F& f, int k);  // Σ p f(r) over bucket k, cached
  template <class F>
  void bucket_fcum(const F& f, int k);  // cumulative Σ p f(r) inside sorted bucket k
  template <class F>
  void f_at(const F& f, int k) {  // p f(r) at the tokens of (filled) bucket k, into scratch_.fvals
    const std::size_t m = begin(k + 1) - begin(k), first = begin(k);
    const double scale = k == kTop ? kHugeUp : 1.0;  // top bucket: ratios held scaled
    scratch_.ratios.resize(m);
    scratch_.fvals.resize(m);
    for (std::size_t j = 0; j < m; ++j) scratch_.ratios[j] = tok_.tokens[first + j].r * scale;
    evaluate_many(f, scratch_.ratios.data(), m, scratch_.fvals.data(), 0);
    for (std::size_t j = 0; j < m; ++j) {
      const Token& x = tok_.tokens[first + j];
      // Top bucket: where r or f(r) overflows, the perspective p f(r) from the scaled ratio.
      double& v = scratch_.fvals[j];
      v = k != kTop || v < kInf ? x.p * v : term_huge_of(f, x.p, x.r, 0);
    }
  }
  template <class F>
  double middle_lower(const F& f, int b);  // Σ p f(r) over lower buckets (b, kLower)
  template <class F>
  double middle_upper(const F& f, int b);  // Σ p f(r) over upper buckets [kLower, b)
  Side lower(double s);
  Side upper(double s);
  int lower_bucket(double g) const;  // the bucket holding t_lo where Down(t_lo) = TV − g
  int upper_bucket(double h) const;  // the bucket holding t_hi where Up(t_hi) = D_up − h
  // Bounds on D_f(π(s)‖p) from bucket sums and f at bucket edges (bound_buckets), for the search.
  template <class F>
  void bound_buckets(const F& f);
  template <class F>
  void divergence_bounds(const F& f, double s, double& low, double& up) const;

  double sp_ = 0.0, sq_ = 0.0, ip_ = 1.0, iq_ = 1.0;
  double stats_[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
  double min_a_ = kInf, min_b_ = kInf;  // smallest positive p_i/Σp and q_i/Σq (build_pi)
  double tv_ = 0.0, d_up_ = 0.0, q0_ = 0.0, s_end_ = 0.0;
  int filled_lo_ = 0, filled_hi_ = -1;
  std::pair<std::size_t, std::size_t> pick(int lo, int hi, int mid_lo, int mid_hi) {
    const std::size_t n = tok_.keys.size();
    scratch_.chosen.resize(n + 8);
    scratch_.middle.resize(n + 8);
    return choose(tok_.keys.data(), n, lo, hi, mid_lo, mid_hi, scratch_.chosen.data(), scratch_.middle.data());
  }
  void fill(int lo, int hi);  // fill buckets [lo, hi] (and keep those already filled)
  const float *pf_ = nullptr, *qf_ = nullptr;  // the input row, whichever its type
  const double *pd_ = nullptr, *qd_ = nullptr;
  void fill_bucket(int k) {
    if (k >= hole_lo_ && k <= hole_hi_) fill_hole();
    else if (k < filled_lo_ || k > filled_hi_) fill(0, kBuckets - 1);  // unforeseen: fill them all
  }
  // Buckets [hole_lo_, hole_hi_] inside the filled range have lazy_.F but no tokens (fill_split).
  int hole_lo_ = 1, hole_hi_ = 0;
  template <class F>
  void fill_split(const F& f, int lo, int hi, int mid_lo, int mid_hi);
  void fill_hole();
  template <class T>
  static void gather_ratios(const T* p, const T* q, const std::uint32_t* index, std::size_t len, double ip, double iq,
                            double* a, double* r);
  void scatter(std::size_t m);  // scratch_.chosen[0, m) into their buckets
  void fill_for(double s);  // fill what D_f(π(s)‖p) and the thresholds at s need
  // Per-bucket arrays are computed over the occupied buckets [kmin_, kmax_] only (and the run
  // of empty buckets between them and r = 1 where that matters); outside it they are constant,
  // and these accessors clamp to it. No per-row work is O(number of buckets).
  int kmin_ = 0, kmax_ = -1;
  std::size_t begin(int k) const { return bucket_.start[clamp(k, kmin_, kmax_ + 1)]; }  // first token of bucket k
  int below_lo() const { return std::min(kmin_, kLower); }
  int below_hi() const { return std::min(kmax_ + 1, kLower); }
  int above_lo() const { return std::max(kmin_, kLower); }
  int above_hi() const { return std::max(kmax_ + 1, kLower); }
  static int clamp(int k, int lo, int hi) { return std::min(std::max(k, lo), hi); }
  double below_P(int k) const { return bucket_.below_P[clamp(k, below_lo(), below_hi())]; }
  double below_Q(int k) const { return bucket_.below_Q[clamp(k, below_lo(), below_hi())]; }
  double above_P(int k) const { return bucket_.above_P[clamp(k, above_lo(), above_hi())]; }
  double above_Q(int k) const { return bucket_.above_Q[clamp(k, above_lo(), above_hi())]; }
  double low_lo(int k) const { return bounds_.low_lo[clamp(k, below_lo(), below_hi())]; }
  double up_lo(int k) const { return bounds_.up_lo[clamp(k, below_lo(), below_hi())]; }
  double low_hi(int k) const { return bounds_.low_hi[clamp(k, above_lo(), above_hi())]; }
  double up_hi(int k) const { return bounds_.up_hi[clamp(k, above_lo(), above_hi())]; }
  int edges_lo_ = 1, edges_hi_ = 0;  // f is known at the edges [edges_lo_, edges_hi_]
  double fedge(int k) const { return k >= edges_lo_ && k <= edges_hi_ ? bounds_.fedge[k] : kInf; }
  // Buckets whose lazy_.F, lazy_.sorted, lazy_.fcum_ready entries the last row set: reset by the next build.
  int dirty_lo_ = 0, dirty_hi_ = -1;
  void touch(int k) {
    dirty_lo_ = std::min(dirty_lo_, k);
    dirty_hi_ = std::max(dirty_hi_, k);
  }
  double cum_before(int k, std::size_t j, double Cumulative::*field) const {  // over tokens [0, j)
    return j == 0 ? 0.0 : tok_.cum[begin(k) + j - 1].*field;
  }
  int lo_reach_ = kLower - 1, hi_reach_ = kLower;
};

// ---------------------------------------------------------------------------------------------

// The key of one token exactly as the passes define it: r = (q·iq)/(p·ip) in float64.
inline std::uint16_t exact_key(double pv, double qv, double ip, double iq);

// What the keys pass learns of the row besides the keys.
struct KeysInfo {
  int lo, hi;          // the smallest and largest bucket taken (kBuckets and −1 if none)
  double min_a, min_b; // the smallest positive p_i/Σp and q_i/Σq
};

// Bucket keys (OneShot::key) of the tokens of a row scaled by ip = 1/Σp, iq = 1/Σq (the row
// checked by pass 1), with the special keys for p_i = 0 (outside) and for p_i = q_i (none). q/p
// past DBL_MAX (r = ∞) keys the top bucket.
template <class T>
MENTORED_INLINE KeysInfo keys_loop(const T* p, const T* q, std::size_t n, double ip, double iq, std::uint16_t* keys) {
  constexpr long long buckets = OneShot::kBuckets;
  long long lo = buckets, hi = -1;
  double ma = kInf, mb = kInf;
  std::size_t i = 0;
#ifdef MENTORED_VECTORS
  constexpr long long lower = OneShot::kLower, sub = OneShot::kSub;
  const v4d vip = {ip, ip, ip, ip}, viq = {iq, iq, iq, iq}, zero = {0.0, 0.0, 0.0, 0.0};
  const v4d inf = {kInf, kInf, kInf, kInf};
  constexpr int ibuckets = OneShot::kBuckets;
  v4i32 vlo = {ibuckets, ibuckets, ibuckets, ibuckets}, vhi = {-1, -1, -1, -1};
  v4d vma = inf, vmb = inf;
  if constexpr (std::is_same<T, float>::value) {
    // float32 rows, eight tokens at a time: the key from r ≈ (q/p)·(Σp/Σq) in float32, within
    // 3 float32 ulps of r (three roundings of 2⁻²⁴), so exact unless r lies within a few ulps of a
    // bucket edge (edges keep the low 23 − kSub mantissa bits zero) or the float32 quotient is
    // not a normal number: those tokens get exact_key. One float64 division per token saved.
    const double c = ip > 0.0 ? iq / ip : 0.0;  // r = (q/p)·c with c = Σq⁻¹/Σp⁻¹ = Σp/Σq
    if (c > 0x1p-100 && c < 0x1p100) {
      const float cf = static_cast<float>(c);
      const v8f fzero = {0, 0, 0, 0, 0, 0, 0, 0}, finf = fzero + std::numeric_limits<float>::infinity();
      constexpr int kLow = (1 << (23 - sub)) - 1, kMargin = 8;
      v8i vlo8 = {ibuckets, ibuckets, ibuckets, ibuckets, ibuckets, ibuckets, ibuckets, ibuckets};
      v8i vhi8 = vlo8 * 0 - 1;
      v8f vma8 = finf, vmb8 = finf;
      for (; i + 8 <= n; i += 8) {
        v8f pf, qf;
        std::memcpy(&pf, p + i, sizeof pf);
        std::memcpy(&qf, q + i, sizeof qf);
        vma8 = (pf > fzero) & (pf < vma8) ? pf : vma8;  // scaled by ip below (monotone)
        vmb8 = (qf > fzero) & (qf < vmb8) ? qf : vmb8;
        const v8f d = qf / pf;
        const v8f r = d * cf + fzero;  // + 0 turns −0 into +0
        const v8i bits = (v8i)r, dbits = (v8i)d;
        const v8i lin = (bits >> (23 - sub)) - static_cast<int>(127 << sub);
        const v8i below = lin + static_cast<int>(lower) < 0 ? 0 : lin + static_cast<int>(lower);
        const v8i above = static_cast<int>(lower) + (lin < static_cast<int>(lower - 1) ? lin : static_cast<int>(lower - 1));
        const v8i zero_p = pf == fzero;
        v8i k = lin < 0 ? below : above;
        k = zero_p ? static_cast<int>(OneShot::kOutside) : k;
        const v8i low = bits & kLow, exp_r = (bits >> 23) & 255, exp_d = (dbits >> 23) & 255;
        const v8i positive_q = qf > fzero;
        const v8i unsure = ((low < kMargin) | (low > kLow - kMargin) | (exp_r == 255) | (exp_d == 255) |
                            (((exp_r == 0) | (exp_d == 0)) & positive_q)) & ~zero_p;
        v8u16 k16 = __builtin_convertvector(k, v8u16);
        v8i any = unsure;  // OR across the lanes, in lanes (extracting eight would cost more)
        any |= __builtin_shufflevector(any, any, 4, 5, 6, 7, 0, 1, 2, 3);
        any |= __builtin_shufflevector(any, any, 2, 3, 0, 1, 6, 7, 4, 5);
        any |= __builtin_shufflevector(any, any, 1, 0, 3, 2, 5, 4, 7, 6);
        if (any[0]) {  // rare: about 2·kMargin / 2^(23 − kSub) of the tokens
          for (int j = 0; j < 8; ++j) {
            if (unsure[j]) k16[j] = exact_key(p[i + j], q[i + j], ip, iq);
          }
          k = __builtin_convertvector(k16, v8i);
        }
        vlo8 = k < vlo8 ? k : vlo8;  // the special keys lie above every bucket
        vhi8 = (k > vhi8) & (k < ibuckets) ? k : vhi8;
        std::memcpy(keys + i, &k16, sizeof k16);
      }
      for (int j = 0; j < 8; ++j) {
        lo = std::min<long long>(lo, vlo8[j]), hi = std::max<long long>(hi, vhi8[j]);
        ma = std::min(ma, static_cast<double>(vma8[j]) * ip);
        mb = std::min(mb, static_cast<double>(vmb8[j]) * iq);
      }
    }
  }
  for (; i + 4 <= n; i += 4) {
    v4d pv, qv;
    load4(p + i, pv);
    load4(q + i, qv);
    const v4d a = pv * vip, b = qv * viq;
    vma = (a > zero) & (a < vma) ? a : vma;
    vmb = (b > zero) & (b < vmb) ? b : vmb;
    const v4d r = b / a + zero;  // + 0.0 turns −0.0 into +0.0 (see key)
    // The key from the high 32 bits of r (sign 0, exponent, top mantissa bits), in 32-bit lanes.
    const v8u32 words = (v8u32)r;  // a cast between vector types of one size keeps the bits
    const v4i32 high = (v4i32)__builtin_shufflevector(words, words, 1, 3, 5, 7);
    const v4i32 lin = (high >> (20 - sub)) - static_cast<int>(1023 << sub);
    const v4i32 below = lin + static_cast<int>(lower) < 0 ? 0 : lin + static_cast<int>(lower);
    const v4i32 above = static_cast<int>(lower) + (lin < static_cast<int>(lower - 1) ? lin : static_cast<int>(lower - 1));
    v4i32 k = lin < 0 ? below : above;
    k = __builtin_convertvector(a == b, v4i32) ? static_cast<int>(OneShot::kNone) : k;
    k = __builtin_convertvector(a == zero, v4i32) ? static_cast<int>(OneShot::kOutside) : k;
    vlo = k < vlo ? k : vlo;  // the special keys lie above every bucket
    vhi = (k > vhi) & (k < ibuckets) ? k : vhi;
    const v4u16 k16 = __builtin_convertvector(k, v4u16);
    std::memcpy(keys + i, &k16, sizeof k16);
  }
  for (int j = 0; j < 4; ++j) {
    lo = std::min<long long>(lo, vlo[j]), hi = std::max<long long>(hi, vhi[j]);
  }
  ma = std::min(ma, lanes_min(vma)), mb = std::min(mb, lanes_min(vmb));
#endif
  for (; i < n; ++i) {
    const double pv = static_cast<double>(p[i]), qv = static_cast<double>(q[i]);
    const double a = pv * ip, b = qv * iq;
    ma = a > 0.0 && a < ma ? a : ma;
    mb = b > 0.0 && b < mb ? b : mb;
    keys[i] = exact_key(pv, qv, ip, iq);
    if (keys[i] < buckets) lo = std::min<long long>(lo, keys[i]), hi = std::max<long long>(hi, keys[i]);
  }
  return {static_cast<int>(lo), static_cast<int>(hi), ma, mb};
}

inline std::uint16_t exact_key(double pv, double qv, double ip, double iq) {
  const double a = pv * ip, b = qv * iq, r = b / a;  // r = ∞ (q/p past DBL_MAX): the top bucket
  return a == 0.0 ? OneShot::kOutside : a == b ? OneShot::kNone : static_cast<std::uint16_t>(OneShot::key(r));
}

MENTORED_CLONES inline KeysInfo keys_pass(const float* p, const float* q, std::size_t n, double ip, double iq,
                                          std::uint16_t* keys) {
  return keys_loop(p, q, n, ip, iq, keys);
}
MENTORED_CLONES inline KeysInfo keys_pass(const double* p, const double* q, std::size_t n, double ip, double iq,
                                          std::uint16_t* keys) {
  return keys_loop(p, q, n, ip, iq, keys);
}

inline int OneShot::key(double r) {
  // lin = 2^kSub·(exponent − 1023) + top kSub mantissa bits, monotone in r ≥ 0 and negative iff
  // r < 1.
  // Written without branches: whether r < 1 is a coin flip per token on real rows.
  static_assert(kLower == 1 + kOctaves * (1 << kSub), "bucket layout");
  // r = −0.0 (a drafter entry of −0.0, which passes every r ≥ 0 check) would read its sign bit as
  // a huge exponent and land in the top bucket, r > 1; adding +0.0 makes it +0.0 (found by fuzzing).
  r += 0.0;
  std::uint64_t bits;
  std::memcpy(&bits, &r, sizeof bits);
  const int e = static_cast<int>(bits >> 52);  // r ≥ 0: the sign bit is 0
  const int m = static_cast<int>((bits >> (52 - kSub)) & ((1u << kSub) - 1));
  const int lin = (e - 1023) * (1 << kSub) + m;
  const int below = std::max(0, lin + kLower);                // bucket 0 takes r < 2^-kOctaves
  const int above = kLower + std::min(lin, kLower - 1);       // the last bucket takes r ≥ 2^kOctaves
  return lin < 0 ? below : above;
}

inline double OneShot::edge(int k) {
  if (k <= 0) return 0.0;
  if (k >= kBuckets) return kInf;
  if (k == kBuckets - 1) return std::ldexp(1.0, kOctaves);
  int e, m;
  if (k < kLower) {
    e = (1023 - kOctaves) + (k - 1) / (1 << kSub);
    m = (k - 1) % (1 << kSub);
  } else {
    e = 1023 + (k - kLower) / (1 << kSub);
    m = (k - kLower) % (1 << kSub);
  }
  const std::uint64_t bits = (static_cast<std::uint64_t>(e) << 52) | (static_cast<std::uint64_t>(m) << (52 - kSub));
  double r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}

template <class T>
Status OneShot::build(const T* p, const T* q, std::size_t n) {
  // Pass 2: the bucket of each token (vectorised), bucket counts and sums.
  constexpr int kSlots = 1 << 16;  // one per 16-bit key
  if (bucket_.P.size() != static_cast<std::size_t>(kSlots)) {  // first row: allocate, all buckets empty
    bucket_.P.assign(kSlots, 0.0);
    bucket_.Q.assign(kSlots, 0.0);
    bucket_.count.assign(kSlots, 0);
    bucket_.start.assign(kBuckets + 1, 0);
    bucket_.pos.assign(kBuckets, 0);
    bucket_.below_P.assign(kLower + 1, 0.0);
    bucket_.below_Q.assign(kLower + 1, 0.0);
    bucket_.above_P.assign(kBuckets + 1, 0.0);
    bucket_.above_Q.assign(kBuckets + 1, 0.0);
    lazy_.F.assign(kBuckets, std::numeric_limits<double>::quiet_NaN());
    lazy_.sorted.assign(kBuckets, 0);
    lazy_.fcum_ready.assign(kBuckets, 0);
    lazy_.mid_lo.assign(kLower + 1, 0.0);
    lazy_.mid_hi.assign(kBuckets + 1, 0.0);
    bounds_.fedge.assign(kBuckets + 1, kInf);
    bounds_.fmean.assign(kBuckets, 0.0);
    bounds_.low_lo.assign(kLower + 1, 0.0);
    bounds_.up_lo.assign(kLower + 1, 0.0);
    bounds_.low_hi.assign(kBuckets + 1, 0.0);
    bounds_.up_hi.assign(kBuckets + 1, 0.0);
  } else {  // the previous row's buckets back to empty
    for (int k = kmin_; k <= kmax_; ++k) bucket_.P[k] = bucket_.Q[k] = 0.0, bucket_.count[k] = 0;
    for (int k : {kOutside, kNone}) bucket_.P[k] = bucket_.Q[k] = 0.0, bucket_.count[k] = 0;
    for (int k = dirty_lo_; k <= dirty_hi_; ++k) {
      lazy_.F[k] = std::numeric_limits<double>::quiet_NaN();
      lazy_.sorted[k] = lazy_.fcum_ready[k] = 0;
    }
  }
  dirty_lo_ = kBuckets;
  dirty_hi_ = -1;
  tok_.keys.resize(n);
  set_input(p, q);
  const Status st = sums_check(p, q, n);
  if (st != Status::ok) return st;
  const KeysInfo info = keys_pass(p, q, n, ip_, iq_, tok_.keys.data());
  min_a_ = info.min_a;
  min_b_ = info.min_b;
  const int range[2] = {info.lo, info.hi};
  // Counts and sums per key, special keys included: p_i = 0 goes to kOutside, where no threshold
  // can clip it, as in path.hpp (the continuation is the only way such tokens get mass); Q at
  // kOutside is then Q0. kNone: p_i = q_i, π_i = p_i throughout. A tiny p_i > 0 with q/p beyond
  // DBL_MAX is a target token in the top bucket, whose ratios are held scaled (Token).
  const double ip = ip_, iq = iq_;
  // Raw pointers: through the vectors the compiler reloads every base address per token.
  const std::uint16_t* keys = tok_.keys.data();
  std::size_t* count = bucket_.count.data();
  double* P = bucket_.P.data();
  double* Q = bucket_.Q.data();
  for (std::size_t i = 0; i < n; ++i) {
    const double a = static_cast<double>(p[i]) * ip, b = static_cast<double>(q[i]) * iq;
    const int k = keys[i];
    count[k] += 1;
    P[k] += a;
    Q[k] += b;
  }
  const double q0 = bucket_.Q[kOutside];
  int kmin = range[0], kmax = range[1];
  q0_ = q0;
  if (kmax < 0) kmin = 0;  // no bucketed token: the empty range [0, −1]
  kmin_ = kmin;
  kmax_ = kmax;
  bucket_.start[kmin] = 0;
  for (int k = kmin; k <= kmax; ++k) bucket_.start[k + 1] = bucket_.start[k] + count[k];
  const std::size_t total = begin(kBuckets);
  // The counting sort itself waits until the search knows which buckets it needs (fill).
  tok_.tokens.resize(total);
  tok_.cum.resize(total);
  for (int k = kmin; k <= kmax; ++k) bucket_.pos[k] = bucket_.start[k];
  filled_lo_ = 0;
  filled_hi_ = -1;
  hole_lo_ = 1;
  hole_hi_ = 0;

  bucket_.below_P[below_lo()] = bucket_.below_Q[below_lo()] = 0.0;
  for (int k = below_lo(); k < below_hi(); ++k) {
    bucket_.below_P[k + 1] = bucket_.below_P[k] + bucket_.P[k];
    bucket_.below_Q[k + 1] = bucket_.below_Q[k] + bucket_.Q[k];
  }
  bucket_.above_P[above_hi()] = bucket_.above_Q[above_hi()] = 0.0;
  for (int k = above_hi() - 1; k >= above_lo(); --k) {
    bucket_.above_P[k] = bucket_.above_P[k + 1] + bucket_.P[k];
    bucket_.above_Q[k] = bucket_.above_Q[k + 1] + bucket_.Q[k];
  }
  // above_P(k) includes bucket k; the sums strictly above k are above_P(k + 1).
  tv_ = below_P(kLower) - below_Q(kLower);
  d_up_ = above_Q(kLower) - above_P(kLower);
  s_end_ = q0_ > 0.0 ? tv_ : std::min(tv_, d_up_);
  if (begin(kLower) == 0) s_end_ = 0.0;  // no token with q < p: p = q

  lazy_.mid_lo[kLower - 1] = 0.0;
  lazy_.mid_hi[kLower] = 0.0;
  lo_reach_ = kLower - 1;
  hi_reach_ = kLower;
  return Status::ok;
}

template <class T>
Status OneShot::sums_check(const T* p, const T* q, std::size_t n) {
  // Pass 1: sums, and a check of every entry without a branch: a negative entry shows in the
  // minimum, +∞ in the maximum, a NaN in the sum.
  double* sp = stats_;
  double* sq = stats_ + 3;
  stats_pass(p, n, sp);
  stats_pass(q, n, sq);
  sp_ = sp[0];
  sq_ = sq[0];
  if (!(sp[1] >= 0.0 && sq[1] >= 0.0 && sp[2] < kInf && sq[2] < kInf && sp_ < kInf && sq_ < kInf)) {
    // Finite entries can also sum past DBL_MAX (float64 rows near 1e308, fed to the core
    // directly): 1/∞ = 0 would zero every ratio and solve a row that is not the input.
    return Status::bad_value;
  }
  if (!(sp_ > 0.0) || !(sq_ > 0.0)) return Status::zero_row;

  // Scaling by a reciprocal (one rounding more than dividing) keeps divisions out of the passes;
  // build_pi scales the same way, so the row is the same normalised row throughout.
  ip_ = 1.0 / sp_;
  iq_ = 1.0 / sq_;
  // A row summing below 2^-1024 (all entries denormal) has no float64 reciprocal: 1/sp = ∞ would
  // make every a = p_i·∞ = ∞ and π infinite (found by fuzz/fuzz_core.py). Such rows are refused
  // here (bad_value); the Python side, asked to normalise, rescales them and solves again.
  if (!(ip_ < kInf) || !(iq_ < kInf)) return Status::bad_value;
  return Status::ok;
}

inline void OneShot::fill(int lo, int hi) {
  // Buckets [lo, hi] not yet filled, in two steps: the indices of their tokens, in order, without
  // a branch on the key; then those tokens into their buckets, ratio computed as in build.
  const int old_lo = filled_lo_, old_hi = filled_hi_;
  if (old_lo <= old_hi) {
    lo = std::min(lo, old_lo);
    hi = std::max(hi, old_hi);
  }
  if (lo >= old_lo && hi <= old_hi) return;
  scatter(pick(lo, hi, old_lo, old_hi).first);
  filled_lo_ = lo;
  filled_hi_ = hi;
}

template <class T>
void OneShot::gather_ratios(const T* p, const T* q, const std::uint32_t* index, std::size_t len, double ip, double iq,
                            double* a, double* r) {
  // a = p_i/Σp and r = (q_i/Σq)/a at the given tokens (as in build: the same r).
  for (std::size_t j = 0; j < len; ++j) {
    const double aj = static_cast<double>(p[index[j]]) * ip, bj = static_cast<double>(q[index[j]]) * iq;
    a[j] = aj;
    r[j] = bj / aj;
  }
}

inline void OneShot::fill_hole() {
  const int lo = hole_lo_, hi = hole_hi_;
  hole_lo_ = 1;
  hole_hi_ = 0;
  scatter(pick(lo, hi, 1, 0).first);
}

inline void OneShot::scatter(std::size_t m) {
  // The tokens scratch_.chosen[0, m) into their buckets, ratio computed as in build: the same r, the
  // same bucket.
  const std::uint16_t* keys = tok_.keys.data();
  const std::uint32_t* chosen = scratch_.chosen.data();
  Token* tokens = tok_.tokens.data();
  std::size_t* pos = bucket_.pos.data();
  const double ip = ip_, iq = iq_;
  for (std::size_t j = 0; j < m; ++j) {
    const std::size_t i = chosen[j];
    const double a = (pf_ ? static_cast<double>(pf_[i]) : pd_[i]) * ip;
    const double b = (qf_ ? static_cast<double>(qf_[i]) : qd_[i]) * iq;
    const int k = keys[i];
    tokens[pos[k]++] = {token_ratio(k, a, b), a, b};
  }
}

template <class F>
void OneShot::fill_split(const F& f, int lo, int hi, int mid_lo, int mid_hi) {
  // Buckets [lo, hi], of which those in [mid_lo, mid_hi] are never a threshold's in the search
  // that follows: those only need Σ p f(r), computed straight from the row a block at a time,
  // in token order as bucket_f would sum them (the same bits), without moving their tokens.
  mid_lo = std::max(mid_lo, lo);
  mid_hi = std::min(mid_hi, hi);
  if (filled_lo_ <= filled_hi_ || mid_lo > mid_hi) return fill(lo, hi);
  const auto [edges, m] = pick(lo, hi, mid_lo, mid_hi);
  scatter(edges);
  for (int k = mid_lo; k <= mid_hi; ++k) {
    lazy_.F[k] = 0.0;
    touch(k);
  }
  constexpr std::size_t kBlock = 2048;
  scratch_.ratios.resize(kBlock);
  scratch_.fvals.resize(kBlock);
  scratch_.weights.resize(kBlock);
  const std::uint16_t* keys = tok_.keys.data();
  const std::uint32_t* chosen = scratch_.middle.data();
  for (std::size_t j0 = 0; j0 < m; j0 += kBlock) {
    const std::size_t len = std::min(kBlock, m - j0);
    if (pf_) {
      gather_ratios(pf_, qf_, chosen + j0, len, ip_, iq_, scratch_.weights.data(), scratch_.ratios.data());
    } else {
      gather_ratios(pd_, qd_, chosen + j0, len, ip_, iq_, scratch_.weights.data(), scratch_.ratios.data());
    }
    evaluate_many(f, scratch_.ratios.data(), len, scratch_.fvals.data(), 0);
    for (std::size_t j = 0; j < len; ++j) {
      const std::size_t i = chosen[j0 + j];
      double term = scratch_.weights[j] * scratch_.fvals[j];
      if (!(scratch_.fvals[j] < kInf) && keys[i] == kTop) {  // r or f(r) past DBL_MAX (rare): the perspective
        const double b = (qf_ ? static_cast<double>(qf_[i]) : qd_[i]) * iq_;
        term = term_huge_of(f, scratch_.weights[j], scaled_quotient(b, scratch_.weights[j]), 0);
      }
      lazy_.F[keys[i]] += term;
    }
  }
  filled_lo_ = lo;
  filled_hi_ = hi;
  hole_lo_ = mid_lo;
  hole_hi_ = mid_hi;
}

inline void OneShot::fill_for(double s) {
  // The thresholds' buckets and every bucket between them (the unclipped tokens).
  int lo = kLower, hi = kLower - 1;
  if (s > 0.0 && begin(kLower) > 0) lo = lower_bucket(std::max(tv_ - s, 0.0));
  if (s > 0.0 && begin(kBuckets) > begin(kLower)) {
    hi = s > d_up_ ? kBuckets - 1 : upper_bucket(std::max(d_up_ - s, 0.0));
  }
  if (lo <= hi) fill(lo, hi);
}

inline void OneShot::sort_bucket(int k) {
  if (lazy_.sorted[k]) return;
  fill_bucket(k);
  touch(k);
  const std::size_t first = begin(k), m = begin(k + 1) - first;
  constexpr int kIndexBits = 64 - (52 - kSub);  // what a ratio of a regular bucket leaves free
  if (k == 0 || k == kBuckets - 1 || m >= (std::size_t{1} << kIndexBits)) {
    std::sort(tok_.tokens.begin() + first, tok_.tokens.begin() + first + m, [](const Token& a, const Token& b) { return a.r < b.r; });
  } else {
    // The ratios of a regular bucket share sign, exponent and top kSub mantissa bits: their
    // other 52 − kSub bits and the token's place in the bucket make one integer, which sorts
    // faster than 24-byte tokens do (ties keep token order).
    scratch_.order.resize(m);
    for (std::size_t j = 0; j < m; ++j) {
      std::uint64_t bits;
      std::memcpy(&bits, &tok_.tokens[first + j].r, sizeof bits);
      scratch_.order[j] = (bits << (64 - (52 - kSub)) >> (64 - (52 - kSub)) << kIndexBits) | j;
    }
    std::sort(scratch_.order.begin(), scratch_.order.end());
    scratch_.spare.assign(tok_.tokens.begin() + first, tok_.tokens.begin() + first + m);
    const std::uint64_t mask = (std::uint64_t{1} << kIndexBits) - 1;
    for (std::size_t j = 0; j < m; ++j) tok_.tokens[first + j] = scratch_.spare[scratch_.order[j] & mask];
  }
  // Clipped tokens are a prefix of a lower bucket and a suffix of an upper bucket; each side sums
  // in its own direction, so that no clipped mass is ever a difference of two larger sums.
  double P = 0.0, Q = 0.0;
  if (k < kLower) {
    for (std::size_t i = begin(k); i < begin(k + 1); ++i) {
      P += tok_.tokens[i].p;
      Q += tok_.tokens[i].q;
      tok_.cum[i].P = P;  // Σ over tokens [0, i]
      tok_.cum[i].Q = Q;
    }
  } else {
    for (std::size_t i = begin(k + 1); i-- > begin(k);) {
      P += tok_.tokens[i].p;
      Q += tok_.tokens[i].q;
      tok_.cum[i].P = P;  // Σ over tokens [i, m)
      tok_.cum[i].Q = Q;
    }
  }
  lazy_.sorted[k] = 1;
}

template <class F>
double OneShot::bucket_f(const F& f, int k) {
  if (std::isnan(lazy_.F[k])) {
    touch(k);
    fill_bucket(k);
    const std::size_t m = begin(k + 1) - begin(k);
    f_at(f, k);
    double sum = 0.0;
    for (std::size_t j = 0; j < m; ++j) sum += scratch_.fvals[j];
    lazy_.F[k] = sum;
  }
  return lazy_.F[k];
}

template <class F>
void OneShot::bucket_fcum(const F& f, int k) {
  // The unclipped tokens of a threshold bucket are a suffix on the lower side and a prefix on the
  // upper side; summing in that direction keeps f(0) = ∞ (r = 0 is always clipped) out of them.
  if (lazy_.fcum_ready[k]) return;
  touch(k);
  f_at(f, k);
  const std::size_t first = begin(k);
  double sum = 0.0;
  if (k < kLower) {
    for (std::size_t i = begin(k + 1); i-- > first;) {
      sum += scratch_.fvals[i - first];
      tok_.cum[i].F = sum;  // Σ over tokens [i, m)
    }
  } else {
    for (std::size_t i = first; i < begin(k + 1); ++i) {
      sum += scratch_.fvals[i - first];
      tok_.cum[i].F = sum;  // Σ over tokens [0, i]
    }
  }
  lazy_.fcum_ready[k] = 1;
}

template <class F>
double OneShot::middle_lower(const F& f, int b) {
  // lazy_.mid_lo[k] = Σ_{k < j < kLower} F_j, known for k ≥ lo_reach_.
  while (lo_reach_ > b) {
    lazy_.mid_lo[lo_reach_ - 1] = lazy_.mid_lo[lo_reach_] + bucket_f(f, lo_reach_);
    --lo_reach_;
  }
  return lazy_.mid_lo[b];
}

template <class F>
double OneShot::middle_upper(const F& f, int b) {
  // lazy_.mid_hi[k] = Σ_{kLower ≤ j < k} F_j, known for k ≤ hi_reach_.
  while (hi_reach_ < b) {
    lazy_.mid_hi[hi_reach_ + 1] = lazy_.mid_hi[hi_reach_] + bucket_f(f, hi_reach_);
    ++hi_reach_;
  }
  return lazy_.mid_hi[b];
}

inline int OneShot::lower_bucket(double g) const {
  // φ(t) = Σ_{r<t} (t p − q) is increasing; the last bucket whose lower edge has φ ≤ g.
  int lo = 0, hi = kLower;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (edge(mid) * below_P(mid) - below_Q(mid) <= g) lo = mid;
    else hi = mid;
  }
  return lo;
}

inline int OneShot::upper_bucket(double h) const {
  // ψ(t) = Σ_{r>t} (q − t p) is decreasing; the first bucket whose upper edge has ψ ≤ h.
  auto psi_top = [&](int k) { return k + 1 >= kBuckets ? 0.0 : above_Q(k + 1) - edge(k + 1) * above_P(k + 1); };
  int lo = kLower - 1, hi = kBuckets - 1;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (psi_top(mid) <= h) hi = mid;
    else lo = mid;
  }
  return hi;
}

inline OneShot::Side OneShot::lower(double s) {
  // φ(t) = Σ_{r<t} (t p − q) is increasing; t_lo solves φ(t_lo) = g = TV − s.
  const double g = std::max(tv_ - s, 0.0);
  const int b = lower_bucket(g);
  sort_bucket(b);
  const std::size_t first = begin(b), m = begin(b + 1) - first;
  const double P0 = below_P(b), Q0 = below_Q(b);
  // Tokens [0, j) of the bucket lie below t_lo: the first j with φ(r_j) > g, by binary search.
  std::size_t j = 0, hi_j = m;
  while (j < hi_j) {
    const std::size_t mid = (j + hi_j) / 2;
    const double phi = tok_.tokens[first + mid].r * (P0 + cum_before(b, mid, &Cumulative::P)) - (Q0 + cum_before(b, mid, &Cumulative::Q));
    if (phi <= g) j = mid + 1;
    else hi_j = mid;
  }
  const double P = P0 + cum_before(b, j, &Cumulative::P), Q = Q0 + cum_before(b, j, &Cumulative::Q);
  const double left = j > 0 ? tok_.tokens[first + j - 1].r : edge(b);
  const double right = j < m ? tok_.tokens[first + j].r : (b + 1 < kLower ? edge(b + 1) : 1.0);
  const double t = std::min(std::max((g + Q) / P, left), right);
  return {t, P, b, j};
}

inline OneShot::Side OneShot::upper(double s) {
  if (s > d_up_ || begin(kBuckets) == begin(kLower)) {
    // Continuation onto {p = 0} (or no token with q > p): every upper token is at q.
    const bool none = begin(kBuckets) == begin(kLower) && q0_ == 0.0;
    return {none ? 1.0 : kInf, 0.0, kBuckets, 0};
  }
  // ψ(t) = Σ_{r>t} (q − t p) is decreasing; t_hi solves ψ(t_hi) = h = D_up − s.
  const double h = std::max(d_up_ - s, 0.0);
  const int b = upper_bucket(h);
  sort_bucket(b);
  const std::size_t first = begin(b), m = begin(b + 1) - first;
  const double P0 = above_P(b + 1), Q0 = above_Q(b + 1);
  auto from = [&](std::size_t i, double Cumulative::*field) { return i < m ? tok_.cum[first + i].*field : 0.0; };
  // In the top bucket ratios are scaled (u = r·2⁻¹²⁸): r·P is taken as u·(P·2¹²⁸), the same bits.
  const bool top = b == kTop;
  const double scale = top ? kHugeUp : 1.0;
  // Tokens [j, m) of the bucket lie above t_hi: the first i whose ψ(r_i), a sum over the tokens
  // after i, is ≤ h, by binary search.
  std::size_t lo_j = 0, j = m;
  while (lo_j < j) {
    const std::size_t mid = (lo_j + j) / 2;
    const double psi = (Q0 + from(mid + 1, &Cumulative::Q)) - tok_.tokens[first + mid].r * ((P0 + from(mid + 1, &Cumulative::P)) * scale);
    if (psi <= h) j = mid;
    else lo_j = mid + 1;
  }
  const double P = P0 + from(j, &Cumulative::P), Q = Q0 + from(j, &Cumulative::Q);
  const double left = j > 0 ? tok_.tokens[first + j - 1].r : edge(b) * (top ? kHugeDown : 1.0);
  const double right = j < m ? tok_.tokens[first + j].r : edge(b + 1);
  const double t = top ? scaled_quotient(Q - h, P) : (Q - h) / P;
  return {std::min(std::max(t, left), right), P, b, j};
}

template <class F>
double OneShot::divergence(const F& f, double s) {
  if (s <= 0.0) return 0.0;
  fill_for(s);
  double d = 0.0;
  if (begin(kLower) > 0) {
    const Side lo = lower(s);
    bucket_fcum(f, lo.bucket);
    const std::size_t first = begin(lo.bucket), m = begin(lo.bucket + 1) - first;
    d += lo.clipped * f(lo.t) + middle_lower(f, lo.bucket) + (lo.j < m ? tok_.cum[first + lo.j].F : 0.0);
  }
  const Side hi = upper(s);
  if (hi.bucket >= kBuckets) {
    d += middle_upper(f, kBuckets);
    if (s > d_up_ && q0_ > 0.0) d += f.f_inf * (s - d_up_);
  } else {
    bucket_fcum(f, hi.bucket);
    d += side_term(f, hi) + middle_upper(f, hi.bucket) + cum_before(hi.bucket, hi.j, &Cumulative::F);
  }
  return d;
}

template <class F>
void OneShot::bound_buckets(const F& f) {
  // f at the bucket edges of the occupied range; edge 0 (f(0), possibly ∞) and edge kBuckets (∞)
  // are set to ∞, a valid bound that spares f those limits. f is decreasing below 1 and increasing
  // above (the tilted generator has its minimum f(1) = 0), so over a bucket f lies between its
  // values at the two edges.
  // The edges of the occupied buckets and of the empty ones between them and r = 1, where a
  // threshold may also fall.
  const int first = std::max(std::min(kmin_, kLower), 1), last = std::min(std::max(kmax_ + 1, kLower), kBuckets - 1);
  edges_lo_ = first;
  edges_hi_ = last;
  if (first <= last) {
    scratch_.ratios.resize(last - first + 1);
    scratch_.fvals.resize(last - first + 1);
    for (int k = first; k <= last; ++k) scratch_.ratios[k - first] = edge(k);
    evaluate_many(f, scratch_.ratios.data(), scratch_.ratios.size(), scratch_.fvals.data(), 0);
    for (int k = first; k <= last; ++k) bounds_.fedge[k] = scratch_.fvals[k - first];
  }
  // f at each bucket's p-weighted mean ratio Q_k/P_k, for Jensen's lower bound (buckets 1 to
  // kBuckets − 2: both edges finite and positive).
  if (first <= last - 1) {
    scratch_.ratios.resize(last - first);
    scratch_.fvals.resize(last - first);
    for (int k = first; k < last; ++k) {
      scratch_.ratios[k - first] = bucket_.P[k] > 0.0 ? std::min(std::max(bucket_.Q[k] / bucket_.P[k], edge(k)), edge(k + 1)) : 1.0;
    }
    evaluate_many(f, scratch_.ratios.data(), scratch_.ratios.size(), scratch_.fvals.data(), 0);
    for (int k = first; k < last; ++k) bounds_.fmean[k] = scratch_.fvals[k - first];
  }
  // (Proved: Bracket.v, bracket_sound, with jensen_bucket, edges_bucket_low, chord_bucket,
  // edges_bucket.)
  // Per bucket, Σ p f(r) lies above P_k·f(Q_k/P_k) (Jensen) and P_k·(f at the nearer edge to 1),
  // and below the chord of f over the bucket and P_k·(f at the farther edge): f is convex,
  // decreasing below 1 and increasing above (the tilted generator has its minimum f(1) = 0).
  // The bounds are second order in the bucket width; an empty bucket adds 0 (not 0·∞).
  auto bound = [&](int k, bool upper_bound) {
    if (!(bucket_.P[k] > 0.0)) return 0.0;
    const double e0 = edge(k), e1 = edge(k + 1), f0 = fedge(k), f1 = fedge(k + 1);
    if (upper_bound) {
      const double chord = f0 + (f1 - f0) * ((bucket_.Q[k] / bucket_.P[k] - e0) / (e1 - e0));
      const double edges = std::max(f0, f1);
      return bucket_.P[k] * (k >= first && k < last && chord < edges ? chord : edges);
    }
    const double edges = std::min(f0, f1);
    return bucket_.P[k] * (k >= first && k < last ? std::max(bounds_.fmean[k], edges) : edges);
  };
  bounds_.low_lo[below_hi()] = bounds_.up_lo[below_hi()] = 0.0;
  for (int k = below_hi() - 1; k >= below_lo(); --k) {
    bounds_.low_lo[k] = bounds_.low_lo[k + 1] + bound(k, false);
    bounds_.up_lo[k] = bounds_.up_lo[k + 1] + bound(k, true);
  }
  bounds_.low_hi[above_lo()] = bounds_.up_hi[above_lo()] = 0.0;
  for (int k = above_lo(); k < above_hi(); ++k) {
    bounds_.low_hi[k + 1] = bounds_.low_hi[k] + bound(k, false);
    bounds_.up_hi[k + 1] = bounds_.up_hi[k] + bound(k, true);
  }
}

template <class F>
void OneShot::divergence_bounds(const F& f, double s, double& low, double& up) const {
  // D(s) = D_lo(t_lo) + D_hi(t_hi) with D_lo(t) = Σ_{r<1} p f(max(r, t)) nonincreasing and
  // D_hi(t) = Σ_{r>1} p f(min(r, t)) nondecreasing. Each threshold is known to its bucket b from
  // the bucket sums alone, and within it to an interval (proofs: Bracket.v, threshold_interval):
  // on the lower side φ(t) = Σ_{r<t}(t p − q)
  // = g lies between t·P_e − Q_e (the bucket's own terms are ≥ 0) and that plus (t − e)·P_b (each
  // is p(t − r) ≤ p(t − e)), where e is the bucket's lower edge and P_e, Q_e sum the tokens below
  // it; the upper side is the mirror image. The tokens of b contribute between P_b·f at the edge
  // away from the threshold (or 0: f ≥ 0) and P_b·f(t); the buckets past b, their per-bucket
  // bounds. No token is touched; f is called at four points. The bounds only steer the search:
  // every bracket is confirmed with D itself.
  auto mul = [](double P, double v) { return P > 0.0 ? P * v : 0.0; };
  auto f_at = [&f](double t) { return t < kInf ? f(t) : kInf; };
  low = up = 0.0;
  if (s <= 0.0) return;
  if (begin(kLower) > 0) {
    const double g = std::max(tv_ - s, 0.0);
    const int b = lower_bucket(g);
    const double e0 = edge(b), e1 = b + 1 < kLower ? edge(b + 1) : 1.0;
    const double Pe = below_P(b), Qe = below_Q(b), Pb = bucket_.P[b];
    const double t_max = Pe > 0.0 ? std::min(std::max((g + Qe) / Pe, e0), e1) : e1;
    const double t_min = Pe + Pb > 0.0 ? std::min(std::max((g + Qe + e0 * Pb) / (Pe + Pb), e0), t_max) : e0;
    const double f_min = f_at(t_min), f_max = f_at(t_max);
    up += mul(Pe + Pb, f_min) + up_lo(b + 1);
    low += mul(Pe, f_max) + mul(Pb, fedge(b + 1) < kInf ? fedge(b + 1) : 0.0) + low_lo(b + 1);
  }
  if (s > d_up_ || begin(kBuckets) == begin(kLower)) {
    low += low_hi(kBuckets);
    up += up_hi(kBuckets);
    if (s > d_up_ && q0_ > 0.0) {
      low += f.f_inf * (s - d_up_);
      up += f.f_inf * (s - d_up_);
    }
    return;
  }
  const double h = std::max(d_up_ - s, 0.0);
  const int b = upper_bucket(h);
  const double e0 = edge(b), e1 = edge(b + 1);
  const double Pa = above_P(b + 1), Qa = above_Q(b + 1), Pb = bucket_.P[b];
  const double t_min = Pa > 0.0 ? std::min(std::max((Qa - h) / Pa, e0), e1) : e0;
  const double t_max = Pa + Pb > 0.0 && e1 < kInf ? std::min(std::max((Qa + e1 * Pb - h) / (Pa + Pb), t_min), e1) : e1;
  const double f_min = f_at(t_min), f_max = f_at(t_max);
  // f(t_min) = ∞ only where t or f(t) overflows (the top bucket, where Pa·f(t_min) may well be
  // finite): there 0 is the lower bound.
  low += mul(Pa, f_min < kInf ? f_min : 0.0) + mul(Pb, fedge(b) < kInf ? fedge(b) : 0.0) + low_hi(b);
  up += mul(Pa + Pb, f_max) + up_hi(b);
}

template <class F>
Point OneShot::solve_budget(const F& f, double budget) {
  const double s_max = this->s_max(f.f_inf);
  // Phase 1, on bucket sums only: bracket the answer between the last s whose upper bound meets
  // the budget and the first whose lower bound exceeds it. The bracket spans a few buckets of each
  // threshold, so phase 2 evaluates f on about the unclipped tokens of the answer, not beyond.
  bound_buckets(f);
  double a = 0.0, b = s_max;
  bool over = false;  // D(b) > budget is known
  {
    // 40 halvings: s to 1e-12 of s_max, closer than the bounds themselves.
    double lo = 0.0, hi = s_max, low, up;
    for (int it = 0; it < 40; ++it) {  // the last s with up(s) ≤ budget
      const double c = 0.5 * (lo + hi);
      if (c <= lo || c >= hi) break;
      divergence_bounds(f, c, low, up);
      if (up <= budget) lo = c;
      else hi = c;
    }
    a = lo;
    hi = s_max;
    for (int it = 0; it < 40; ++it) {  // the first s with low(s) > budget
      const double c = 0.5 * (lo + hi);
      if (c <= lo || c >= hi) break;
      divergence_bounds(f, c, low, up);
      if (low > budget) hi = c;
      else lo = c;
    }
    b = hi;
  }
  // The bounds are exact only to rounding: confirm the bracket with D itself, or widen it.
  {
    // Every bucket the search below touches (unless the bracket widens): the thresholds' buckets
    // over [a, b] and those between, which are never a threshold's: only Σ p f(r) of those.
    const bool lower_side = begin(kLower) > 0, upper_side = begin(kBuckets) > begin(kLower);
    const int lo = lower_side && b > 0.0 ? lower_bucket(std::max(tv_ - b, 0.0)) : kLower;
    const int hi = !upper_side || !(b > 0.0) ? kLower - 1 : b > d_up_ ? kBuckets - 1 : upper_bucket(std::max(d_up_ - b, 0.0));
    const int lo_a = lower_side && a > 0.0 ? lower_bucket(std::max(tv_ - a, 0.0)) : kLower - 1;
    const int hi_a = !upper_side || !(a > 0.0) ? kLower : a > d_up_ ? kBuckets : upper_bucket(std::max(d_up_ - a, 0.0));
    if (lo <= hi) fill_split(f, lo, hi, lo_a + 1, hi_a - 1);
  }
  // g(s) = D(s) − budget at the ends, where known (D(0) = 0).
  double ga = -budget, gb = kNaN;
  if (a > 0.0) {
    ga = divergence(f, a) - budget;
    if (!(ga <= 0.0)) {
      b = a, gb = ga;
      a = 0.0, ga = -budget;
      over = true;
    }
  }
  if (!over && b < s_max) {
    gb = divergence(f, b) - budget;
    if (gb > 0.0) {
      over = true;
    } else {
      a = b, ga = gb;
      b = s_max, gb = kNaN;
    }
  }
  // Phase 2, keeping g(a) ≤ 0 < g(b): false position with the Illinois halving of the stale end
  // (D is continuous and nondecreasing, and smooth between breakpoints: a handful of steps),
  // bisection whenever that step is not strictly inside, and to finish: the last double s with
  // D(s) ≤ budget, as plain bisection would find it.
  int side = 0;
  for (int it = 0; it < 2100; ++it) {
    const double mid = 0.5 * (a + b);
    if (mid <= a || mid >= b) break;
    double c = mid;
    // Every fourth step a bisection: the bracket halves at least that often, kinks or not.
    if (it % 4 != 3 && over && ga < 0.0 && gb < kInf && b - a > 64.0 * std::numeric_limits<double>::epsilon() * b) {
      const double x = a + (b - a) * (ga / (ga - gb));
      if (x > a && x < b) c = x;
    }
    const double gc = divergence(f, c) - budget;
    if (gc <= 0.0) {
      a = c, ga = gc;
      if (side == -1) gb *= 0.5;
      side = -1;
    } else {
      b = c, gb = gc;
      if (side == 1) ga *= 0.5;
      side = 1;
      over = true;
    }
  }
  // b = s_max never tested: a large D(s_max) (many f evaluations) is computed only if needed.
  if (!over && a < s_max && divergence(f, s_max) <= budget) a = s_max;
  return at(a);
}

template <class F>
Point OneShot::solve_price(const F& f, double price) {
  // The predicate of Path::solve_price, D'(s⁺) > 1/price, is nondecreasing in s. Phase 1 brackets
  // where it turns from the thresholds' buckets alone (no token touched): f̃' is nondecreasing, so
  // with t_lo in [edge(b), edge(b + 1)] and t_hi in [edge(c), edge(c + 1)], D'(s⁺) lies between
  // f̃'(edge(c)) − f̃'(edge(b + 1)) and f̃'(edge(c + 1)) − f̃'(edge(b)). Phase 2 bisects on D'(s⁺)
  // itself, from the exact thresholds, inside the bracket (a few buckets of each threshold).
  const double s_max = this->s_max(f.f_inf);
  const auto past = [&](double s) { return price * marginal_cost(f, at(s)) > 1.0; };
  const bool lower_side = begin(kLower) > 0, upper_side = begin(kBuckets) > begin(kLower);
  const auto bounds = [&](double s, double& low, double& up) {
    double lo_min = 1.0, lo_max = 1.0, hi_min = 1.0, hi_max = 1.0;
    if (s > 0.0 && lower_side) {
      const int b = lower_bucket(std::max(tv_ - s, 0.0));
      lo_min = edge(b);
      lo_max = b + 1 < kLower ? edge(b + 1) : 1.0;
    }
    if (s > 0.0 && (s > d_up_ || !upper_side)) {
      hi_min = hi_max = upper_side || q0_ > 0.0 ? kInf : 1.0;  // the continuation, as upper() has it
    } else if (s > 0.0) {
      const int c = upper_bucket(std::max(d_up_ - s, 0.0));
      hi_min = edge(c);
      hi_max = edge(c + 1);
    }
    low = slope_of(f, hi_min, 1, 0) - slope_of(f, lo_max, -1, 0);
    up = slope_of(f, hi_max, 1, 0) - slope_of(f, lo_min, -1, 0);
  };
  double a = 0.0, b = s_max;
  {
    double lo = 0.0, hi = s_max, low, up;
    for (int it = 0; it < 40; ++it) {  // the last s whose upper bound is not past
      const double c = 0.5 * (lo + hi);
      if (c <= lo || c >= hi) break;
      bounds(c, low, up);
      if (!(price * up > 1.0)) lo = c;
      else hi = c;
    }
    a = lo;
    hi = s_max;
    for (int it = 0; it < 40; ++it) {  // the first s whose lower bound is past
      const double c = 0.5 * (lo + hi);
      if (c <= lo || c >= hi) break;
      bounds(c, low, up);
      if (price * low > 1.0) hi = c;
      else lo = c;
    }
    b = hi;
  }
  // Every bucket the thresholds visit over [0, b] at once (one pass), rather than a little more at
  // each step; the divergence at the answer needs them anyway.
  fill_for(b);
  // The bounds are exact only to rounding: confirm the bracket with the predicate itself, or widen it.
  if (a > 0.0 && past(a)) b = a, a = 0.0;
  else if (b < s_max && !past(b)) a = b, b = s_max;
  if (b >= s_max && !past(s_max)) return at(s_max);
  if (past(0.0)) return at(0.0);  // tv above price 1: no divergence is worth its acceptance
  for (int it = 0; it < 2100; ++it) {
    const double c = 0.5 * (a + b);
    if (c <= a || c >= b) break;
    if (!past(c)) a = c;
    else b = c;
  }
  return at(a);
}

namespace detail {
template <class T>
void release_above(std::vector<T>& v, std::size_t cap) {
  if (v.capacity() > cap) std::vector<T>().swap(v);
}
template <class T>
std::size_t bytes_of(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}
}  // namespace detail

inline void OneShot::trim(std::size_t tokens) {
  // The buffers sized by the row (the per-bucket arrays are fixed: 2¹⁶ slots and ~6k buckets);
  // scratch_.ratios and scratch_.fvals also serve the bucket edges, hence the floor of kBuckets + 1.
  const std::size_t cap = std::max<std::size_t>(tokens, kBuckets + 1);
  detail::release_above(tok_.keys, cap);
  detail::release_above(tok_.tokens, cap);
  detail::release_above(tok_.cum, cap);
  detail::release_above(scratch_.chosen, cap + 8);
  detail::release_above(scratch_.middle, cap + 8);
  detail::release_above(scratch_.order, cap);
  detail::release_above(scratch_.spare, cap);
  detail::release_above(scratch_.ratios, cap);
  detail::release_above(scratch_.fvals, cap);
  detail::release_above(scratch_.weights, cap);
}

inline std::size_t OneShot::token_bytes() const {
  using detail::bytes_of;
  const Scratch& x = scratch_;
  return bytes_of(tok_.keys) + bytes_of(tok_.tokens) + bytes_of(tok_.cum) + bytes_of(x.chosen) + bytes_of(x.middle) +
         bytes_of(x.order) + bytes_of(x.spare) + bytes_of(x.ratios) + bytes_of(x.fvals) + bytes_of(x.weights);
}

template <class T, class U, class F>
double OneShot::build_pi(const T* p, const T* q, const Point& x, U* out, const F& f) const {
  PiRule rule;
  rule.ip = ip_;
  rule.iq = iq_;
  rule.t_lo = x.t_lo;
  rule.t_hi = x.hi_mul();
  rule.hi_pre = x.hi_pre();
  rule.z = x.s > d_up_ && q0_ > 0.0 ? std::min((x.s - d_up_) / q0_, 1.0) : 0.0;
  rule.lo_floor = x.t_lo > 0.0 ? std::numeric_limits<double>::denorm_min() : 0.0;
  const std::size_t n = tok_.keys.size();
  if (!(x.s > 0.0)) {
    // s = 0: π = p/Σp itself, divided (the passes scale by the reciprocal, one rounding more) by
    // Σp summed compensated (Neumaier: the correctly rounded sum but for near-ties, where the
    // four-lane sum of the passes can be off by many ulps on long rows), and rounded to float32 as
    // below, toward p/Σp (that is, to the nearer neighbour).
    double sum = 0.0, carry = 0.0;
    for (std::size_t i = 0; i < n; ++i) neumaier_add(sum, carry, static_cast<double>(p[i]));
    const double sp = sum + carry;
    double accepted = 0.0;
    carry = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      const double v = static_cast<double>(p[i]) / sp, b = static_cast<double>(q[i]) * iq_;
      const auto smaller_at_lo = [&f, v](double lo, double hi) { return v * f(lo / v) <= v * f(hi / v); };
      out[i] = round_toward(v, v, smaller_at_lo, out);
      neumaier_add(accepted, carry, v < b ? v : b);
    }
    return std::min(accepted + carry, 1.0);
  }
  pi_pass(p, q, bucket_.count[kOutside] > 0 ? tok_.keys.data() : nullptr, n, rule, out);
  // float32 π_i below FLT_MIN, or for p_i below FLT_MIN: round_toward, where f may decide. Such
  // tokens exist only if the smallest positive p_i, q_i (kept by build) allow them: π_i ≥ min(q_i,
  // t_lo·p_i) when clipped, q_i·z on the continuation (a factor 2 covers rounding).
  const double tiny = 2.0 * static_cast<double>(std::numeric_limits<float>::min());
  const double smallest_v = std::min({min_b_, min_a_ * (x.t_lo > 0.0 ? x.t_lo : 1.0), rule.z > 0.0 ? rule.z * min_b_ : kInf});
  if (std::is_same<U, float>::value && (min_a_ < tiny || smallest_v < tiny)) {
    for (std::size_t i = 0; i < n; ++i) {
      const double a = static_cast<double>(p[i]) * rule.ip, b = static_cast<double>(q[i]) * rule.iq;
      const double v = pi_value(a, b, tok_.keys[i] == kOutside, rule);
      if (!((a > 0.0 && a < tiny) || (v > 0.0 && v < tiny))) continue;
      const auto smaller_at_lo = [&f, a](double lo, double hi) { return a * f(lo / a) <= a * f(hi / a); };
      out[i] = round_toward(v, a, smaller_at_lo, out);
    }
  }
  // Σ min(π_i, q_i) = 1 − TV(p, q) + s on the curve (Curve.v, acceptance_on_curve). At 1/2 or
  // more that difference loses at most a bit to cancellation: taken as is. Below, it cancels (a
  // disjoint row gave 2.5e-14 for 0): the sum itself, compensated, over the float64 π (the π
  // returned, or the one a float32 π rounds; docs/reliability.md). The extra pass costs some 10% of
  // a row, hence only where it is needed.
  const double on_curve = 1.0 - tv_ + x.s;
  if (on_curve >= 0.5) return std::min(on_curve, 1.0);
  if constexpr (std::is_same<U, double>::value) {
    return std::min(accept_pass(out, q, n, iq_), 1.0);
  } else {
    return std::min(accept_rule_pass(p, q, bucket_.count[kOutside] > 0 ? tok_.keys.data() : nullptr, n, rule), 1.0);
  }
}

}  // namespace mentored
