// A user generator as a small expression program: f̃ of a sympy generator evaluated in C++.
//
// mentored/_program.py translates the numpy code that sympy prints for f(t) (the code of
// SymbolicInfo.f) into a postfix program over doubles, operation for operation, so that the core
// evaluates f̃(t) = f(t) − c(t − 1) with no call back into Python. Program::f_tilde then repeats
// SymbolicInfo.f_tilde around it: the limits f(0⁺) and lim f(t) at ∞ at the endpoints, the Taylor
// series of f̃ at 1 where |t − 1| < radius (no cancellation there), and max(·, 0).
//
// The operations are IEEE's, and the library's elementary functions (exp, log, pow, …) stand in for
// numpy's: within an ulp of them, not always bit for bit (numpy may use its own SIMD versions).
//
// Where the printed form overflows. f is finite on (0, ∞) (the analysis checks it), but its printed
// form can pass DBL_MAX on the way: log(cosh(t − 1)) at t = 720 forms cosh(719) ≈ 10³¹², and
// 10⁻²⁰⁰·(t − 1)² forms (t − 1)² ≈ 10³³⁹ at t = 5·10¹⁶⁹ before the product brings it back. Wherever the
// double evaluation gives a non-finite f at a point of (0, ∞), that point is evaluated again in
// extended range (Wide: a double mantissa and a 64-bit exponent, so nothing overflows or underflows
// on the way), and f̃ is that value rounded to a double: ∞ only where f̃ itself passes DBL_MAX.
// ProgramF's huge(y, u), the perspective y·f̃(u·2¹²⁸) past DBL_MAX, is the same evaluation at a t
// that is not a double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>
#include <stdexcept>
#include <string>
#include <vector>

#include "generators.hpp"

namespace mentored {

// A real number m·2^e in extended range: 0.5 ≤ |m| < 1 and e an integer held as a double (so that
// e^x has one for any double x), or m one of 0, ±∞, NaN (then e = 0). The
// elementary functions take their double versions wherever argument and result are doubles (then
// they are exactly the double evaluation's), and their asymptotic forms only beyond (exp(x) = eʳ·2ᵏ,
// log x = log m + e ln 2, cosh x = eˣ/2 past x = 700, …), each within a few ulps.
struct Wide {
  double m = 0.0;
  double e = 0.0;

