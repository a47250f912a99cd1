// pybind11 bindings: the private module mentored._core.
//
// The C++ side takes C-contiguous arrays of the exact dtype and returns per-row statuses; the
// Python side (mentored/_solve.py) validates, converts, and turns statuses into errors.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <stdexcept>
#include <string>
#include <vector>

#include "mentored/generators.hpp"
#include "mentored/kernels.hpp"
#include "mentored/path.hpp"
#include "mentored/program.hpp"
#include "mentored/solve.hpp"
#include "mentored/speculative.hpp"
#include "mentored/tree.hpp"

namespace py = pybind11;
using namespace mentored;

namespace {

template <class T>
using carray = py::array_t<T, py::array::c_style>;

// Budgets of MentoredPath.frontier solved between two checks for signals (O(log n) each).
constexpr std::size_t kFrontierChunk = 1 << 12;  // a few µs each: ~15 ms

Generator generator(int code) {
  if (code < 0 || code >= kGeneratorCount) throw std::invalid_argument("unknown divergence code " + std::to_string(code));
  return static_cast<Generator>(code);
}

// (B, n) of a batched call, after the checks the core does not leave to its caller.
template <class T>
std::pair<std::size_t, std::size_t> batch_shape(const carray<T>& p, const carray<T>& q, int mode, const carray<double>& values) {
  if (p.ndim() != 2 || q.ndim() != 2 || p.shape(0) != q.shape(0) || p.shape(1) != q.shape(1))
    throw std::invalid_argument("target and draft must be (B, n) arrays of one shape");
  const auto rows = static_cast<std::size_t>(p.shape(0)), n = static_cast<std::size_t>(p.shape(1));
  if (values.ndim() != 1 || static_cast<std::size_t>(values.shape(0)) != rows)
    throw std::invalid_argument("one budget, acceptance or price per row is required");
  if (mode != 0 && mode != 1 && mode != 2) throw std::invalid_argument("mode must be 0 (budget), 1 (acceptance) or 2 (price)");
  return {rows, n};
}

// The sum tolerances of the batched solvers (RowCheck): relative, nonnegative, ∞ for none.
void rtol_arg(double rtol_p, double rtol_q) {
  if (!(rtol_p >= 0.0) || !(rtol_q >= 0.0)) throw std::invalid_argument("rtol_p and rtol_q must be nonnegative (inf: no check)");
}

// out= of the batched solvers: None (a new array), or a (B, n) C-contiguous array of U that
// receives π, taken as it is (a cast would make a copy, and π would land in the copy). It may not
// share memory with the inputs: π is written while they are read.
template <class U, class T>
carray<U> out_arg(const py::object& out, std::size_t rows, std::size_t n, const carray<T>& p, const carray<T>& q) {
  if (out.is_none()) return carray<U>({rows, n});
  if (!py::isinstance<carray<U>>(out)) throw std::invalid_argument("out must be a C-contiguous array of the output dtype");
  auto pi = py::reinterpret_borrow<carray<U>>(out);
  if (pi.ndim() != 2 || static_cast<std::size_t>(pi.shape(0)) != rows || static_cast<std::size_t>(pi.shape(1)) != n ||
      !pi.writeable())
    throw std::invalid_argument("out must be a writeable C-contiguous (B, n) array of the output dtype");
  const auto* lo = reinterpret_cast<const char*>(pi.data());
  const auto* hi = lo + rows * n * sizeof(U);
  for (const auto* x : {reinterpret_cast<const char*>(p.data()), reinterpret_cast<const char*>(q.data())}) {
    if (rows * n > 0 && x < hi && lo < x + rows * n * sizeof(T))
      throw std::invalid_argument("out shares memory with the target or the draft; pass a separate array");
  }
  return pi;
}

// Rows per chunk of a batched call: per thread, at most 2²⁰ tokens and at most 256 rows (a row
// costs about 10 ns a token and some 50 µs of its own), a few tens of ms, between which the GIL is
// taken back to check for signals (Ctrl-C); every thread's buffers are trimmed at the end. Rows are
// independent: the results are those of one pass, bit for bit.
inline std::size_t chunk_rows(std::size_t rows, std::size_t n, int nt) {
  const std::size_t by_tokens = (std::size_t{1} << 20) / std::max<std::size_t>(n, 1);
  const std::size_t per_thread = std::max<std::size_t>(1, std::min<std::size_t>(by_tokens, 256));
  return std::min(rows, per_thread * static_cast<std::size_t>(nt));
}

// Batched solve for (B, n) arrays, checks included (one pass across the boundary): returns (π,
// results (B, 8) as RowResult, status (B,) as Status, stats (B, 6) as RowCheck); rtol, out: above.
// U: the type of π (T, or float for float64 rows whose output is float32).
// F: BuiltinF, or ProgramF (a user generator compiled to a program).
template <class T, class U, class F>
py::tuple solve_with(carray<T> p, carray<T> q, const F& f, int mode, carray<double> values, int threads, double rtol_p,
                     double rtol_q, py::object out) {
  const auto [rows, n] = batch_shape(p, q, mode, values);
  rtol_arg(rtol_p, rtol_q);
  carray<U> pi = out_arg<U>(out, rows, n, p, q);
  carray<double> results({rows, static_cast<std::size_t>(kRowFields)});
  py::array_t<int> status(static_cast<py::ssize_t>(rows));
  carray<double> stats({rows, std::size_t{6}});
  double* sts = stats.mutable_data();
  const T* pp = p.data();
  const T* qq = q.data();
  const double* vv = values.data();
  U* o = pi.mutable_data();
  double* res = results.mutable_data();
  int* st = status.mutable_data();
  const int nt = batch_threads(threads, rows, n);
  const std::size_t chunk = chunk_rows(rows, n, nt);
  for (std::size_t r0 = 0; r0 < rows; r0 += chunk) {
    const std::size_t len = std::min(chunk, rows - r0);
    const bool last = r0 + len >= rows;
    {
      py::gil_scoped_release release;
      solve_batch(pp + r0 * n, qq + r0 * n, len, n, f, static_cast<Mode>(mode), vv + r0, nt, o + r0 * n,
                  res + r0 * kRowFields, st + r0, rtol_p, rtol_q, sts + 6 * r0, last);
    }
    if (!last && PyErr_CheckSignals() != 0) {
      {  // Interrupted: the threads' buffers are trimmed as a finished call leaves them.
        py::error_already_set pending;  // fetched with the GIL held
        {
          py::gil_scoped_release release;
          solve_batch(pp, qq, 0, n, f, static_cast<Mode>(mode), vv, nt, o, res, st, rtol_p, rtol_q, sts, true);
        }
        throw pending;
      }
    }
  }
  return py::make_tuple(pi, results, status, stats);
}

template <class T, class U = T>
py::tuple solve(carray<T> p, carray<T> q, int code, int mode, carray<double> values, int threads, double rtol_p,
                double rtol_q, py::object out) {
  return solve_with<T, U>(std::move(p), std::move(q), BuiltinF(generator(code)), mode, std::move(values), threads, rtol_p,
                          rtol_q, std::move(out));
}

// Batched solve for a user generator compiled to a program (program.hpp): the built-ins' path,
// threads and all, since nothing in it needs Python.
template <class T, class U = T>
py::tuple solve_program(carray<T> p, carray<T> q, const Program& program, int mode, carray<double> values, int threads,
                        double rtol_p, double rtol_q, py::object out) {
  return solve_with<T, U>(std::move(p), std::move(q), ProgramF(program), mode, std::move(values), threads, rtol_p, rtol_q,
                          std::move(out));
}

// Per row of a (B, n) array: Σx (float64), min and max, as a (B, 3) array; rows in parallel on the
// threads the solve runs on (batch_threads: threads ≤ 0 leaves a small batch on the calling thread).
template <class T>
carray<double> row_stats(carray<T> x, int threads) {
  if (x.ndim() != 2) throw std::invalid_argument("row_stats takes a (B, n) array");
  const auto rows = static_cast<std::size_t>(x.shape(0)), n = static_cast<std::size_t>(x.shape(1));
  carray<double> out({rows, std::size_t{3}});
  const T* data = x.data();
  double* o = out.mutable_data();
  const int nt = batch_threads(threads, rows, n);
  {
    py::gil_scoped_release release;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
#endif
    for (long long b = 0; b < static_cast<long long>(rows); ++b) stats_pass(data + b * n, n, o + 3 * b);
  }
  (void)nt;
  return out;
}

// A user generator f̃ (tilted, as in generators.hpp) given by two Python callables: `vec` maps a
// float64 array to f̃ of it, `scalar` maps one float. Tables need f̃ at every sorted ratio: they are
// filled from one call of `vec` on all ratios (no n Python calls); the budget search then calls
// `scalar` O(log n + 60) times. The GIL is held throughout.
struct PyF {
  py::object scalar;
  double f_inf;
  py::object vec;  // optional: lets OneShot evaluate a whole bucket in one call
  double operator()(double t) const { return scalar(t).cast<double>(); }
  void many(const double* t, std::size_t n, double* out) const {
    if (!vec || vec.is_none()) {
      for (std::size_t i = 0; i < n; ++i) out[i] = (*this)(t[i]);
      return;
    }
    carray<double> arg(static_cast<py::ssize_t>(n));
    std::copy(t, t + n, arg.mutable_data());
    carray<double> vals = py::cast<carray<double>>(vec(arg));
    if (vals.ndim() != 1 || static_cast<std::size_t>(vals.shape(0)) != n)
      throw std::invalid_argument("the vectorised generator must return one value per ratio");
    std::copy(vals.data(), vals.data() + n, out);
  }
};

// Path::tabulate visits the ratios in a fixed order; the first pass records them, the Python
// callable evaluates them all at once, and the second pass replays the values in the same order.
struct RecordF {
  std::vector<double>* ts;
  double f_inf;
  double operator()(double t) const {
    ts->push_back(t);
    return 0.0;
  }
};
struct ReplayF {
  const double* values;
  std::size_t count;
  mutable std::size_t next = 0;
  double f_inf;
  double operator()(double) const {
    if (next >= count) throw std::runtime_error("custom generator table: ratio count mismatch");
    return values[next++];
  }
};

void tabulate_custom(const Path& path, const py::object& vec, double f_inf, Table& tab) {
  std::vector<double> ts;
  ts.reserve(path.size());
  path.tabulate(RecordF{&ts, f_inf}, tab);
  carray<double> arg(static_cast<py::ssize_t>(ts.size()));
  std::copy(ts.begin(), ts.end(), arg.mutable_data());
  carray<double> vals = py::cast<carray<double>>(vec(arg));
  if (vals.ndim() != 1 || static_cast<std::size_t>(vals.shape(0)) != ts.size())
    throw std::invalid_argument("the vectorised generator must return one value per ratio");
  ReplayF replay{vals.data(), ts.size(), 0, f_inf};
  path.tabulate(replay, tab);
}

// Batched solve for a user generator: the one-shot solver of the built-ins, rows in sequence
// (the callables need the GIL); f is evaluated a bucket at a time through `vec`.
template <class T, class U = T>
py::tuple solve_custom(carray<T> p, carray<T> q, py::object vec, py::object scalar, double f_inf, int mode,
                       carray<double> values, double rtol_p, double rtol_q, py::object out) {
  const auto [rows, n] = batch_shape(p, q, mode, values);
  rtol_arg(rtol_p, rtol_q);
  carray<U> pi = out_arg<U>(out, rows, n, p, q);
  carray<double> results({rows, static_cast<std::size_t>(kRowFields)});
  py::array_t<int> status(static_cast<py::ssize_t>(rows));
  carray<double> stats({rows, std::size_t{6}});
  const PyF f{scalar, f_inf, vec};
  OneShot row;
  for (std::size_t b = 0; b < rows; ++b) {
    const std::size_t o = b * n;
    RowResult r;
    const Status st = solve_row(row, f, p.data() + o, q.data() + o, n, static_cast<Mode>(mode), values.data()[b],
                                pi.mutable_data() + o, r, RowCheck{rtol_p, rtol_q, stats.mutable_data() + 6 * b});
    status.mutable_data()[b] = static_cast<int>(st);
    r.store(results.mutable_data() + b * kRowFields);
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();  // the GIL is held: every row
  }
  return py::make_tuple(pi, results, status, stats);
}

// num_draft_tokens of verify: a list or tuple of ints (as vLLM passes it), or an integer array.
std::vector<std::int64_t> counts_arg(const py::object& n) {
  std::vector<std::int64_t> out;
  try {
    if (py::isinstance<py::list>(n) || py::isinstance<py::tuple>(n)) {
      const auto seq = py::reinterpret_borrow<py::sequence>(n);
      out.reserve(seq.size());
      for (const auto item : seq) out.push_back(item.cast<std::int64_t>());
    } else {
      const auto a = py::cast<carray<std::int64_t>>(n);
      if (a.ndim() != 1) throw std::invalid_argument("num_draft_tokens must be one-dimensional");
      out.assign(a.data(), a.data() + a.size());
    }
  } catch (const py::cast_error&) {
    throw std::invalid_argument("num_draft_tokens must hold integers");
  } catch (const py::error_already_set& e) {
    // Only a conversion's own failure is ours to rename: KeyboardInterrupt and the like propagate.
    if (!e.matches(PyExc_TypeError) && !e.matches(PyExc_ValueError) && !e.matches(PyExc_OverflowError)) throw;
    throw std::invalid_argument("num_draft_tokens must hold integers");
  }
  return out;
}

// Token ids of verify: an array of integers of any width (converted to int64; int32 ids are
// vLLM's), never floats or bools, which a conversion would truncate or read as 0/1 without a word.
carray<std::int64_t> ids_arg(const py::object& ids, const char* name) {
  const py::array a = py::array::ensure(ids);
  if (!a) throw py::type_error(std::string(name) + " must be an array of integers");
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u') throw py::type_error(std::string(name) + " must hold integer token ids");
  if (kind == 'u' && a.itemsize() == 8) {  // no safe cast to int64 (ensure would fail): read by value
    const auto u = py::array_t<std::uint64_t, py::array::c_style>::ensure(a);
    carray<std::int64_t> out(std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()));
    const std::uint64_t* x = u.data();
    std::int64_t* o = out.mutable_data();
    for (py::ssize_t i = 0; i < u.size(); ++i) {
      if (x[i] > static_cast<std::uint64_t>(INT64_MAX))
        throw std::invalid_argument(std::string(name) + ": id " + std::to_string(x[i]) + " (dtype uint64) at index " + std::to_string(i) +
                                    " is outside any vocabulary [0, V)");
      o[i] = static_cast<std::int64_t>(x[i]);
    }
    return out;
  }
  return carray<std::int64_t>::ensure(a);
}

