#!/usr/bin/env bash
# The whole suite, from a fresh machine: installs what it needs, then checks the proofs, the
# tests and the notebooks. This is the README's test command, and .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v coqc >/dev/null 2>&1; then
  SUDO=$([ "$(id -u)" -eq 0 ] && echo "" || echo sudo)
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq coq >/dev/null
fi
python3 -m pip install --quiet ".[test]"

make -C proofs
# The compiled core under ASan + UBSan, on the tests that reach it (about 2 minutes with its build;
# docs/reliability.md). The atheris fuzzer (fuzz/README.md) is run by hand, not here.
fuzz/sanitized.sh
# -P: import the installed package (with its compiled core), not the source folder.
python3 -P -m pytest tests --nbmake notebooks "$@"