  static Wide of(double v) {
    if (v == 0.0 || !std::isfinite(v)) return {v, 0};
    int k;
    const double m = std::frexp(v, &k);
    return {m, static_cast<double>(k)};
  }
  static Wide norm(double m, double e) {
    if (m == 0.0 || !std::isfinite(m)) return {m, 0};
    int k;
    const double r = std::frexp(m, &k);
    return {r, e + k};
  }
  bool special() const { return m == 0.0 || !std::isfinite(m); }
  // Whether the value is a normal double (so that double functions see it exactly).
  bool in_range() const { return special() || (e >= -1021 && e <= 1024); }
  double value() const {
    if (special()) return m;
    if (e > 1100) return m > 0.0 ? kInf : -kInf;
    if (e < -1200) return m > 0.0 ? 0.0 : -0.0;
    return std::ldexp(m, static_cast<int>(e));
  }
};

namespace wide {

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kLn2Hi = 6.93147180369123816490e-01;  // fdlibm's split: e·ln2_hi exact for |e| < 2²⁰
constexpr double kLn2Lo = 1.90821492927058770002e-10;

inline Wide neg(Wide a) { return {-a.m, a.e}; }
inline Wide add(Wide a, Wide b) {
  if (a.m == 0.0) return b;
  if (b.m == 0.0) return a;
  if (!std::isfinite(a.m) || !std::isfinite(b.m)) return Wide::of(a.m + b.m);
  if (a.e < b.e) std::swap(a, b);
  const double d = a.e - b.e;
  if (d > 1100) return a;
  return Wide::norm(a.m + std::ldexp(b.m, static_cast<int>(-d)), a.e);
}
inline Wide sub(Wide a, Wide b) { return add(a, neg(b)); }
inline Wide mul(Wide a, Wide b) {
  if (a.special() || b.special()) return Wide::of(a.m * b.m);
  return Wide::norm(a.m * b.m, a.e + b.e);
}
inline Wide div(Wide a, Wide b) {
  if (a.special() || b.special()) return Wide::of(a.m / b.m);
  return Wide::norm(a.m / b.m, a.e - b.e);
}
// −1, 0, 1 for a < b, a = b, a > b; 2 when either is NaN.
inline int cmp(Wide a, Wide b) {
  if (std::isnan(a.m) || std::isnan(b.m)) return 2;
  if (!std::isfinite(a.m) && !std::isfinite(b.m)) return a.m < b.m ? -1 : a.m > b.m ? 1 : 0;
  const double d = sub(a, b).m;
  return d < 0.0 ? -1 : d > 0.0 ? 1 : 0;
}
// e^x for x beyond ±700: eʳ·2ᵏ with x = k ln 2 + r.
inline Wide exp(Wide a) {
  if (a.in_range()) {
    const double x = a.value();
    if (std::fabs(x) < 700.0 || !std::isfinite(x)) return Wide::of(std::exp(x));
    const double k = std::nearbyint(x / kLn2);
    // Past 2⁵² an ulp of x is more than ln 2: only 2ᵏ is known, and log e^x = x to an ulp all the same.
    const double r = std::fabs(x) < 0x1p52 ? std::fma(-k, kLn2Hi, x) - k * kLn2Lo : 0.0;
    return Wide::norm(std::exp(r), k);
  }
  if (a.e < 0) return Wide::of(1.0);        // |x| below DBL_MIN
  return Wide::of(a.m > 0.0 ? kInf : 0.0);  // |x| past DBL_MAX
}
inline double log_of(Wide a) {  // log of a value outside the double range, a > 0
  return a.e * kLn2Hi + (a.e * kLn2Lo + std::log(a.m));
}
inline Wide log(Wide a) {
  if (a.in_range() || a.m < 0.0) return Wide::of(std::log(a.m < 0.0 ? kNaN : a.value()));
  return Wide::of(log_of(a));
}
// |a|^y (y a double): pow(m, y)·2^(e·y), e·y split exactly into k + (a fraction in [0, 1) + lo).
inline Wide pow_abs(Wide a, double y) {
  const double ey = a.e * y;
  if (!(std::fabs(ey) < 1e300)) return Wide::of(ey > 0.0 ? kInf : 0.0);
  const double lo = std::fma(a.e, y, -ey);
  const double k = std::floor(ey);
  const double pm = std::pow(std::fabs(a.m), y);
  const double frac = std::exp2((ey - k) + lo);
  if (std::isfinite(pm) && std::fabs(pm) >= std::numeric_limits<double>::min())
    return mul(Wide::norm(pm, k), Wide::of(frac));
  // |y| so large that m^y leaves the doubles: 2^(y·log2 m) in the same way
  const double l = y * std::log2(std::fabs(a.m));
  const double k2 = std::floor(l);
  return mul(Wide::norm(std::exp2(l - k2) * frac, k), Wide::norm(1.0, k2));
}
inline Wide pow(Wide a, Wide b) {
  if (!b.in_range()) {  // an exponent past DBL_MAX (or a denormal one: a^b ≈ 1)
    if (b.m == 0.0 || !(b.e > 0)) return Wide::of(1.0);
    return Wide::of(std::pow(a.value(), b.value()));
  }
  const double y = b.value();
  if (a.in_range()) {
    const double r = std::pow(a.value(), y);
    if ((std::isfinite(r) && std::fabs(r) >= std::numeric_limits<double>::min()) || a.special() || std::isnan(r) || y == 0.0)
      return Wide::of(r);
  }
  if (a.special()) return Wide::of(std::pow(a.m, y));
  if (a.m < 0.0) {  // a negative base: real only for an integer exponent
    if (y != std::floor(y)) return Wide::of(kNaN);
    const Wide v = pow_abs(a, y);
    return std::fmod(y, 2.0) != 0.0 ? neg(v) : v;
  }
  return pow_abs(a, y);
}
inline Wide sqrt(Wide a) {
  if (a.special() || a.m < 0.0) return Wide::of(std::sqrt(a.m));
  double m = a.m;
  double e = a.e;
  if (std::fmod(e, 2.0) != 0.0) {
    m *= 2.0;
    e -= 1;
  }
  return Wide::norm(std::sqrt(m), e / 2);
}

}  // namespace wide

// The opcodes (mentored/_program.py holds the same list, by name: the bindings export this table).
enum class Op : int {
  constant,  // push the instruction's value
  t,         // push t
  add, sub, mul, div, pow,                       // a, b → a ∘ b
  maximum, minimum,                              // numpy's: NaN if either is
  less, less_equal, greater, greater_equal, equal, not_equal,  // → 1 or 0
  logical_and, logical_or,                       // of nonzero → 1 or 0
  where,                                         // c, a, b → c ≠ 0 ? a : b
  neg, square, sqrt, abs, sign, exp, expm1, log, log1p, log2, log10,  // a → g(a)
  sin, cos, tan, arcsin, arccos, arctan, sinh, cosh, tanh, arcsinh, arccosh, arctanh,
  count
};
constexpr int kOpCount = static_cast<int>(Op::count);
constexpr const char* kOpNames[kOpCount] = {
    "constant", "t", "add", "sub", "mul", "div", "pow", "maximum", "minimum", "less", "less_equal", "greater",
    "greater_equal", "equal", "not_equal", "logical_and", "logical_or", "where", "neg", "square", "sqrt", "abs",
    "sign", "exp", "expm1", "log", "log1p", "log2", "log10", "sin", "cos", "tan", "arcsin", "arccos", "arctan",
    "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh"};

// Stack effect of an opcode: values it pops (pushes one).
constexpr int op_arity(Op op) {
  return op == Op::constant || op == Op::t ? 0 : op == Op::where ? 3 : op < Op::neg ? 2 : 1;
}

class Program {
 public:
  static constexpr std::size_t kBlock = 64;     // points evaluated together, one opcode at a time
  static constexpr std::size_t kMaxDepth = 32;  // stack slots (kBlock doubles each, on the C++ stack)