// A step's divergences (speculative.hpp, StepF): a built-in's code, a user generator's Program (kept
// alive by the caller's list for the call), or None where π is given.
std::vector<StepF> divergences_arg(const py::list& divs) {
  std::vector<StepF> out;
  for (const auto item : divs) {
    if (item.is_none()) out.emplace_back(GivenF{});
    else if (py::isinstance<Program>(item)) out.emplace_back(ProgramF(item.cast<const Program&>()));
    else if (py::isinstance<py::int_>(item)) out.emplace_back(BuiltinF(generator(item.cast<int>())));
    else throw py::type_error("divergences must hold generator codes, Programs or None (π given)");
  }
  if (out.empty()) throw std::invalid_argument("divergences must hold at least one divergence");
  return out;
}

// An optional per-request array of the call: None, or a C-contiguous one of B entries of A.
template <class A>
std::optional<carray<A>> per_request_arg(const py::object& x, std::size_t B, const char* name) {
  if (x.is_none()) return std::nullopt;
  if (!py::isinstance<carray<A>>(x)) throw py::type_error(std::string(name) + " must be a C-contiguous array of its dtype");
  auto a = py::reinterpret_borrow<carray<A>>(x);
  if (a.ndim() != 1 || static_cast<std::size_t>(a.shape(0)) != B) throw std::invalid_argument(std::string(name) + " must have one entry per request");
  return a;
}

