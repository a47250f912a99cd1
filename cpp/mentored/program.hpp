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
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "generators.hpp"

namespace mentored {

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
  // f̃ from f's value at the point (inside (0, ∞)) or the limits, as SymbolicInfo.f_tilde.
  double finish(double x, double raw) const {
    const bool inside = x > 0.0 && std::isfinite(x);
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
};

}  // namespace mentored
