// pybind11 bindings: the private module mentored._core.
//
// The C++ side takes C-contiguous arrays of the exact dtype and returns per-row statuses; the
// Python side (mentored/_solve.py) validates, converts, and turns statuses into errors.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "mentored/generators.hpp"
#include "mentored/path.hpp"
#include "mentored/solve.hpp"

namespace py = pybind11;
using namespace mentored;

namespace {

template <class T>
using carray = py::array_t<T, py::array::c_style>;

Generator generator(int code) {
  if (code < 0 || code >= kGeneratorCount) throw std::invalid_argument("unknown divergence code " + std::to_string(code));
  return static_cast<Generator>(code);
}

// Batched solve for (B, n) arrays; returns (π, results (B, 6), status (B,)).
template <class T>
py::tuple solve(carray<T> p, carray<T> q, int code, int mode, carray<double> values, int threads) {
  if (p.ndim() != 2 || q.ndim() != 2 || p.shape(0) != q.shape(0) || p.shape(1) != q.shape(1))
    throw std::invalid_argument("target and draft must be (B, n) arrays of one shape");
  const auto rows = static_cast<std::size_t>(p.shape(0)), n = static_cast<std::size_t>(p.shape(1));
  if (values.ndim() != 1 || static_cast<std::size_t>(values.shape(0)) != rows)
    throw std::invalid_argument("one budget or acceptance per row is required");
  if (mode != 0 && mode != 1) throw std::invalid_argument("mode must be 0 (budget) or 1 (acceptance)");
  const BuiltinF f(generator(code));
  carray<T> pi({rows, n});
  carray<double> results({rows, static_cast<std::size_t>(kRowFields)});
  py::array_t<int> status(static_cast<py::ssize_t>(rows));
  {
    const T* pp = p.data();
    const T* qq = q.data();
    const double* vv = values.data();
    T* out = pi.mutable_data();
    double* res = results.mutable_data();
    int* st = status.mutable_data();
    py::gil_scoped_release release;
    solve_batch(pp, qq, rows, n, f, static_cast<Mode>(mode), vv, threads, out, res, st);
  }
  return py::make_tuple(pi, results, status);
}

// One row, many questions: the structure with its divergence tables cached by code.
class PyPath {
 public:
  PyPath(carray<double> p, carray<double> q) : tables_(kGeneratorCount), ready_(kGeneratorCount, false) {
    if (p.ndim() != 1 || q.ndim() != 1 || p.shape(0) != q.shape(0))
      throw std::invalid_argument("target and draft must be 1-D arrays of one length");
    const Status st = path_.build(p.data(), q.data(), static_cast<std::size_t>(p.shape(0)));
    if (st == Status::zero_row) throw std::invalid_argument("target or draft sums to zero");
    if (st != Status::ok) throw std::invalid_argument("target and draft must be finite and nonnegative");
  }

  const Path& path() const { return path_; }

  py::tuple at(double s) const {
    const Point x = path_.at(s);
    return py::make_tuple(x.s, x.t_lo, x.t_hi);
  }

  py::tuple pi(double s) const {
    const Point x = path_.at(s);
    carray<double> out(static_cast<py::ssize_t>(path_.size()));
    const double a = path_.build_pi(x, out.mutable_data());
    return py::make_tuple(out, a);
  }

  double s_max(int code) const { return path_.s_max(generator_f_inf(generator(code))); }

  double divergence_at(int code, double s) const { return path_.divergence(table(code), BuiltinF(generator(code)), path_.at(s)); }

  // s, t_lo, t_hi, D for each budget; the table is built once.
  carray<double> frontier(int code, carray<double> budgets) const {
    const BuiltinF f(generator(code));
    const Table& tab = table(code);
    const auto k = static_cast<std::size_t>(budgets.size());
    carray<double> out({k, static_cast<std::size_t>(4)});
    const double* b = budgets.data();
    double* o = out.mutable_data();
    {
      py::gil_scoped_release release;
      for (std::size_t i = 0; i < k; ++i) {
        const Point x = path_.solve_budget(tab, f, b[i]);
        o[4 * i + 0] = x.s;
        o[4 * i + 1] = x.t_lo;
        o[4 * i + 2] = x.t_hi;
        o[4 * i + 3] = path_.divergence(tab, f, x);
      }
    }
    return out;
  }

 private:
  const Table& table(int code) const {
    const Generator g = generator(code);
    if (!ready_[code]) {
      path_.tabulate(BuiltinF(g), tables_[code]);
      ready_[code] = true;
    }
    return tables_[code];
  }

  Path path_;
  mutable std::vector<Table> tables_;
  mutable std::vector<bool> ready_;
};

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "Compiled core of mentored: the sorted-ratio structure and the batched solver.";

  m.def("solve", &solve<double>, py::arg("target"), py::arg("draft"), py::arg("code"), py::arg("mode"),
        py::arg("values"), py::arg("threads"));
  m.def("solve", &solve<float>, py::arg("target"), py::arg("draft"), py::arg("code"), py::arg("mode"),
        py::arg("values"), py::arg("threads"));
  m.def("generator_f", [](int code, double t) { return generator_f(generator(code), t); }, py::arg("code"), py::arg("t"));
  m.def("generator_f_inf", [](int code) { return generator_f_inf(generator(code)); }, py::arg("code"));
  m.def("has_openmp", []() {
#ifdef _OPENMP
    return true;
#else
    return false;
#endif
  });

  py::class_<PyPath>(m, "Path")
      .def(py::init<carray<double>, carray<double>>(), py::arg("target"), py::arg("draft"))
      .def_property_readonly("n", [](const PyPath& x) { return x.path().size(); })
      .def_property_readonly("tv", [](const PyPath& x) { return x.path().tv(); })
      .def_property_readonly("d_up", [](const PyPath& x) { return x.path().d_up(); })
      .def_property_readonly("q0", [](const PyPath& x) { return x.path().q0(); })
      .def_property_readonly("s_end", [](const PyPath& x) { return x.path().s_end(); })
      .def("at", &PyPath::at, py::arg("s"))
      .def("pi", &PyPath::pi, py::arg("s"))
      .def("s_max", &PyPath::s_max, py::arg("code"))
      .def("divergence_at", &PyPath::divergence_at, py::arg("code"), py::arg("s"))
      .def("frontier", &PyPath::frontier, py::arg("code"), py::arg("budgets"));
}
