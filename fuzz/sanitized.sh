#!/usr/bin/env bash
# The compiled core under AddressSanitizer + UndefinedBehaviorSanitizer (CMake option
# MENTORED_SANITIZE), then pytest on the tests that reach it.
#
#   fuzz/sanitized.sh                      # the default subset (about a minute after the build)
#   fuzz/sanitized.sh tests/test_path.py   # any pytest arguments instead
#   fuzz/sanitized.sh --fuzz -runs=5000     # fuzz/fuzz_core.py (atheris) against the sanitized core
#
# The extension is built with plain CMake into build/asan and run from a package folder there
# (build/asan/pkg: the Python sources linked, the sanitized _core beside them), so the normal
# editable install is left alone. Python itself is not instrumented, hence LD_PRELOAD of gcc's
# libasan (the runtime must come first) and detect_leaks=0 (CPython's own allocations "leak" at
# exit). halt_on_error / -fno-sanitize-recover=all make any finding fail the run.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/asan
PY=${PYTHON:-python3}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMENTORED_SANITIZE=ON \
  -DSKBUILD_PROJECT_NAME=mentored -DSKBUILD_PROJECT_VERSION=0.1.0 \
  -Dpybind11_DIR="$($PY -m pybind11 --cmakedir)" -DPython_EXECUTABLE="$(command -v $PY)" >/dev/null
cmake --build "$B" -j "$(nproc)" >/dev/null
rm -rf "$B/pkg" && mkdir -p "$B/pkg/mentored"
# every source file and sub-package (divergences/, check/, …, models/), not the compiled modules
for f in mentored/*; do
  case "$f" in *.so|*/__pycache__) ;; *) ln -s "$PWD/$f" "$B/pkg/mentored/" ;; esac
done
cp "$B"/_core*.so "$B/pkg/mentored/"
# The editable install puts a finder for `mentored` ahead of sys.path; take it out so that
# PYTHONPATH's copy (with the sanitized core) is the one imported.
cat > "$B/pkg/sitecustomize.py" <<'PY'
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "_editable_skbc_mentored" not in type(f).__module__]
PY
RUN=(-m pytest)
if [ "${1:-}" = "--fuzz" ]; then
  shift
  RUN=(fuzz/fuzz_core.py)
elif [ $# -eq 0 ]; then
  # draft trees (cpp/mentored/tree.hpp): chains, the node solver at its extremes, the law, greedy walks
  set -- tests/test_reliability.py tests/test_errors.py tests/test_path.py tests/test_tree.py::test_a_chain_is_rejection_sample_without_draft_probs \
    tests/test_tree.py::test_the_core_node_solver_at_ties_and_extremes tests/test_tree.py::test_the_emitted_law_at_each_node_is_its_verifier \
    tests/test_tree.py::test_greedy_requests_follow_the_argmax -q -x -p no:cacheprovider
fi
LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
MENTORED_SANITIZED=1 PYTHONPATH="$PWD/$B/pkg" \
  $PY -P -c 'import mentored, sys; assert "build/asan" in mentored._core.__file__, mentored._core.__file__' 
LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
MENTORED_SANITIZED=1 PYTHONPATH="$PWD/$B/pkg" \
  $PY -P "${RUN[@]}" "$@"