// which of a call: None, or each request's index into its n divergences.
std::optional<carray<std::int32_t>> which_arg_of(const py::object& which_arg, std::size_t B, std::size_t n) {
  auto which = per_request_arg<std::int32_t>(which_arg, B, "which");
  if (which)
    for (py::ssize_t b = 0; b < which->shape(0); ++b)
      if (which->data()[b] < 0 || static_cast<std::size_t>(which->data()[b]) >= n)
        throw std::invalid_argument("which: a divergence index out of range");
  return which;
}

// Verify in one call (speculative.hpp, verify_batch; Step describes the layout): q [T, V] or None
// (token-only drafts); draft [T], uniforms [T, 2] per position; budgets [T], or [1] for all;
// num_draft [B] (Σ = T); bonus [B] or [B, 1]; p [T + B·extra, V] (extra = 1: a bonus-position row
// after each request's drafts, checked too); divergences, which [B] int32 (None: divergences[0] for
// all); greedy [B] bool or None; priced [B] bool or None (request b's budgets are prices λ,
// docs/theory.md §4; Step::priced); pi [T, V] (dtype of p) and pi_x [T] float64 for requests whose
// divergence is None (given π, dense or token-only); placeholders: −1 drafts allowed (rejected).
// rtol_p, rtol_q: tolerances on the rows' sums (∞: none); lenient: failed rows decided, not refused
// (StepCheck); block: dense random requests verified as a block (verify_block); notes: also return log π,
// log p and D_f(π‖p) of each emitted token ([B, max n + 1] float64 each, Step). Ids: integer arrays of any width
// (ids_arg). Requests run in chunks of rows (chunk_rows) between which the GIL is taken back to
// check for signals: Ctrl-C raises KeyboardInterrupt within a chunk's time. Returns (out [B, max n + 1],
// int32 or int64; the first failed request, −1 if none; its StepStatus code; the position in it,
// −1 if none; the failing rows' {Σ, min, max} of target then draft, StepError). Shape errors raise
// ValueError; a draft, pi of another dtype than the target TypeError.
template <class T>
py::tuple verify(carray<T> p, py::object q_arg, py::object draft_ids, py::object num_draft, py::object bonus_ids,
                 carray<double> uniforms, carray<double> budgets, py::list divergences, py::object which_arg,
                 py::object greedy_arg, py::object pi_arg, py::object pi_x_arg, bool keep, int extra, bool placeholders,
                 int threads, bool int32, double rtol_p, double rtol_q, bool lenient, bool block, bool notes,
                 py::object priced_arg) {
  rtol_arg(rtol_p, rtol_q);
  const std::vector<StepF> divs = divergences_arg(divergences);
  std::optional<carray<T>> q;
  if (!q_arg.is_none()) {
    if (!py::isinstance<carray<T>>(q_arg)) throw py::type_error("draft probabilities must be a C-contiguous array of the target's dtype");
    q = py::reinterpret_borrow<carray<T>>(q_arg);
  }
  const carray<std::int64_t> draft = ids_arg(draft_ids, "draft_token_ids");
  const carray<std::int64_t> bonus = ids_arg(bonus_ids, "bonus_token_ids");
  if (p.ndim() != 2 || (q && (q->ndim() != 2 || p.shape(1) != q->shape(1))))
    throw std::invalid_argument("target and draft probabilities must be (rows, V) arrays of one V");
  const auto V = static_cast<std::size_t>(p.shape(1));
  const std::vector<std::int64_t> counts = counts_arg(num_draft);
  const std::size_t B = counts.size();
  if (extra != 0 && extra != 1) throw std::invalid_argument("extra must be 0 or 1");
  std::size_t T_ = 0, K = 0;
  for (const std::int64_t c : counts) {
    if (c < 0) throw std::invalid_argument("num_draft_tokens must be nonnegative");
    T_ += static_cast<std::size_t>(c);
    K = std::max(K, static_cast<std::size_t>(c));
  }
  if (q && static_cast<std::size_t>(q->shape(0)) != T_)
    throw std::invalid_argument("num_draft_tokens must sum to the number of draft rows");
  if (static_cast<std::size_t>(p.shape(0)) != T_ + B * static_cast<std::size_t>(extra))
    throw std::invalid_argument("target probabilities must have one row per draft (and one per request with extra = 1)");
  const auto n_eps = static_cast<std::size_t>(budgets.size());
  if (static_cast<std::size_t>(draft.size()) != T_ || (n_eps != T_ && n_eps != 1) ||
      static_cast<std::size_t>(uniforms.size()) != 2 * T_)
    throw std::invalid_argument("draft ids and uniforms must have one entry (uniforms: two) per draft row, budgets one or one per row");
  // (B,) or (B, 1): a (B, 2) array flattened would give request b its neighbour's ids.
  if (!((bonus.ndim() == 1 || (bonus.ndim() == 2 && bonus.shape(1) == 1)) && static_cast<std::size_t>(bonus.shape(0)) == B))
    throw std::invalid_argument("bonus_token_ids must have shape (B,) or (B, 1), one id per request");
  if (V == 0 && T_ > 0) throw std::invalid_argument("empty vocabulary");
  const auto which = which_arg_of(which_arg, B, divs.size());
  const auto greedy = per_request_arg<bool>(greedy_arg, B, "greedy");
  const auto priced = per_request_arg<bool>(priced_arg, B, "priced");
  std::optional<carray<T>> pi;
  std::optional<carray<double>> pi_x;
  const bool given = std::any_of(divs.begin(), divs.end(), [](const StepF& f) { return std::holds_alternative<GivenF>(f); });
  if (given && q) {
    if (!py::isinstance<carray<T>>(pi_arg)) throw py::type_error("pi must be a C-contiguous array of the target's dtype where π is given");
    pi = py::reinterpret_borrow<carray<T>>(pi_arg);
    if (pi->ndim() != 2 || static_cast<std::size_t>(pi->shape(0)) != T_ || static_cast<std::size_t>(pi->shape(1)) != V)
      throw std::invalid_argument("pi must have one row per draft row");
  } else if (given) {
    if (!py::isinstance<carray<double>>(pi_x_arg)) throw py::type_error("pi_x must be a C-contiguous float64 array where π is given");
    pi_x = py::reinterpret_borrow<carray<double>>(pi_x_arg);
    if (pi_x->ndim() != 1 || static_cast<std::size_t>(pi_x->shape(0)) != T_) throw std::invalid_argument("pi_x must have one entry per draft row");
  }
  Step<T> st;
  st.p = p.data();
  st.q = q ? q->data() : nullptr;
  st.draft = draft.data();
  st.n = counts.data();
  st.bonus = bonus.data();
  st.u = uniforms.data();
  st.eps = budgets.data();
  st.eps_step = n_eps == T_ ? 1 : 0;
  st.greedy = greedy ? greedy->data() : nullptr;
  st.priced = priced ? priced->data() : nullptr;
  st.which = which ? which->data() : nullptr;
  st.pi = pi ? pi->data() : nullptr;
  st.pi_x = pi_x ? pi_x->data() : nullptr;
  st.B = B;
  st.V = V;
  st.extra = static_cast<std::size_t>(extra);
  st.keep = keep;
  st.placeholders = placeholders;
  st.block = block;
  st.check = StepCheck{rtol_p, rtol_q, lenient};
  const std::size_t width = K + 1;
  py::array result = int32 ? py::array(carray<std::int32_t>({B, width})) : py::array(carray<std::int64_t>({B, width}));
  std::optional<carray<double>> logpi, logp, spent;
  if (notes) {
    logpi.emplace(std::vector<py::ssize_t>{static_cast<py::ssize_t>(B), static_cast<py::ssize_t>(width)});
    logp.emplace(std::vector<py::ssize_t>{static_cast<py::ssize_t>(B), static_cast<py::ssize_t>(width)});
    spent.emplace(std::vector<py::ssize_t>{static_cast<py::ssize_t>(B), static_cast<py::ssize_t>(width)});
    st.logpi = logpi->mutable_data();
    st.logp = logp->mutable_data();
    st.spent = spent->mutable_data();
  }
  StepError error;
  std::size_t failed;
  bool interrupted = false;
  {
    const std::size_t rows = static_cast<std::size_t>(p.shape(0));
    const int nt = batch_threads(threads, B, B ? rows * V / B : 0);
    const std::size_t max_rows = chunk_rows(rows, V, nt);
    void* o = result.mutable_data();
    const auto stop = [&interrupted]() {
      py::gil_scoped_acquire acquire;
      interrupted = PyErr_CheckSignals() != 0;  // the exception stays set until raised below
      return interrupted;
    };
    py::gil_scoped_release release;
    failed = int32 ? verify_batch(st, divs, nt, static_cast<std::int32_t*>(o), width, error, max_rows, stop)
                   : verify_batch(st, divs, nt, static_cast<std::int64_t*>(o), width, error, max_rows, stop);
  }
  if (interrupted) throw py::error_already_set();
  const auto bad = failed < B ? static_cast<std::int64_t>(failed) : std::int64_t{-1};
  carray<double> stats(6);
  std::copy(error.stats, error.stats + 6, stats.mutable_data());
  if (notes) return py::make_tuple(result, bad, static_cast<int>(error.status), error.position, stats, *logpi, *logp, *spent);
  return py::make_tuple(result, bad, static_cast<int>(error.status), error.position, stats);
}

