// One-shot mentored decoding for one row in expected O(n): no full sort.
//
// Same answer as Path::solve_budget (path.hpp), up to rounding, found differently. Tokens are
// bucketed by the bit pattern of their ratio r = q/p (32 buckets per octave; the order of positive
// doubles is the order of their bits), with per-bucket sums of p and q. At a bucket edge e the
// functions of MATH.md §3 are exact from those sums,
//     Down(e) = TV − (e·P_{r<e} − Q_{r<e}),   Up(e) = D_up − (Q_{r>e} − e·P_{r>e}),
// so a threshold is located to its bucket by binary search over edges, and only that bucket is
// sorted to invert exactly inside it (proofs: Inversion.v, Down_inversion / Up_inversion).
// D_f(π(s)‖p) needs Σ p f(r) over the unclipped tokens only; those form a run of buckets around
// r = 1 that grows with s, so f is evaluated lazily, bucket by bucket, as the search reaches it.
// The budget search is a bisection on s (D is nondecreasing in s: Monotone.v, D_monotone).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "generators.hpp"
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

// π_i in the output type. float64: as is. float32: not to nearest but toward p_i, so that each
// term p_i f(π_i/p_i) moves toward f(1) = 0 and rounding cannot push D_f(π‖p) past the budget the
// float64 π met (docs/reliability.md): the float32 neighbour of v on p_i's side when it is not past
// p_i (by convexity its term is no larger than v's). Otherwise v and p_i share one gap between
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

class OneShot {
 public:
  // Buckets: [0, kLower) hold r < 1 ascending (bucket 0: r < 2^-kOctaves, zeros included);
  // [kLower, kBuckets) hold r > 1 ascending (the last: r ≥ 2^kOctaves, +inf included).
  static constexpr int kSub = 5;  // mantissa bits: 32 buckets per octave
  static constexpr int kOctaves = 48;
  static constexpr int kLower = 1 + kOctaves * (1 << kSub);
  static constexpr int kBuckets = 2 * kLower;
  // Keys of tokens outside the buckets: p_i = q_i (π_i = p_i throughout), and {p = 0}.
  static constexpr std::uint16_t kNone = 0xFFFF, kOutside = 0xFFFE;

  template <class T>
  Status build(const T* p, const T* q, std::size_t n);

  double tv() const { return tv_; }
  double d_up() const { return d_up_; }
  double s_end() const { return s_end_; }
  double s_max(double f_inf) const { return std::isinf(f_inf) ? std::min(s_end_, d_up_) : s_end_; }

  // Thresholds at s (s in [0, s_end]).
  Point at(double s) {
    Point x;
    x.s = s;
    if (s > 0.0) {
      x.t_lo = lower(s).t;
      x.t_hi = upper(s).t;
    }
    return x;
  }

  // D_f(π(s)‖p), exact to rounding (f is the tilted generator: every term ≥ 0).
  template <class F>
  double divergence(const F& f, double s);

  // The largest s ≤ s_max with D_f(π(s)‖p) ≤ budget.
  template <class F>
  Point solve_budget(const F& f, double budget);

  // π(s) from the input row; returns Σ min(π_i, q_i) in float64.
  // f decides the rounding of π to float32 in one rare case (round_toward).
  template <class T, class U, class F>
  double build_pi(const T* p, const T* q, const Point& x, U* out, const F& f) const;

 private:
  struct Token {
    double r, p, q;
  };
  struct Side {
    double t;        // the threshold
    double clipped;  // p-mass of the clipped tokens
    int bucket;      // bucket holding the threshold
    std::size_t j;   // tokens of that bucket (in sorted order) on the clipped side: [0, j) or [j, m)
  };

