"""Which rejection sampler vLLM's model runners build, with and without MENTORED_*: run by hand in a
venv with vLLM installed (0.33.0 was checked; CPU is enough, nothing is run on a device).

    pip install vllm==0.33.0 && pip install . && python -P benchmarks/vllm_runners.py

Each case is a fresh process. It sets (or not) MENTORED_DIVERGENCE=kl MENTORED_BUDGET=0.1, imports
the runner module before or after ``register()``, and builds the sampler through that module's own
name as the runner does: ``RejectionSampler(sampler, spec_config, device, watermark_key=None)``
(v2, vllm/v1/worker/gpu/model_runner.py) or ``RejectionSampler(sampler, spec_config, device)`` (v1,
vllm/v1/worker/gpu_model_runner.py). ``spec_config`` is vLLM's SpeculativeConfig with the fields the
samplers read set directly (a real one needs a model). Prints one line per case: the class built, or
the refusal.
"""

from __future__ import annotations

import subprocess
import sys

CASE = r"""
import os, sys
runner_name, order, env, method = sys.argv[1:5]
if env == "set":
    os.environ["MENTORED_DIVERGENCE"], os.environ["MENTORED_BUDGET"] = "kl", "0.1"
import importlib
import torch
from vllm.config import SpeculativeConfig
if order == "runner_first":
    importlib.import_module(runner_name)
from mentored import vllm_plugin
vllm_plugin.register()
runner = importlib.import_module(runner_name)
spec = SpeculativeConfig.__new__(SpeculativeConfig)
for k, v in dict(num_speculative_tokens=3, enable_adaptive_verification=False, rejection_sample_method=method,
                 synthetic_acceptance_rates=[0.5, 0.4, 0.3], fly_window_size=2, fly_entropy_threshold=0.3, fly_entropy_top_k=3).items():
    object.__setattr__(spec, k, v)
v2 = runner_name.endswith("gpu.model_runner")
if v2:
    from types import SimpleNamespace
    sampler = SimpleNamespace(logprobs_mode="raw_logprobs")
else:
    from vllm.v1.sample.sampler import Sampler
    sampler = Sampler()
try:
    args = (sampler, spec, torch.device("cpu"))
    built = runner.RejectionSampler(*args, watermark_key=None) if v2 else runner.RejectionSampler(*args)
    print(f"{type(built).__module__}.{type(built).__qualname__}", getattr(built, "mentored_config", "(vLLM's own)"))
except Exception as e:
    print(f"refused: {type(e).__name__}: {e}")
"""

RUNNERS = {"v2": "vllm.v1.worker.gpu.model_runner", "v1": "vllm.v1.worker.gpu_model_runner"}


def main() -> int:
    for label, module in RUNNERS.items():
        for order in ("runner_first", "plugin_first"):
            for env in ("set", "unset"):
                for method in ("standard", "synthetic", "block", "fly"):
                    res = subprocess.run([sys.executable, "-P", "-c", CASE, module, order, env, method], capture_output=True, text=True)
                    line = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else f"failed: {res.stderr.strip().splitlines()[-1]}"
                    print(f"{label} {order:>12} MENTORED_* {env:>5} {method:>9}: {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