  struct Constants {
    double f0, f_at_inf, tilt, f_inf;  // f(0⁺), lim f at ∞, c, f∞ (untilted, as SymbolicInfo)
    std::vector<double> series;        // f̃(1 + h) = h² Σ_k series[k] h^k for |h| < radius
    double radius;
  };

  // Checked: every opcode known, the stack never short and never past kMaxDepth, one value left.
  Program(std::vector<int> ops, std::vector<double> values, Constants k) : values_(std::move(values)), k_(std::move(k)) {
    if (ops.size() != values_.size()) throw std::invalid_argument("a program needs one value per opcode");
    if (ops.empty()) throw std::invalid_argument("empty program");
    std::size_t depth = 0;
    for (const int code : ops) {
      if (code < 0 || code >= kOpCount) throw std::invalid_argument("unknown opcode " + std::to_string(code));
      const Op op = static_cast<Op>(code);
      const auto pops = static_cast<std::size_t>(op_arity(op));
      if (depth < pops) throw std::invalid_argument(std::string("opcode ") + kOpNames[code] + " finds too few values on the stack");
      depth = depth - pops + 1;
      if (depth > kMaxDepth) throw std::invalid_argument("program needs more than " + std::to_string(kMaxDepth) + " stack slots");
      ops_.push_back(op);
    }
    if (depth != 1) throw std::invalid_argument("program leaves " + std::to_string(depth) + " values, not one");
    if (!(k_.radius >= 0.0)) throw std::invalid_argument("series radius must be nonnegative");
  }

  const Constants& constants() const { return k_; }

  // f(t) as sympy's numpy code computes it, at n ≤ kBlock points (any t; the caller picks the domain).
  void raw_block(const double* t, std::size_t n, double* out) const {
    double stack[kMaxDepth][kBlock];
    std::size_t top = 0;  // slots in use
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      const Op op = ops_[i];
      if (op == Op::constant || op == Op::t) {
        double* s = stack[top++];
        if (op == Op::t) std::copy(t, t + n, s);
        else std::fill(s, s + n, values_[i]);
        continue;
      }
      if (op == Op::where) {
        top -= 2;
        double *c = stack[top - 1], *a = stack[top], *b = stack[top + 1];
        for (std::size_t j = 0; j < n; ++j) c[j] = c[j] != 0.0 ? a[j] : b[j];
        continue;
      }
      if (op < Op::neg) {
        --top;
        binary(op, stack[top - 1], stack[top], n);
      } else {
        unary(op, stack[top - 1], n);
      }
    }
    std::copy(stack[0], stack[0] + n, out);
  }

