// pybind11 bindings for the tests only: mentored._core_testing, a module apart from the production
// mentored._core. It compiles the same headers with the same flags (CMakeLists.txt), so the passes
// it exposes are those the solver runs.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "mentored/kernels.hpp"
#include "mentored/oneshot.hpp"

namespace py = pybind11;
using namespace mentored;

namespace {

template <class T>
using carray = py::array_t<T, py::array::c_style>;

// The bucket key of every token of one row (OneShot::key, with the special keys), from the keys
// pass of the solver (exact=false) or token by token in float64 (exact=true): the fast pass must
// agree with the definition (tests/test_reliability.py).
template <class T>
py::array_t<std::uint16_t> bucket_keys(carray<T> p, carray<T> q, bool exact) {
  if (p.ndim() != 1 || q.ndim() != 1 || p.shape(0) != q.shape(0))
    throw std::invalid_argument("bucket_keys takes two rows of one length");
  const auto n = static_cast<std::size_t>(p.shape(0));
  double sp[3], sq[3];
  stats_pass(p.data(), n, sp);
  stats_pass(q.data(), n, sq);
  if (!(sp[0] > 0.0 && sp[0] < kInf && sq[0] > 0.0 && sq[0] < kInf && sp[1] >= 0.0 && sq[1] >= 0.0))
    throw std::invalid_argument("bucket_keys needs finite, nonnegative rows with positive sums");
  py::array_t<std::uint16_t> out(static_cast<py::ssize_t>(n));
  std::uint16_t* k = out.mutable_data();
  const double ip = 1.0 / sp[0], iq = 1.0 / sq[0];
  if (exact) {
    for (std::size_t i = 0; i < n; ++i) k[i] = exact_key(p.data()[i], q.data()[i], ip, iq);
  } else {
    keys_pass(p.data(), q.data(), n, ip, iq, k);
  }
  return out;
}

Generator generator_of(int code) {
  if (code < 0 || code >= kGeneratorCount) throw std::invalid_argument("unknown divergence code " + std::to_string(code));
  return static_cast<Generator>(code);
}

// f̃ at every ratio of t, one scalar generator_f call each: the reference of the vectorised loops
// (BuiltinF::many, which mentored._core.generator_f_array runs).
carray<double> generator_f_loop(int code, carray<double> t) {
  const Generator g = generator_of(code);
  carray<double> out(t.request().shape);
  const double* x = t.data();
  double* o = out.mutable_data();
  for (py::ssize_t i = 0; i < t.size(); ++i) o[i] = generator_f(g, x[i]);
  return out;
}

// fn at every element of x (the vectorisable logarithms of generators.hpp, against numpy's).
template <double (*fn)(double)>
carray<double> map(carray<double> x) {
  carray<double> out(x.request().shape);
  for (py::ssize_t i = 0; i < x.size(); ++i) out.mutable_data()[i] = fn(x.data()[i]);
  return out;
}

}  // namespace

PYBIND11_MODULE(_core_testing, m) {
  m.doc() = "Test hooks of mentored's compiled core (not used by the package).";
  m.def("bucket_keys", &bucket_keys<double>, py::arg("target"), py::arg("draft"), py::arg("exact"));
  m.def("bucket_keys", &bucket_keys<float>, py::arg("target"), py::arg("draft"), py::arg("exact"));
  m.def("generator_names", []() {
    py::list names;
    for (const char* name : kGeneratorNames) names.append(name);
    return names;
  });
  m.def("generator_f_loop", &generator_f_loop, py::arg("code"), py::arg("t"));
  m.def("log_positive", &map<log_positive>, py::arg("x"));
  m.def("log1p_positive", &map<log1p_positive>, py::arg("x"));
}