  void set_input(const float* p, const float* q) { pf_ = p; qf_ = q; pd_ = qd_ = nullptr; }
  void set_input(const double* p, const double* q) { pd_ = p; qd_ = q; pf_ = qf_ = nullptr; }
  static int key(double r);
  static double edge(int k);  // lower edge of bucket k
  void sort_bucket(int k);
  template <class F>
  double bucket_f(const F& f, int k);  // Σ p f(r) over bucket k, cached
  template <class F>
  void bucket_fcum(const F& f, int k);  // cumulative Σ p f(r) inside sorted bucket k
  template <class F>
  void f_at(const F& f, int k) {  // f at the ratios of (filled) bucket k, into fvals_
    const std::size_t m = start_[k + 1] - start_[k];
    ratios_.resize(m);
    fvals_.resize(m);
    for (std::size_t j = 0; j < m; ++j) ratios_[j] = tokens_[start_[k] + j].r;
    evaluate_many(f, ratios_.data(), m, fvals_.data(), 0);
  }
  std::vector<double> ratios_, fvals_;  // scratch for f_at
  template <class F>
  double middle_lower(const F& f, int b);  // Σ p f(r) over lower buckets (b, kLower)
  template <class F>
  double middle_upper(const F& f, int b);  // Σ p f(r) over upper buckets [kLower, b)
  Side lower(double s);
  Side upper(double s);

  double sp_ = 0.0, sq_ = 0.0, ip_ = 1.0, iq_ = 1.0;
  double tv_ = 0.0, d_up_ = 0.0, q0_ = 0.0, s_end_ = 0.0;
  std::vector<std::uint16_t> keys_;
  std::vector<std::uint32_t> order_;  // token indices in bucket order (a counting sort)
  std::vector<Token> tokens_;  // aligned with order_, filled bucket by bucket when first needed
  std::vector<char> filled_;
  const float *pf_ = nullptr, *qf_ = nullptr;  // the input row, whichever its type
  const double *pd_ = nullptr, *qd_ = nullptr;
  void fill_bucket(int k);
  std::vector<std::size_t> start_;
  std::vector<double> P_, Q_;  // per bucket
  std::vector<double> below_P_, below_Q_;  // lower side: sums over buckets before k
  std::vector<double> above_P_, above_Q_;  // upper side: sums over buckets after k
  std::vector<double> F_;                  // per-bucket Σ p f(r), NaN until computed
  std::vector<char> sorted_, fcum_ready_;
  // Inside a sorted bucket, running sums aligned with tokens_: prefix sums (over [0, i]) of P, Q
  // and suffix sums (over [i, m)) of F on the lower side; the reverse on the upper side.
  struct Cumulative {
    double P, Q, F;
  };
  std::vector<Cumulative> cum_;
  double cum_before(int k, std::size_t j, double Cumulative::*field) const {  // over tokens [0, j)
    return j == 0 ? 0.0 : cum_[start_[k] + j - 1].*field;
  }
  // Lazily grown runs of computed buckets around r = 1 and their running sums:
  // mid_lo_[k] = Σ_{k < j < kLower} F_j for k ≥ lo_reach_; mid_hi_[k] = Σ_{kLower ≤ j < k} F_j for k ≤ hi_reach_.
  std::vector<double> mid_lo_, mid_hi_;
  int lo_reach_ = kLower - 1, hi_reach_ = kLower;
  std::vector<std::size_t> pos_;  // scratch for the counting sort
};

// ---------------------------------------------------------------------------------------------

