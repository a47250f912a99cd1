"""What vLLM builds at startup, with and without the plugin's settings: each case in a fresh process,
since vLLM loads its plugins once per process and ``register()`` reads the environment then."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import need_vllm, smollm_folder

need_vllm()

# vLLM's startup as the engine makes it: load the general plugins, then name the class each runner
# module would build (the v1 runner imports its sampler's name from the sampler's module).
_BUILT = """
from vllm.plugins import load_general_plugins
load_general_plugins()
import vllm.v1.worker.gpu_model_runner as runner
print(runner.RejectionSampler.__module__, runner.RejectionSampler.__name__)
"""

_REFUSED = """
import os
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
from vllm import LLM
try:
    LLM(model={folder!r}, dtype="float32", max_model_len=512, enforce_eager=True, kv_cache_memory_bytes=1 << 29,
        speculative_config={{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 2, "prompt_lookup_min": 2,
                            "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.0}})
except Exception as exc:
    print(type(exc).__name__, exc)
else:
    print("started")
"""


def _run(code: str, **env) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MENTORED_")}
    # -P: the installed package, not the clone's uncompiled sources in the current folder (which vLLM's
    # plugin loader would fail to import, and then start without the plugin, saying so only in its log)
    out = subprocess.run([sys.executable, "-P", "-c", code], env=dict(clean, **env), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_without_settings_vllm_builds_its_own_sampler():
    assert _run(_BUILT) == "vllm.v1.sample.rejection_sampler RejectionSampler"


@pytest.mark.parametrize("env", [dict(MENTORED_ENABLE="1"), dict(MENTORED_DIVERGENCE="hellinger", MENTORED_BUDGET="0.1")])
def test_with_settings_the_runner_builds_mentoreds(env):
    assert _run(_BUILT, **env) == "mentored.integrations.vllm_plugin MentoredRejectionSampler"


def test_a_setting_the_plugin_cannot_honour_refuses_to_start():
    said = _run(_REFUSED.format(folder=str(smollm_folder())), MENTORED_ENABLE="1")
    assert said.startswith("MentoredRefusal") and "rejection_sample_method='synthetic'" in said, said


def test_a_bad_setting_refuses_to_start_naming_it():
    out = subprocess.run([sys.executable, "-P", "-c", _BUILT], env=dict(os.environ, MENTORED_ENABLE="yes"), capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "MENTORED_ENABLE='yes'" in out.stderr