// A batch of draft trees in one call (tree.hpp, tree_batch; Tree describes the layout): p [N, V];
// tokens, parents [N] (parents local to each request: −1 at its node 0, else an earlier node);
// num_nodes [B] (each ≥ 1, Σ = N); uniforms [N, 2]; budgets [B], or [1] for all; divergences:
// built-in codes, or None where the caller gives each node's π_parent(x_j) in given [N]; which [B]
// int32 (None: divergences[0] for all); greedy [B] bool or None; priced [B] bool or None (request b's
// budget is a price λ, node_masses); length: objective "length", else
// "acceptance"; rtol: the tolerance on the rows' sums (∞: none). Returns (out int32 [B, max depth +
// 1]: the accepted tokens, the emitted one, −1; last int64 [B]: the local index of the last accepted
// node; accept [N]: π_parent(x_j) (1 at roots); value [N]: A(j), the expected accepted tokens from
// j; the first failed request, −1 if none; its StepStatus code; the node in it; that node's target
// row {Σ, min, max}). Shape errors raise ValueError.
template <class T>
py::tuple tree(carray<T> p, py::object token_ids, py::object parent_ids, py::object num_nodes, carray<double> uniforms,
               carray<double> budgets, py::list divergences, py::object which_arg, py::object greedy_arg, py::object given_arg,
               bool keep, bool length, int threads, double rtol, py::object priced_arg) {
  rtol_arg(rtol, rtol);
  std::vector<TreeF> divs;
  bool given_needed = false;
  for (const auto item : divergences) {
    if (item.is_none()) divs.emplace_back(GivenF{}), given_needed = true;
    else if (py::isinstance<py::int_>(item)) divs.emplace_back(BuiltinF(generator(item.cast<int>())));
    else throw py::type_error("tree divergences must hold built-in generator codes or None (π given)");
  }
  if (divs.empty()) throw std::invalid_argument("divergences must hold at least one divergence");
  const carray<std::int64_t> token = ids_arg(token_ids, "tokens");
  const carray<std::int64_t> parent = ids_arg(parent_ids, "parents");
  const std::vector<std::int64_t> counts = counts_arg(num_nodes);
  const std::size_t B = counts.size();
  std::size_t N = 0;
  for (const std::int64_t c : counts) {
    if (c < 1) throw std::invalid_argument("num_nodes must be positive: every tree has its root");
    N += static_cast<std::size_t>(c);
  }
  if (p.ndim() != 2 || static_cast<std::size_t>(p.shape(0)) != N) throw std::invalid_argument("target probabilities must be (N, V), one row per node");
  const auto V = static_cast<std::size_t>(p.shape(1));
  if (V == 0 && N > 0) throw std::invalid_argument("empty vocabulary");
  const auto n_eps = static_cast<std::size_t>(budgets.size());
  if (static_cast<std::size_t>(token.size()) != N || static_cast<std::size_t>(parent.size()) != N ||
      static_cast<std::size_t>(uniforms.size()) != 2 * N || (n_eps != B && n_eps != 1))
    throw std::invalid_argument("tokens, parents and uniforms must have one entry (uniforms: two) per node, budgets one or one per request");
  const auto which = which_arg_of(which_arg, B, divs.size());
  const auto greedy = per_request_arg<bool>(greedy_arg, B, "greedy");
  const auto priced = per_request_arg<bool>(priced_arg, B, "priced");
  std::optional<carray<double>> given;
  if (given_needed) {
    if (!py::isinstance<carray<double>>(given_arg)) throw py::type_error("given must be a C-contiguous float64 array where π is given");
    given = py::reinterpret_borrow<carray<double>>(given_arg);
    if (given->ndim() != 1 || static_cast<std::size_t>(given->shape(0)) != N) throw std::invalid_argument("given must have one entry per node");
  }
  // The output's width: the deepest node, over parents that are well formed (the others are
  // refused by the request's own check).
  std::size_t width = 1;
  {
    std::vector<std::size_t> depth(N, 0);
    const std::int64_t* a = parent.data();
    for (std::size_t b = 0, s = 0; b < B; s += static_cast<std::size_t>(counts[b]), ++b)
      for (std::size_t j = 1; j < static_cast<std::size_t>(counts[b]); ++j)
        if (a[s + j] >= 0 && static_cast<std::size_t>(a[s + j]) < j) {
          depth[s + j] = depth[s + static_cast<std::size_t>(a[s + j])] + 1;
          width = std::max(width, depth[s + j] + 1);
        }
  }
  Tree<T> tr;
  tr.p = p.data();
  tr.token = token.data();
  tr.parent = parent.data();
  tr.n = counts.data();
  tr.u = uniforms.data();
  tr.eps = budgets.data();
  tr.eps_step = n_eps == 1 ? 0 : 1;
  tr.greedy = greedy ? greedy->data() : nullptr;
  tr.priced = priced ? priced->data() : nullptr;
  tr.which = which ? which->data() : nullptr;
  tr.given = given ? given->data() : nullptr;
  tr.B = B;
  tr.V = V;
  tr.keep = keep;
  tr.length = length;
  tr.rtol = rtol;
  carray<std::int32_t> out({B, width});
  carray<std::int64_t> last(static_cast<py::ssize_t>(B));
  carray<double> accept(static_cast<py::ssize_t>(N)), value(static_cast<py::ssize_t>(N));
  StepError error;
  std::size_t failed;
  {
    const int nt = batch_threads(threads, B, B ? N * V / B : 0);
    std::int32_t* o = out.mutable_data();
    std::int64_t* l = last.mutable_data();
    double* acc = accept.mutable_data();
    double* val = value.mutable_data();
    py::gil_scoped_release release;
    failed = tree_batch(tr, divs, nt, o, width, l, acc, val, error);
  }
  const auto bad = failed < B ? static_cast<std::int64_t>(failed) : std::int64_t{-1};
  carray<double> stats(3);
  std::copy(error.stats, error.stats + 3, stats.mutable_data());
  return py::make_tuple(out, last, accept, value, bad, static_cast<int>(error.status), error.position, stats);
}