inline int OneShot::key(double r) {
  // lin = 32·(exponent − 1023) + top mantissa bits, monotone in r ≥ 0 and negative iff r < 1.
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
  // Pass 1: sums, and a check of every entry without a branch.
  double sp = 0.0, sq = 0.0;
  bool bad = false;
  for (std::size_t i = 0; i < n; ++i) {
    const double a = static_cast<double>(p[i]), b = static_cast<double>(q[i]);
    bad |= !(a >= 0.0) | !(b >= 0.0) | (a == kInf) | (b == kInf);
    sp += a;
    sq += b;
  }
  sp_ = sp;
  sq_ = sq;
  if (bad) return Status::bad_value;
  if (!(sp_ > 0.0) || !(sq_ > 0.0)) return Status::zero_row;
  // Finite entries can still sum past DBL_MAX (float64 rows near 1e308, fed to the core directly):
  // 1/∞ = 0 would zero every ratio and solve a row that is not the input. Refuse it instead.
  if (!(sp_ < kInf) || !(sq_ < kInf)) return Status::bad_value;

  // Scaling by a reciprocal (one rounding more than dividing) keeps divisions out of the passes;
  // build_pi scales the same way, so the row is the same normalised row throughout.
  ip_ = 1.0 / sp_;
  iq_ = 1.0 / sq_;
  // A row summing below 2^-1024 (all entries denormal) has no float64 reciprocal: 1/sp = ∞ would
  // make every a = p_i·∞ = ∞ and π infinite (found by fuzz/fuzz_core.py). Such rows are refused
  // here; the Python side never sends them (it divides by the sum first when it normalises).
  if (!(ip_ < kInf) || !(iq_ < kInf)) return Status::bad_value;

  // Pass 2: side and bucket of each token, bucket counts and sums.
  keys_.resize(n);
  set_input(p, q);
  P_.assign(kBuckets, 0.0);
  Q_.assign(kBuckets, 0.0);
  start_.assign(kBuckets + 1, 0);
  double q0 = 0.0;
  const double ip = ip_, iq = iq_;
  constexpr std::uint16_t none = kNone;
  // Raw pointers: through the vectors the compiler reloads every base address per token.
  std::uint16_t* keys = keys_.data();
  std::size_t* count = start_.data() + 1;
  double* P = P_.data();
  double* Q = Q_.data();
  for (std::size_t i = 0; i < n; ++i) {
    const double a = static_cast<double>(p[i]) * ip, b = static_cast<double>(q[i]) * iq;
    if (a == 0.0) {
      q0 += b;
      keys[i] = kOutside;
    } else if (a == b) {
      keys[i] = none;  // π_i = p_i = q_i on the whole curve
    } else if (b / a == kInf) {
      // q/p beyond DBL_MAX (a denormal p_i): no threshold can clip it, so it joins {p = 0}, as
      // path.hpp does; the continuation is the only way it gets mass.
      q0 += b;
      keys[i] = kOutside;
    } else {
      const int k = key(b / a);
      keys[i] = static_cast<std::uint16_t>(k);
      count[k] += 1;
      P[k] += a;
      Q[k] += b;
    }
  }
  q0_ = q0;
  for (int k = 0; k < kBuckets; ++k) start_[k + 1] += start_[k];
  // Pass 3: token indices into bucket order (a counting sort on the bucket key). Indices are
  // 4 bytes: the scatter stays in cache, and the few buckets the search needs are filled later.
  order_.resize(start_[kBuckets]);
  tokens_.resize(start_[kBuckets]);
  cum_.resize(start_[kBuckets]);
  pos_.assign(start_.begin(), start_.end() - 1);
  std::uint32_t* order = order_.data();
  std::size_t* pos = pos_.data();
  for (std::size_t i = 0; i < n; ++i) {
    if (keys[i] < kBuckets) order[pos[keys[i]]++] = static_cast<std::uint32_t>(i);
  }
  filled_.assign(kBuckets, 0);

  below_P_.assign(kLower + 1, 0.0);
  below_Q_.assign(kLower + 1, 0.0);
  for (int k = 0; k < kLower; ++k) {
    below_P_[k + 1] = below_P_[k] + P_[k];
    below_Q_[k + 1] = below_Q_[k] + Q_[k];
  }
  above_P_.assign(kBuckets + 1, 0.0);
  above_Q_.assign(kBuckets + 1, 0.0);
  for (int k = kBuckets - 1; k >= kLower; --k) {
    above_P_[k] = above_P_[k + 1] + P_[k];
    above_Q_[k] = above_Q_[k + 1] + Q_[k];
  }
  // above_P_[k] includes bucket k; the sums strictly above k are above_P_[k + 1].
  tv_ = below_P_[kLower] - below_Q_[kLower];
  d_up_ = above_Q_[kLower] - above_P_[kLower];
  s_end_ = q0_ > 0.0 ? tv_ : std::min(tv_, d_up_);
  if (start_[kLower] == 0) s_end_ = 0.0;  // no token with q < p: p = q

  F_.assign(kBuckets, std::numeric_limits<double>::quiet_NaN());
  sorted_.assign(kBuckets, 0);
  fcum_ready_.assign(kBuckets, 0);
  mid_lo_.assign(kLower + 1, 0.0);
  mid_hi_.assign(kBuckets + 1, 0.0);
  lo_reach_ = kLower - 1;
  hi_reach_ = kLower;
  return Status::ok;
}