  // SymbolicInfo.f_tilde at n points of [0, ∞].
  void f_tilde(const double* t, std::size_t n, double* out) const {
    double inner[kBlock];
    for (std::size_t i0 = 0; i0 < n; i0 += kBlock) {
      const std::size_t m = std::min(kBlock, n - i0);
      const double* x = t + i0;
      for (std::size_t j = 0; j < m; ++j) inner[j] = x[j] > 0.0 && std::isfinite(x[j]) ? x[j] : 1.0;
      raw_block(inner, m, out + i0);
      for (std::size_t j = 0; j < m; ++j) out[i0 + j] = finish(x[j], out[i0 + j]);
    }
  }
  double f_tilde(double t) const {
    double v;
    f_tilde(&t, 1, &v);
    return v;
  }

 private:
  // f̃ from f's value at the point (inside (0, ∞)) or the limits, as SymbolicInfo.f_tilde; in
  // extended range where the printed form overflows at a point of (0, ∞) (f is finite there).
  double finish(double x, double raw) const {
    const bool inside = x > 0.0 && std::isfinite(x);
    if (inside && !std::isfinite(raw - k_.tilt * (x - 1.0)) && !(!k_.series.empty() && std::fabs(x - 1.0) < k_.radius)) {
      const double v = wide_tilde(Wide::of(x)).value();
      return v < 0.0 ? 0.0 : v;
    }
    const double f = inside ? raw : x == 0.0 ? k_.f0 : k_.f_at_inf;
    double v = f - k_.tilt * (x - 1.0);
    if (std::isinf(x)) v = k_.f_inf - k_.tilt > 0.0 ? kInf : f;
    const double h = x - 1.0;
    if (!k_.series.empty() && std::fabs(h) < k_.radius) {
      double acc = 0.0;
      for (std::size_t k = k_.series.size(); k-- > 0;) acc = (acc + k_.series[k]) * h;
      v = acc * h;
    }
    return v < 0.0 ? 0.0 : v;  // f̃ ≥ 0 by convexity; NaN stays NaN
  }