// The host layout of a batch of trees (tree.hpp, tree_layout) from global parents gp [N] (−1 at
// roots, else gp[i] < i): (depth, height, first [N + 1], kids, by_height, level), int64 arrays.
py::tuple tree_layout_of(carray<std::int64_t> gp) {
  if (gp.ndim() != 1) throw std::invalid_argument("parents must be one-dimensional");
  TreeLayout L;
  bool ok;
  {
    py::gil_scoped_release release;
    ok = tree_layout(gp.data(), static_cast<std::size_t>(gp.size()), L);
  }
  if (!ok) throw std::invalid_argument("parents must be -1 or an earlier node");
  const auto arr = [](const std::vector<std::int64_t>& v) {
    carray<std::int64_t> a(static_cast<py::ssize_t>(v.size()));
    std::copy(v.begin(), v.end(), a.mutable_data());
    return a;
  };
  return py::make_tuple(arr(L.depth), arr(L.height), arr(L.first), arr(L.kids), arr(L.by_height), arr(L.level));
}

// The class masses of a tree node's verifier (tree.hpp, node_masses), row by row: P, w [R, n]
// (column 0 the complement), budgets [R] (prices with price = true), a built-in's code. For the tests.
carray<double> tree_node_masses(carray<double> P, carray<double> w, carray<double> eps, int code, bool keep, bool price) {
  if (P.ndim() != 2 || w.ndim() != 2 || P.shape(0) != w.shape(0) || P.shape(1) != w.shape(1) || eps.ndim() != 1 ||
      eps.shape(0) != P.shape(0) || P.shape(1) < 1)
    throw std::invalid_argument("P and w must be (R, n) arrays of one shape, n ≥ 1, and budgets (R,)");
  const BuiltinF f(generator(code));
  const auto R = static_cast<std::size_t>(P.shape(0)), n = static_cast<std::size_t>(P.shape(1));
  carray<double> m({R, n});
  TreeWork wk;
  for (std::size_t r = 0; r < R; ++r) node_masses(f, P.data() + r * n, w.data() + r * n, n, eps.data()[r], keep, m.mutable_data() + r * n, wk, price);
  return m;
}