inline void OneShot::fill_bucket(int k) {
  if (filled_[k]) return;
  for (std::size_t j = start_[k]; j < start_[k + 1]; ++j) {
    const std::size_t i = order_[j];
    const double a = (pf_ ? static_cast<double>(pf_[i]) : pd_[i]) * ip_;
    const double b = (qf_ ? static_cast<double>(qf_[i]) : qd_[i]) * iq_;
    tokens_[j] = {b / a, a, b};  // the same operations as in build: the same r, the same bucket
  }
  filled_[k] = 1;
}

inline void OneShot::sort_bucket(int k) {
  if (sorted_[k]) return;
  fill_bucket(k);
  std::sort(tokens_.begin() + start_[k], tokens_.begin() + start_[k + 1],
            [](const Token& a, const Token& b) { return a.r < b.r; });
  // Clipped tokens are a prefix of a lower bucket and a suffix of an upper bucket; each side sums
  // in its own direction, so that no clipped mass is ever a difference of two larger sums.
  double P = 0.0, Q = 0.0;
  if (k < kLower) {
    for (std::size_t i = start_[k]; i < start_[k + 1]; ++i) {
      P += tokens_[i].p;
      Q += tokens_[i].q;
      cum_[i].P = P;  // Σ over tokens [0, i]
      cum_[i].Q = Q;
    }
  } else {
    for (std::size_t i = start_[k + 1]; i-- > start_[k];) {
      P += tokens_[i].p;
      Q += tokens_[i].q;
      cum_[i].P = P;  // Σ over tokens [i, m)
      cum_[i].Q = Q;
    }
  }
  sorted_[k] = 1;
}

template <class F>
double OneShot::bucket_f(const F& f, int k) {
  if (std::isnan(F_[k])) {
    fill_bucket(k);
    const std::size_t m = start_[k + 1] - start_[k];
    f_at(f, k);
    double sum = 0.0;
    for (std::size_t j = 0; j < m; ++j) sum += tokens_[start_[k] + j].p * fvals_[j];
    F_[k] = sum;
  }
  return F_[k];
}

template <class F>
void OneShot::bucket_fcum(const F& f, int k) {
  // The unclipped tokens of a threshold bucket are a suffix on the lower side and a prefix on the
  // upper side; summing in that direction keeps f(0) = ∞ (r = 0 is always clipped) out of them.
  if (fcum_ready_[k]) return;
  f_at(f, k);
  const std::size_t first = start_[k];
  double sum = 0.0;
  if (k < kLower) {
    for (std::size_t i = start_[k + 1]; i-- > first;) {
      sum += tokens_[i].p * fvals_[i - first];
      cum_[i].F = sum;  // Σ over tokens [i, m)
    }
  } else {
    for (std::size_t i = first; i < start_[k + 1]; ++i) {
      sum += tokens_[i].p * fvals_[i - first];
      cum_[i].F = sum;  // Σ over tokens [0, i]
    }
  }
  fcum_ready_[k] = 1;
}