  // f at a point of (0, ∞) given in extended range, one operation at a time (Wide).
  Wide raw_wide(Wide t) const {
    Wide stack[kMaxDepth];
    std::size_t top = 0;
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      const Op op = ops_[i];
      if (op == Op::constant || op == Op::t) {
        stack[top++] = op == Op::t ? t : Wide::of(values_[i]);
      } else if (op == Op::where) {
        top -= 2;
        stack[top - 1] = stack[top - 1].m != 0.0 ? stack[top] : stack[top + 1];
      } else if (op < Op::neg) {
        --top;
        stack[top - 1] = binary_wide(op, stack[top - 1], stack[top]);
      } else {
        stack[top - 1] = unary_wide(op, stack[top - 1]);
      }
    }
    return stack[0];
  }

 public:
  // f̃(t) = f(t) − c(t − 1) at a t of (0, ∞) in extended range (t itself may pass DBL_MAX).
  Wide wide_tilde(Wide t) const {
    return wide::sub(raw_wide(t), wide::mul(Wide::of(k_.tilt), wide::sub(t, Wide::of(1.0))));
  }

 private:
  static Wide binary_wide(Op op, Wide a, Wide b) {
    const int c = wide::cmp(a, b);
    switch (op) {
      case Op::add: return wide::add(a, b);
      case Op::sub: return wide::sub(a, b);
      case Op::mul: return wide::mul(a, b);
      case Op::div: return wide::div(a, b);
      case Op::pow: return wide::pow(a, b);
      case Op::maximum: return c == 2 ? Wide::of(kNaN) : c < 0 ? b : a;
      case Op::minimum: return c == 2 ? Wide::of(kNaN) : c > 0 ? b : a;
      case Op::less: return Wide::of(c == -1);
      case Op::less_equal: return Wide::of(c == -1 || c == 0);
      case Op::greater: return Wide::of(c == 1);
      case Op::greater_equal: return Wide::of(c == 1 || c == 0);
      case Op::equal: return Wide::of(c == 0);
      case Op::not_equal: return Wide::of(c != 0);
      case Op::logical_and: return Wide::of(a.m != 0.0 && b.m != 0.0);
      case Op::logical_or: return Wide::of(a.m != 0.0 || b.m != 0.0);
      default: return Wide::of(kNaN);
    }
  }

  // An elementary function in extended range: the double function wherever the argument is a
  // double and the result does not overflow, the asymptotic form beyond.
  static Wide unary_wide(Op op, Wide a) {
    constexpr double kHalfPi = 1.57079632679489661923;
    switch (op) {
      case Op::neg: return wide::neg(a);
      case Op::square: return wide::mul(a, a);
      case Op::sqrt: return wide::sqrt(a);
      case Op::abs: return {std::fabs(a.m), a.e};
      case Op::sign: return Wide::of(sign_of(a.m));
      case Op::exp: return wide::exp(a);
      case Op::log: return wide::log(a);
      case Op::log2: if (!a.in_range() && a.m > 0.0) return Wide::of(a.e + std::log2(a.m)); break;
      case Op::log10: if (!a.in_range() && a.m > 0.0) return Wide::of(wide::log_of(a) / 2.30258509299404568402); break;
      default: break;
    }
    if (a.in_range()) {
      const double x = a.value();
      const bool big = std::fabs(x) >= 700.0 && std::isfinite(x);
      switch (op) {
        case Op::expm1: if (big && x > 0.0) return wide::exp(a); break;
        case Op::cosh: if (big) return wide::mul(wide::exp(Wide{std::fabs(a.m), a.e}), Wide::of(0.5)); break;
        case Op::sinh: if (big) { const Wide v = wide::mul(wide::exp(Wide{std::fabs(a.m), a.e}), Wide::of(0.5)); return a.m < 0.0 ? wide::neg(v) : v; } break;
        default: break;
      }
      double v[1] = {x};
      unary(op, v, 1);
      return Wide::of(v[0]);
    }
    const bool tiny = a.e < 0;  // |a| below DBL_MIN (f ≈ its first-order term), else past DBL_MAX
    const double s = a.m < 0.0 ? -1.0 : 1.0;
    switch (op) {
      case Op::sin: case Op::tan: case Op::arcsin: case Op::arctan: case Op::sinh: case Op::tanh:
      case Op::arcsinh: case Op::arctanh: case Op::expm1: case Op::log1p:
        if (tiny) return a;
        break;
      case Op::cos: case Op::cosh: if (tiny) return Wide::of(1.0); break;
      case Op::arccos: if (tiny) return Wide::of(kHalfPi); break;
      default: break;
    }
    if (tiny) return Wide::of(kNaN);  // arccosh of a number near 0: outside its domain
    switch (op) {
      case Op::arctan: return Wide::of(s * kHalfPi);
      case Op::tanh: return Wide::of(s);
      case Op::sinh: return Wide::of(s * kInf);
      case Op::cosh: return Wide::of(kInf);
      case Op::expm1: return Wide::of(s > 0.0 ? kInf : -1.0);
      case Op::arcsinh: return Wide::of(s * (wide::log_of(Wide{std::fabs(a.m), a.e}) + wide::kLn2));
      case Op::arccosh: return Wide::of(s > 0.0 ? wide::log_of(a) + wide::kLn2 : kNaN);
      case Op::log1p: return Wide::of(s > 0.0 ? wide::log_of(a) : kNaN);
      default: return Wide::of(kNaN);  // sin, cos, tan of a number past DBL_MAX; domain errors
    }
  }

  static void binary(Op op, double* a, const double* b, std::size_t n) {
    switch (op) {
      case Op::add: for (std::size_t j = 0; j < n; ++j) a[j] = a[j] + b[j]; return;
      case Op::sub: for (std::size_t j = 0; j < n; ++j) a[j] = a[j] - b[j]; return;
      case Op::mul: for (std::size_t j = 0; j < n; ++j) a[j] = a[j] * b[j]; return;
      case Op::div: for (std::size_t j = 0; j < n; ++j) a[j] = a[j] / b[j]; return;
      case Op::pow: for (std::size_t j = 0; j < n; ++j) a[j] = std::pow(a[j], b[j]); return;
      case Op::maximum:
        for (std::size_t j = 0; j < n; ++j) a[j] = std::isnan(a[j]) || std::isnan(b[j]) ? kNaN : a[j] < b[j] ? b[j] : a[j];
        return;
      case Op::minimum:
        for (std::size_t j = 0; j < n; ++j) a[j] = std::isnan(a[j]) || std::isnan(b[j]) ? kNaN : b[j] < a[j] ? b[j] : a[j];
        return;
      case Op::less: for (std::size_t j = 0; j < n; ++j) a[j] = a[j] < b[j]; return;
      case Op::less_equal: for (std::size_t j = 0; j < n; ++j) a[j] = a[j] <= b[j]; return;
      case Op::greater: for (std::size_t j = 0; j < n; ++j) a[j] = a[j] > b[j]; return;
      case Op::greater_equal: for (std::size_t j = 0; j < n; ++j) a[j] = a[j] >= b[j]; return;
      case Op::equal: for (std::size_t j = 0; j < n; ++j) a[j] = a[j] == b[j]; return;
      case Op::not_equal: for (std::size_t j = 0; j < n; ++j) a[j] = a[j] != b[j]; return;
      case Op::logical_and: for (std::size_t j = 0; j < n; ++j) a[j] = a[j] != 0.0 && b[j] != 0.0; return;
      case Op::logical_or: for (std::size_t j = 0; j < n; ++j) a[j] = a[j] != 0.0 || b[j] != 0.0; return;
      default: return;
    }
  }

  static double sign_of(double x) { return x > 0.0 ? 1.0 : x < 0.0 ? -1.0 : x; }  // NaN, ±0 stay

  static void unary(Op op, double* a, std::size_t n) {
    double (*g)(double) = nullptr;
    switch (op) {
      case Op::neg: for (std::size_t j = 0; j < n; ++j) a[j] = -a[j]; return;
      case Op::square: for (std::size_t j = 0; j < n; ++j) a[j] = a[j] * a[j]; return;
      case Op::sqrt: for (std::size_t j = 0; j < n; ++j) a[j] = std::sqrt(a[j]); return;
      case Op::abs: for (std::size_t j = 0; j < n; ++j) a[j] = std::fabs(a[j]); return;
      case Op::sign: for (std::size_t j = 0; j < n; ++j) a[j] = sign_of(a[j]); return;
      case Op::exp: g = [](double x) { return std::exp(x); }; break;
      case Op::expm1: g = [](double x) { return std::expm1(x); }; break;
      case Op::log: g = [](double x) { return std::log(x); }; break;
      case Op::log1p: g = [](double x) { return std::log1p(x); }; break;
      case Op::log2: g = [](double x) { return std::log2(x); }; break;
      case Op::log10: g = [](double x) { return std::log10(x); }; break;
      case Op::sin: g = [](double x) { return std::sin(x); }; break;
      case Op::cos: g = [](double x) { return std::cos(x); }; break;
      case Op::tan: g = [](double x) { return std::tan(x); }; break;
      case Op::arcsin: g = [](double x) { return std::asin(x); }; break;
      case Op::arccos: g = [](double x) { return std::acos(x); }; break;
      case Op::arctan: g = [](double x) { return std::atan(x); }; break;
      case Op::sinh: g = [](double x) { return std::sinh(x); }; break;
      case Op::cosh: g = [](double x) { return std::cosh(x); }; break;
      case Op::tanh: g = [](double x) { return std::tanh(x); }; break;
      case Op::arcsinh: g = [](double x) { return std::asinh(x); }; break;
      case Op::arccosh: g = [](double x) { return std::acosh(x); }; break;
      case Op::arctanh: g = [](double x) { return std::atanh(x); }; break;
      default: return;
    }
    for (std::size_t j = 0; j < n; ++j) a[j] = g(a[j]);
  }

  std::vector<Op> ops_;
  std::vector<double> values_;
  Constants k_;
};

// A program as the generator functor the solvers take (BuiltinF's interface, less what only a
// built-in has: f′, the perspective past DBL_MAX, the tv and lossless shortcuts). f_inf: f̃∞.
struct ProgramF {
  const Program* program;
  double f_inf;
  explicit ProgramF(const Program& p) : program(&p), f_inf(p.constants().f_inf - p.constants().tilt) {}
  double operator()(double t) const { return program->f_tilde(t); }
  void many(const double* t, std::size_t n, double* out) const { program->f_tilde(t, n, out); }
  // The perspective y·f̃(t) at t = u·2¹²⁸ > DBL_MAX, y > 0, in extended range (generators.hpp,
  // term_huge_of); where that is undefined (a sine of such a t), the bound f̃∞·x.
  double huge(double y, double u) const {
    const double v = wide::mul(Wide::of(y), program->wide_tilde(Wide::norm(u, 128))).value();
    if (std::isnan(v)) return f_inf < kInf ? f_inf * (u * (y * kHugeUp)) : kInf;
    return v < 0.0 ? 0.0 : v;
  }
};

}  // namespace mentored