// π_x of the verifier of a token-only drafter (speculative.hpp, onehot_pi_x), elementwise over
// px = p_x/Σp and budgets of one length, for a built-in's code or a Program; price = true: the
// budgets are prices λ (onehot_pi_x_price).
py::array_t<double> onehot(carray<double> px, carray<double> eps, py::object divergence, bool keep, bool price) {
  if (px.ndim() != 1 || eps.ndim() != 1 || px.shape(0) != eps.shape(0)) throw std::invalid_argument("px and budgets must be 1-D arrays of one length");
  py::list one;
  one.append(divergence);
  const std::vector<StepF> divs = divergences_arg(one);
  const std::size_t n = static_cast<std::size_t>(px.shape(0));
  py::array_t<double> out(static_cast<py::ssize_t>(n));
  const double* x = px.data();
  const double* e = eps.data();
  double* o = out.mutable_data();
  std::visit(
      [&](const auto& f) {
        if constexpr (std::is_same_v<std::decay_t<decltype(f)>, GivenF>) throw py::type_error("onehot needs a generator code or a Program");
        else {
          py::gil_scoped_release release;
          for (std::size_t i = 0; i < n; ++i) o[i] = price ? onehot_pi_x_price(f, x[i], e[i], keep) : onehot_pi_x(f, x[i], e[i], keep);
        }
      },
      divs[0]);
  return out;
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

  // A user generator's table, built once per generator by the Python side and passed back in.
  Table table_custom(py::object vec, double f_inf) const {
    Table tab;
    tabulate_custom(path_, vec, f_inf, tab);
    return tab;
  }

  double divergence_custom(const Table& tab, py::object scalar, double s) const {
    return path_.divergence(tab, PyF{scalar, tab.f_inf}, path_.at(s));
  }

  carray<double> frontier_custom(const Table& tab, py::object scalar, carray<double> budgets, bool acceptance, bool price) const {
    return frontier_of(tab, PyF{scalar, tab.f_inf}, budgets, false, acceptance, price);  // the callable needs the GIL
  }

  // The same from a user generator's program (program.hpp): no Python in the loop, the GIL released.
  Table table_program(const Program& program) const {
    Table tab;
    path_.tabulate(ProgramF(program), tab);
    return tab;
  }

  double divergence_program(const Table& tab, const Program& program, double s) const {
    return path_.divergence(tab, ProgramF(program), path_.at(s));
  }

  carray<double> frontier_program(const Table& tab, const Program& program, carray<double> budgets, bool acceptance,
                                  bool price) const {
    return frontier_of(tab, ProgramF(program), budgets, true, acceptance, price);
  }

  double s_max_for(double f_inf) const { return path_.s_max(f_inf); }

  double divergence_at(int code, double s) const { return path_.divergence(table(code), BuiltinF(generator(code)), path_.at(s)); }

  // s, t_lo, t_hi, D (and with acceptance, Σ min(π, q)) for each budget, or for each price λ > 0
  // with price (the optimum of A − λ·D_f: Path::solve_price); the table is built once.
  carray<double> frontier(int code, carray<double> budgets, bool acceptance, bool price) const {
    return frontier_of(table(code), BuiltinF(generator(code)), budgets, true, acceptance, price);
  }

  // Σ min(π(s)_i, q_i) in O(log n), accurate however small (Path::acceptance).
  double acceptance_at(double s) const { return path_.acceptance(path_.at(s)); }

 private:
  template <class F>
  carray<double> frontier_of(const Table& tab, const F& f, carray<double> budgets, bool release_gil,
                             bool acceptance, bool price = false) const {
    const auto k = static_cast<std::size_t>(budgets.size());
    const std::size_t w = acceptance ? 5 : 4;
    carray<double> out({k, w});
    const double* b = budgets.data();
    double* o = out.mutable_data();
    for (std::size_t i0 = 0; i0 < k; i0 += kFrontierChunk) {
      const std::size_t i1 = std::min(k, i0 + kFrontierChunk);
      {
        std::optional<py::gil_scoped_release> release;  // reacquired before `out` is touched again
        if (release_gil) release.emplace();
        for (std::size_t i = i0; i < i1; ++i) {
          // Price ∞ is budget 0 and price 0 budget ∞ (solve_row); the search takes those in between.
          const Point x = !price                ? path_.solve_budget(tab, f, b[i])
                          : !(b[i] < kInf)      ? path_.solve_budget(tab, f, 0.0)
                          : b[i] > 0.0          ? path_.solve_price(tab, f, b[i])
                                                : path_.solve_budget(tab, f, kInf);
          o[w * i + 0] = x.s;
          o[w * i + 1] = x.t_lo;
          o[w * i + 2] = x.t_hi;
          o[w * i + 3] = path_.divergence(tab, f, x);
          if (acceptance) o[w * i + 4] = path_.acceptance(x);
        }
      }
      // Between chunks, with the GIL: a pending signal (Ctrl-C) raises here, not after all budgets.
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
    return out;
  }

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

// The names of the statuses Python reads and the modes it passes, exported as enums so that Python
// compares against members and never mirrors an integer. A switch without default over each enum,
// with -Wswitch an error here: an enumerator added in C++ and not named below stops the build.
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wswitch"
const char* enum_name(Status s) {
  switch (s) {
    case Status::ok: return "ok";
    case Status::zero_row: return "zero_row";
    case Status::bad_value: return "bad_value";
    case Status::unreachable: return "unreachable";
    case Status::off_sum: return "off_sum";
  }
  return nullptr;  // an integer past the last enumerator
}

const char* enum_name(StepStatus s) {
  switch (s) {
    case StepStatus::ok: return "ok";
    case StepStatus::bad_token: return "bad_token";
    case StepStatus::zero_row: return "zero_row";
    case StepStatus::bad_value: return "bad_value";
    case StepStatus::unreachable: return "unreachable";
    case StepStatus::bad_bonus: return "bad_bonus";
    case StepStatus::off_sum: return "off_sum";
    case StepStatus::bad_parent: return "bad_parent";
    case StepStatus::duplicate_token: return "duplicate_token";
  }
  return nullptr;
}

const char* enum_name(Mode s) {
  switch (s) {
    case Mode::budget: return "budget";
    case Mode::acceptance: return "acceptance";
    case Mode::price: return "price";
  }
  return nullptr;
}
#pragma GCC diagnostic pop

// Members 0, 1, ... up to the first integer without a name (the enums are numbered from 0 without
// gaps; tests/test_structure.py checks the members against the headers).
template <class E>
void export_enum(py::module_& m, const char* name, const char* doc) {
  py::enum_<E> e(m, name, doc);
  for (int v = 0; enum_name(static_cast<E>(v)); ++v) e.value(enum_name(static_cast<E>(v)), static_cast<E>(v));
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "Compiled core of mentored: the sorted-ratio structure and the batched solver.";

  // The built-in generators; every binding that takes a code takes a member (or its int value).
  py::enum_<Generator> generators(m, "Generator");
  for (int g = 0; g < kGeneratorCount; ++g) generators.value(kGeneratorNames[g], static_cast<Generator>(g));
  // Per-row statuses of solve and solve_custom (path.hpp), the status of verify (speculative.hpp),
  // and the mode solve takes; the core returns and takes their int values.
  export_enum<Status>(m, "Status", "Status of a row solved by solve / solve_custom (path.hpp).");
  export_enum<StepStatus>(m, "StepStatus", "Status of verify at its first failing request (speculative.hpp).");
  export_enum<Mode>(m, "Mode", "What solve's values are: budgets ε, acceptances a or prices λ (solve.hpp).");

  m.def("solve", &solve<double>, py::arg("target"), py::arg("draft"), py::arg("code"), py::arg("mode"),
        py::arg("values"), py::arg("threads"), py::arg("rtol_p") = kInf, py::arg("rtol_q") = kInf, py::arg("out") = py::none());
  m.def("solve", &solve<float>, py::arg("target"), py::arg("draft"), py::arg("code"), py::arg("mode"),
        py::arg("values"), py::arg("threads"), py::arg("rtol_p") = kInf, py::arg("rtol_q") = kInf, py::arg("out") = py::none());
  // float64 rows whose π is float32 (a float32 target with a float64 draft): rounded toward p.
  m.def("solve_to_float32", &solve<double, float>, py::arg("target"), py::arg("draft"), py::arg("code"), py::arg("mode"),
        py::arg("values"), py::arg("threads"), py::arg("rtol_p") = kInf, py::arg("rtol_q") = kInf, py::arg("out") = py::none());
  // User generators compiled to programs (program.hpp, mentored/_program.py). Registered before
  // the callables' overloads of solve_custom, which take any object for f_vec.
  py::enum_<Op> ops(m, "Op");
  for (int op = 0; op < kOpCount; ++op) ops.value(kOpNames[op], static_cast<Op>(op));
  py::class_<Program>(m, "Program")
      .def(py::init([](carray<int> ops, carray<double> values, double f0, double f_at_inf, double tilt, double f_inf,
                       carray<double> series, double radius) {
             const auto list = [](const auto& a) { return std::vector<typename std::decay_t<decltype(a)>::value_type>(a.data(), a.data() + a.size()); };
             return Program(list(ops), list(values), Program::Constants{f0, f_at_inf, tilt, f_inf, list(series), radius});
           }),
           py::arg("ops"), py::arg("values"), py::arg("f0"), py::arg("f_at_inf"), py::arg("tilt"), py::arg("f_inf"),
           py::arg("series"), py::arg("radius"))
      .def_property_readonly("f_inf", [](const Program& p) { return ProgramF(p).f_inf; })
      .def(
          "f_tilde",
          [](const Program& p, carray<double> t) {
            carray<double> out(t.request().shape);
            const double* x = t.data();
            double* o = out.mutable_data();
            const auto n = static_cast<std::size_t>(t.size());
            py::gil_scoped_release release;
            p.f_tilde(x, n, o);
            return out;
          },
          py::arg("t"));
  m.def("solve_custom", &solve_program<double>, py::arg("target"), py::arg("draft"), py::arg("program"), py::arg("mode"),
        py::arg("values"), py::arg("threads"), py::arg("rtol_p") = kInf, py::arg("rtol_q") = kInf, py::arg("out") = py::none());
  m.def("solve_custom", &solve_program<float>, py::arg("target"), py::arg("draft"), py::arg("program"), py::arg("mode"),
        py::arg("values"), py::arg("threads"), py::arg("rtol_p") = kInf, py::arg("rtol_q") = kInf, py::arg("out") = py::none());
  m.def("solve_custom_to_float32", &solve_program<double, float>, py::arg("target"), py::arg("draft"), py::arg("program"),
        py::arg("mode"), py::arg("values"), py::arg("threads"), py::arg("rtol_p") = kInf, py::arg("rtol_q") = kInf,
        py::arg("out") = py::none());
  m.def("solve_custom_to_float32", &solve_custom<double, float>, py::arg("target"), py::arg("draft"), py::arg("f_vec"),
        py::arg("f_scalar"), py::arg("f_inf"), py::arg("mode"), py::arg("values"), py::arg("rtol_p") = kInf, py::arg("rtol_q") = kInf,
        py::arg("out") = py::none());
  // Test hook: bytes held by the calling thread's solver buffers (those sized by the row).
  m.def("_workspace_bytes", []() { return thread_workspace().token_bytes(); });
  m.def("solve_custom", &solve_custom<double>, py::arg("target"), py::arg("draft"), py::arg("f_vec"),
        py::arg("f_scalar"), py::arg("f_inf"), py::arg("mode"), py::arg("values"), py::arg("rtol_p") = kInf, py::arg("rtol_q") = kInf,
        py::arg("out") = py::none());
  m.def("solve_custom", &solve_custom<float>, py::arg("target"), py::arg("draft"), py::arg("f_vec"),
        py::arg("f_scalar"), py::arg("f_inf"), py::arg("mode"), py::arg("values"), py::arg("rtol_p") = kInf, py::arg("rtol_q") = kInf,
        py::arg("out") = py::none());
  // p is not converted: a float32 step must not be widened to float64 by overload resolution.
  const auto def_verify = [&m](auto fn) {
    m.def("verify", fn, py::arg("target").noconvert(), py::arg("draft_probs"), py::arg("draft_token_ids"),
          py::arg("num_draft_tokens"), py::arg("bonus_token_ids"), py::arg("uniforms"), py::arg("budgets"),
          py::arg("divergences"), py::arg("which") = py::none(), py::arg("greedy") = py::none(), py::arg("pi") = py::none(),
          py::arg("pi_x") = py::none(), py::arg("keep") = false, py::arg("extra") = 0, py::arg("placeholders") = false,
          py::arg("threads") = 0, py::arg("int32") = false, py::arg("rtol_p") = kInf, py::arg("rtol_q") = kInf,
          py::arg("lenient") = false, py::arg("block") = false, py::arg("notes") = false, py::arg("priced") = py::none());
  };
  def_verify(&verify<double>);
  def_verify(&verify<float>);
  m.def("onehot", &onehot, py::arg("px"), py::arg("budgets"), py::arg("divergence"), py::arg("keep"), py::arg("price") = false);
  const auto def_tree = [&m](auto fn) {
    m.def("tree", fn, py::arg("target").noconvert(), py::arg("tokens"), py::arg("parents"), py::arg("num_nodes"), py::arg("uniforms"),
          py::arg("budgets"), py::arg("divergences"), py::arg("which") = py::none(), py::arg("greedy") = py::none(),
          py::arg("given") = py::none(), py::arg("keep") = true, py::arg("length") = true, py::arg("threads") = 0,
          py::arg("rtol") = kInf, py::arg("priced") = py::none());
  };
  def_tree(&tree<double>);
  def_tree(&tree<float>);
  m.def("tree_layout", &tree_layout_of, py::arg("parents"));
  m.def("tree_node_masses", &tree_node_masses, py::arg("P"), py::arg("w"), py::arg("budgets"), py::arg("code"), py::arg("keep"),
        py::arg("price") = false);
  m.def("row_stats", &row_stats<double>, py::arg("x"), py::arg("threads") = 0);
  m.def("row_stats", &row_stats<float>, py::arg("x"), py::arg("threads") = 0);
  m.def("generator_f", [](int code, double t) { return generator_f(generator(code), t); }, py::arg("code"), py::arg("t"));
  m.def(
      "generator_f_array",
      [](int code, carray<double> t) {
        const Generator g = generator(code);
        carray<double> out(t.request().shape);
        const double* x = t.data();
        double* o = out.mutable_data();
        BuiltinF(g).many(x, static_cast<std::size_t>(t.size()), o);
        return out;
      },
      py::arg("code"), py::arg("t"));
  m.def("generator_f_inf", [](int code) { return generator_f_inf(generator(code)); }, py::arg("code"));
  // The untilted generator's (tilt c = f'(1), f(0), f∞), f = f̃ + c(t − 1).
  m.def(
      "generator_constants",
      [](int code) {
        const GeneratorConstants k = generator_constants(generator(code));
        return py::make_tuple(k.tilt, k.f0, k.f_inf);
      },
      py::arg("code"));
  // f̃'(t) of the tilted generator at each t in [0, ∞]; side > 0: from the right at a kink (tv at 1).
  m.def(
      "generator_df_array",
      [](int code, carray<double> t, int side) {
        const Generator g = generator(code);
        carray<double> out(t.request().shape);
        const double* x = t.data();
        double* o = out.mutable_data();
        for (py::ssize_t i = 0; i < t.size(); ++i) o[i] = generator_df(g, x[i], side);
        return out;
      },
      py::arg("code"), py::arg("t"), py::arg("side") = 1);
  // (f̃')⁻¹(y) of the tilted generator at each y (0 below f̃'(0⁺), ∞ from f̃∞).
  m.def(
      "generator_dfinv_array",
      [](int code, carray<double> y) {
        const Generator g = generator(code);
        carray<double> out(y.request().shape);
        const double* x = y.data();
        double* o = out.mutable_data();
        for (py::ssize_t i = 0; i < y.size(); ++i) o[i] = generator_dfinv(g, x[i]);
        return out;
      },
      py::arg("code"), py::arg("y"));
  // λ, μ (solve.hpp, dual_params) from thresholds, as the batched solve returns them per row.
  m.def(
      "dual",
      [](int code, carray<double> t_lo, carray<double> t_hi, py::array_t<bool, py::array::c_style> binding) {
        const BuiltinF f(generator(code));
        const auto k = static_cast<std::size_t>(t_lo.size());
        if (t_lo.ndim() != 1 || t_hi.ndim() != 1 || binding.ndim() != 1 || static_cast<std::size_t>(t_hi.size()) != k ||
            static_cast<std::size_t>(binding.size()) != k)
          throw std::invalid_argument("t_lo, t_hi and binding must be 1-D arrays of one length");
        carray<double> lam(static_cast<py::ssize_t>(k)), mu(static_cast<py::ssize_t>(k));
        for (std::size_t i = 0; i < k; ++i) {
          RowResult r;
          r.t_lo = t_lo.data()[i];
          r.t_hi = t_hi.data()[i];
          dual_params(f, r, binding.data()[i], 0);
          lam.mutable_data()[i] = r.lam;
          mu.mutable_data()[i] = r.mu;
        }
        return py::make_tuple(lam, mu);
      },
      py::arg("code"), py::arg("t_lo"), py::arg("t_hi"), py::arg("binding"));
  m.def("has_openmp", []() {
#ifdef _OPENMP
    return true;
#else
    return false;
#endif
  });

  py::class_<Table>(m, "Table")
      .def_property_readonly("f_inf", [](const Table& t) { return t.f_inf; });

  py::class_<PyPath>(m, "Path")
      .def(py::init<carray<double>, carray<double>>(), py::arg("target"), py::arg("draft"))
      // Clamped to [0, 1]: the sums of a disjoint row can give 1 + 2⁻⁵² (then acceptance(0) < 0).
      .def_property_readonly("tv", [](const PyPath& x) { return std::min(std::max(x.path().tv(), 0.0), 1.0); })
      .def_property_readonly("q0", [](const PyPath& x) { return x.path().q0(); })
      .def_property_readonly("s_end", [](const PyPath& x) { return x.path().s_end(); })
      .def("at", &PyPath::at, py::arg("s"))
      .def("pi", &PyPath::pi, py::arg("s"))
      .def("divergence_at", &PyPath::divergence_at, py::arg("code"), py::arg("s"))
      .def("frontier", &PyPath::frontier, py::arg("code"), py::arg("budgets"), py::arg("acceptance") = false,
           py::arg("price") = false)
      .def("acceptance_at", &PyPath::acceptance_at, py::arg("s"))
      .def("s_max_for", &PyPath::s_max_for, py::arg("f_inf"))
      .def("table_custom", &PyPath::table_program, py::arg("program"))
      .def("divergence_custom", &PyPath::divergence_program, py::arg("table"), py::arg("program"), py::arg("s"))
      .def("frontier_custom", &PyPath::frontier_program, py::arg("table"), py::arg("program"), py::arg("budgets"),
           py::arg("acceptance") = false, py::arg("price") = false)
      .def("table_custom", &PyPath::table_custom, py::arg("f_vec"), py::arg("f_inf"))
      .def("divergence_custom", &PyPath::divergence_custom, py::arg("table"), py::arg("f_scalar"), py::arg("s"))
      .def("frontier_custom", &PyPath::frontier_custom, py::arg("table"), py::arg("f_scalar"), py::arg("budgets"),
           py::arg("acceptance") = false, py::arg("price") = false);
}