template <class F>
double OneShot::middle_lower(const F& f, int b) {
  // mid_lo_[k] = Σ_{k < j < kLower} F_j, known for k ≥ lo_reach_.
  while (lo_reach_ > b) {
    mid_lo_[lo_reach_ - 1] = mid_lo_[lo_reach_] + bucket_f(f, lo_reach_);
    --lo_reach_;
  }
  return mid_lo_[b];
}

template <class F>
double OneShot::middle_upper(const F& f, int b) {
  // mid_hi_[k] = Σ_{kLower ≤ j < k} F_j, known for k ≤ hi_reach_.
  while (hi_reach_ < b) {
    mid_hi_[hi_reach_ + 1] = mid_hi_[hi_reach_] + bucket_f(f, hi_reach_);
    ++hi_reach_;
  }
  return mid_hi_[b];
}

inline OneShot::Side OneShot::lower(double s) {
  // φ(t) = Σ_{r<t} (t p − q) is increasing; t_lo solves φ(t_lo) = g = TV − s.
  const double g = std::max(tv_ - s, 0.0);
  auto phi_edge = [&](int k) { return edge(k) * below_P_[k] - below_Q_[k]; };
  int lo = 0, hi = kLower;  // φ(edge(lo)) ≤ g; find the last bucket whose lower edge has φ ≤ g
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (phi_edge(mid) <= g) lo = mid;
    else hi = mid;
  }
  const int b = lo;
  sort_bucket(b);
  const std::size_t first = start_[b], m = start_[b + 1] - first;
  const double P0 = below_P_[b], Q0 = below_Q_[b];
  // Tokens [0, j) of the bucket lie below t_lo: the first j with φ(r_j) > g, by binary search.
  std::size_t j = 0, hi_j = m;
  while (j < hi_j) {
    const std::size_t mid = (j + hi_j) / 2;
    const double phi = tokens_[first + mid].r * (P0 + cum_before(b, mid, &Cumulative::P)) - (Q0 + cum_before(b, mid, &Cumulative::Q));
    if (phi <= g) j = mid + 1;
    else hi_j = mid;
  }
  const double P = P0 + cum_before(b, j, &Cumulative::P), Q = Q0 + cum_before(b, j, &Cumulative::Q);
  const double left = j > 0 ? tokens_[first + j - 1].r : edge(b);
  const double right = j < m ? tokens_[first + j].r : (b + 1 < kLower ? edge(b + 1) : 1.0);
  const double t = std::min(std::max((g + Q) / P, left), right);
  return {t, P, b, j};
}

inline OneShot::Side OneShot::upper(double s) {
  if (s > d_up_ || start_[kBuckets] == start_[kLower]) {
    // Continuation onto {p = 0} (or no token with q > p): every upper token is at q.
    const bool none = start_[kBuckets] == start_[kLower] && q0_ == 0.0;
    return {none ? 1.0 : kInf, 0.0, kBuckets, 0};
  }
  // ψ(t) = Σ_{r>t} (q − t p) is decreasing; t_hi solves ψ(t_hi) = h = D_up − s.
  const double h = std::max(d_up_ - s, 0.0);
  auto psi_top = [&](int k) {  // ψ at the upper edge of bucket k
    return k + 1 >= kBuckets ? 0.0 : above_Q_[k + 1] - edge(k + 1) * above_P_[k + 1];
  };
  int lo = kLower - 1, hi = kBuckets - 1;  // ψ(top of hi) ≤ h; find the first such bucket
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (psi_top(mid) <= h) hi = mid;
    else lo = mid;
  }
  const int b = hi;
  sort_bucket(b);
  const std::size_t first = start_[b], m = start_[b + 1] - first;
  const double P0 = above_P_[b + 1], Q0 = above_Q_[b + 1];
  auto from = [&](std::size_t i, double Cumulative::*field) { return i < m ? cum_[first + i].*field : 0.0; };
  // Tokens [j, m) of the bucket lie above t_hi: the first i whose ψ(r_i), a sum over the tokens
  // after i, is ≤ h, by binary search.
  std::size_t lo_j = 0, j = m;
  while (lo_j < j) {
    const std::size_t mid = (lo_j + j) / 2;
    const double psi = (Q0 + from(mid + 1, &Cumulative::Q)) - tokens_[first + mid].r * (P0 + from(mid + 1, &Cumulative::P));
    if (psi <= h) j = mid;
    else lo_j = mid + 1;
  }
  const double P = P0 + from(j, &Cumulative::P), Q = Q0 + from(j, &Cumulative::Q);
  const double left = j > 0 ? tokens_[first + j - 1].r : edge(b);
  const double right = j < m ? tokens_[first + j].r : edge(b + 1);
  const double t = std::min(std::max((Q - h) / P, left), right);
  return {t, P, b, j};
}

template <class F>
double OneShot::divergence(const F& f, double s) {
  if (s <= 0.0) return 0.0;
  double d = 0.0;
  if (start_[kLower] > 0) {
    const Side lo = lower(s);
    bucket_fcum(f, lo.bucket);
    const std::size_t first = start_[lo.bucket], m = start_[lo.bucket + 1] - first;
    d += lo.clipped * f(lo.t) + middle_lower(f, lo.bucket) + (lo.j < m ? cum_[first + lo.j].F : 0.0);
  }
  const Side hi = upper(s);
  if (hi.bucket >= kBuckets) {
    d += middle_upper(f, kBuckets);
    if (s > d_up_ && q0_ > 0.0) d += f.f_inf * (s - d_up_);
  } else {
    bucket_fcum(f, hi.bucket);
    d += hi.clipped * f(hi.t) + middle_upper(f, hi.bucket) + cum_before(hi.bucket, hi.j, &Cumulative::F);
  }
  return d;
}

template <class F>
Point OneShot::solve_budget(const F& f, double budget) {
  const double s_max = this->s_max(f.f_inf);
  // Bisection keeping D(a) ≤ budget; b is not known to exceed it, so that a large D(s_max)
  // (many f evaluations) is computed only when the search gets there.
  double a = 0.0, b = s_max;
  for (int it = 0; it < 2100; ++it) {
    const double c = 0.5 * (a + b);
    if (c <= a || c >= b) break;
    if (divergence(f, c) <= budget) a = c;
    else b = c;
  }
  if (a < s_max && divergence(f, s_max) <= budget) a = s_max;
  return at(a);
}

template <class T, class U, class F>
double OneShot::build_pi(const T* p, const T* q, const Point& x, U* out, const F& f) const {
  const double z = x.s > d_up_ && q0_ > 0.0 ? std::min((x.s - d_up_) / q0_, 1.0) : 0.0;
  const double ip = ip_, iq = iq_;
  double accepted = 0.0;
  const std::size_t n = keys_.size();
  for (std::size_t i = 0; i < n; ++i) {
    const double a = static_cast<double>(p[i]) * ip, b = static_cast<double>(q[i]) * iq;
    // p·clip(q/p, t_lo, t_hi) as min/max, without branches (t_hi = ∞ works as is).
    const double clipped = std::min(std::max(b, x.t_lo * a), x.t_hi * a);
    // Outside tokens: q·z on the continuation. One with a denormal p_i > 0 (q/p overflowed) also
    // keeps t_hi·p_i ≥ p_i, as the clip would give it: π_i > 0 wherever p_i > 0, which f(0) = ∞
    // requires; the mass this adds is below 1e-300.
    const double v = keys_[i] == kOutside ? std::max(b * z, (x.t_hi < kInf ? x.t_hi : 1.0) * a) : clipped;
    accepted += std::min(v, b);
    // p_i·f(x/p_i) at the two float32 neighbours; a = 0 never gets here (π_i ≥ 0 = p_i rounds down).
    const auto smaller_at_lo = [&f, a](double lo, double hi) { return a * f(lo / a) <= a * f(hi / a); };
    out[i] = round_toward(v, a, smaller_at_lo, out);
  }
  return accepted;
}

}  // namespace mentored
